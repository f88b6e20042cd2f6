"""The token-balance ratio (NSP paper 4.1.2): "the implementation sets B_tok from the available
activation memory and the desired token-balance ratio".

The routing proxy does not see tree-level recomputation: when a batch is memory-bound (attention of
every sample cannot be kept), how much a GPU must recompute grows with its sharded-token count, so a
plan that is balanced in proxy time but uneven in tokens becomes uneven in real time, and every
FSDP gather (which synchronises all GPUs each layer) turns that unevenness into waiting. A
token-balance ratio r caps every GPU at r times the mean:

    effective budget = min(B_tok, max(ceil(r * sum_j L_j / P), ceil(max_j L_j / spmax)))

(the second term keeps the longest sample placeable). ``"auto"`` applies ``AUTO_RATIO`` when the
batch is memory-bound - its mean sharded tokens per GPU exceed what fits with all attention kept at
degree 1 - or when the model runs expert parallelism, and leaves other batches unconstrained;
``"off"`` never applies a ratio; a number >= 1 always does. Expert parallelism: every MoE layer's
dispatch and combine all-to-alls synchronise the EP group between attention and the experts, so a
layer costs about max_p attention + max_p non-attention there rather than max_p of their sum, and
a plan balanced in C_p but uneven in tokens waits at every all-to-all. Measured on Qwen3-235B-A22B
(EP 8, 64 H200s, code 384K, batches 0-2, NSP routing two micro-batches that are not memory-bound
each): without the ratio the critical GPU waits 1.6-3.0 s in collectives per step (36.2 s mean
step), with it 0.5-1.0 s (34.5 s). The ratio was chosen by simulating Qwen3-235B on
64 H200s (docs/planners.md). Trade-off: a tight ratio forbids placements the proxy prefers, so the
proxy Load rises a little while the simulated step falls.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from nspsim.specs.memory import MemoryModel
from nspsim.workload import Workload

IntArray = npt.NDArray[np.int64]
AUTO_RATIO = 1.05
RATIO_WORDS = ("auto", "off")
MAX_RATIO = 2**20
"""The largest ratio accepted. No GPU can hold more than a whole batch, which is P times the mean
(P GPUs), so a ratio of P or more never binds: 2**20 is above any cluster's GPU count, and keeps
``ratio * tokens`` far from float overflow (1e308 used to overflow there). Use "off" for no limit."""


def check_ratio(value: object) -> None:
    """``ValueError`` unless ``value`` is "auto", "off" or a number in [1, :data:`MAX_RATIO`]."""
    if value in RATIO_WORDS:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 1 <= value <= MAX_RATIO:
        raise ValueError(
            f"option token_balance_ratio must be 'auto', 'off' or a number in [1, {MAX_RATIO:,}] "
            f"(a ratio of the GPU count or more never binds; 'off' means no limit), got {value!r}"
        )


def kept_attention_capacity(memory: MemoryModel) -> float:
    """Sharded tokens per GPU that fit with every node's attention kept (degree 1, the cheapest)."""
    per_token = memory.base_bytes(1.0) + memory.attention_bytes_per_token(1)
    return memory.activation_capacity / per_token


def is_memory_bound(workload: Workload, total_tokens: int) -> bool:
    """Whether the mean sharded tokens per GPU exceed what fits with all attention kept."""
    return total_tokens / workload.tree.num_gpus > kept_attention_capacity(workload.memory)


def resolved_ratio(option: float | str, workload: Workload, total_tokens: int) -> float | None:
    """The ratio to apply to a batch of ``total_tokens`` (``None``: no extra limit)."""
    if option == "off":
        return None
    if option == "auto":
        expert_parallel = workload.model.moe is not None and workload.training.expert_parallel > 1
        return AUTO_RATIO if expert_parallel or is_memory_bound(workload, total_tokens) else None
    return float(option)


def effective_budget(option: float | str, workload: Workload, lengths: Sequence[int] | IntArray) -> int:
    """The routing token budget for a batch of ``lengths`` under the ratio ``option`` (module doc)."""
    held = np.asarray(lengths, dtype=np.int64)
    total = int(held.sum())
    ratio = resolved_ratio(option, workload, total)
    if ratio is None:
        return workload.token_budget
    tree = workload.tree
    floor = max(math.ceil(ratio * total / tree.num_gpus - 1e-9), math.ceil(int(held.max()) / tree.spmax))
    return min(workload.token_budget, floor)
