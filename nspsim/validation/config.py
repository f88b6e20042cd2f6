"""Reading a reference row's configuration: the keys each kind may carry, typed accessors, limits, and
the two ways a row fails.

A malformed value (a count that is not a positive integer, a non-finite number, a flag that is not a
boolean, an unknown key) is :class:`BadConfig`, an input error that stops ``nspsim validate`` with one
line naming the row; a configuration nspsim does not model is :class:`NotExpressible`, which the row
reports as its reason. Keeping both here lets every row kind read its config the same way.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from nspsim.specs.cluster import ClusterSpec
from nspsim.validation.dataset import MAX_NUMBER, MIN_NUMBER
from nspsim.validation.hardware import row_cluster


class NotExpressible(ValueError):
    """The model cannot express a row; the message says why."""


class BadConfig(ValueError):
    """A row's configuration is malformed (a count that is not a positive integer, a flag that is not a
    boolean): an input error, reported with the row and never priced."""


MAX_GPUS = 2**20
MAX_BATCH = 2**20
MAX_SEQLEN = 2**30
MAX_SIMULATED_GPUS = 4096
MAX_SIMULATED_SAMPLES = 2**17
_MISSING = object()


def get_int(config: Mapping[str, Any], key: str, default: Any = _MISSING, *, hi: int = 2**40) -> int:
    """A positive integer setting (``default`` when absent)."""
    if key not in config:
        if default is _MISSING:
            raise NotExpressible(f"the configuration has no {key!r}")
        return int(default)
    value = config[key]
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= hi:
        raise BadConfig(f"{key} must be an integer in [1, {hi:,}], got {value!r}")
    return value


def get_num(config: Mapping[str, Any], key: str, default: Any = _MISSING) -> Any:
    """A positive finite number (``default`` when absent)."""
    if key not in config:
        if default is _MISSING:
            raise NotExpressible(f"the configuration has no {key!r}")
        return default
    value = config[key]
    if isinstance(value, bool) or not isinstance(value, int | float) or not MIN_NUMBER <= value <= MAX_NUMBER:
        raise BadConfig(f"{key} must be a positive number from {MIN_NUMBER:g} to {MAX_NUMBER:g}, got {value!r}")
    return float(value)


def get_pass(config: Mapping[str, Any], allowed: tuple[str, ...]) -> str:
    """The kernel row's ``pass``, one of ``allowed``."""
    value = get_value(config, "pass")
    if value not in allowed:
        raise BadConfig(f"pass must be one of {', '.join(allowed)}, got {value!r}")
    return str(value)


def get_bool(config: Mapping[str, Any], key: str, default: bool) -> bool:
    """A true/false setting (``default`` when absent)."""
    value = config.get(key, default)
    if not isinstance(value, bool):
        raise BadConfig(f"{key} must be true or false, got {value!r}")
    return value


CONFIG_KEYS: Mapping[str, frozenset[str]] = {
    "kernel": frozenset(
        {"gpu", "gpu_note", "op", "kernel", "pass", "batch", "seqlen", "heads", "kv_heads", "head_dim", "causal",
         "dtype", "m", "n", "k", "variant", "varlen", "gpus", "gpus_per_node"}
    ),
    "collective": frozenset(
        {"gpu", "gpu_note", "op", "gpus", "gpus_per_node", "bytes", "dtype", "nic", "nic_gbps_per_gpu", "transport",
         "variant", "tokens_per_batch", "hidden", "topk", "topk_groups"}
    ),
    "end-to-end": frozenset(
        {"gpu", "gpu_note", "model", "gpus", "gpus_per_node", "seq_len", "local_batch", "grad_accum", "cp",
         "cp_backend", "tp", "pp", "fsdp", "checkpointing", "attention_kernel", "compile", "precision",
         "expert_parallel", "optimizer_offload"}
    ),
}  # fmt: skip
"""The config keys each kind may carry (docs/validation.md); another key (a typo such as ``casual``) is
an input error, never silently ignored."""
PASSES = ("fwd", "bwd", "fwd+bwd")


def get_value(config: Mapping[str, Any], key: str, default: Any = None) -> Any:
    if key not in config and default is None:
        raise NotExpressible(f"the configuration has no {key!r}")
    return config.get(key, default)


def row_cluster_of(config: Mapping[str, Any], gpus: int, gpus_per_node: int) -> ClusterSpec:
    nic = get_num(config, "nic_gbps_per_gpu", None)
    try:
        return row_cluster(str(get_value(config, "gpu")), gpus, gpus_per_node, nic)
    except ValueError as exc:
        raise NotExpressible(str(exc)) from None


def pow2_at_least(n: int) -> int:
    return 1 << max(0, math.ceil(math.log2(max(n, 1))))
