"""Measured cost profiles: a JSON file whose coefficients override the analytic defaults.

Version 2 (what ``python -m nspsim_runtime.calibrate`` writes; every coefficient optional; FLOP/s, bytes/s
and seconds)::

    {
      "format": "nspsim-profile", "version": 2,
      "name": "cpu-2ranks", "source": "what made it",
      "provenance": {"host": "...", "device": "cpu", "torch": "2.13.0", "threads": 1, "ranks": 2,
                     "date": "2026-12-01T12:00:00Z", "command": "python -m nspsim_runtime.calibrate ..."},
      "cluster": "cpu",              # the cluster preset it describes (a workload on another is refused)
      "model": "tiny",               # the model the model-bound tables were measured with
      "element_bytes": 4,            # bytes per activation, parameter and gradient element the runtime used
      "attn_fwd_flops_by_heads": {"8": [[256, 2e9], [8192, 9e9]], "4": [[256, 1.5e9], [8192, 8e9]]},
      "attn_bwd_flops_by_heads": {"8": [[256, 1e9], [8192, 6e9]]},
      "attn_full_fwd_flops_by_length": [[256, 4e9], [4096, 1e10]],  # non-causal L x L blocks, all heads
      "attn_full_bwd_flops_by_length": [[256, 2e9], [4096, 7e9]],
      "nonattn_fwd_s_by_tokens": [[64, 1e-4], [8192, 4e-3]],    # one layer, one rank (model-bound)
      "nonattn_bwd_s_by_tokens": [[64, 2e-4], [8192, 9e-3]],
      "head_fwd_s_by_tokens": [[64, 5e-5], [8192, 2e-3]],       # embedding, head and loss (model-bound)
      "head_bwd_s_by_tokens": [[64, 8e-5], [8192, 4e-3]],
      "micro_batch_s": 1e-3,         # fixed cost of one micro-batch (model-bound)
      "optimizer_s": 2e-2,           # one optimizer step of a rank (model-bound, at "ranks")
      "step_s": 3e-3,                # the control traffic every step pays (plan broadcast, barrier, ...)
      "ranks": 2,                    # ranks measured at once (they shared the cores as a run of 2 does)
      "collectives": {"alltoall": {"2": [4e-4, 1.2e9]}, "p2p": {"2": [2e-4, 2e9]},
                      "allgather": {"2": [3e-4, 1e9]}, "reduce_scatter": {"2": [3e-4, 1e9]}},
      "overlap_slowdown": 1.1,       # compute slowed while a collective runs on the same device
      "host_cores": 2.0,             # kernels a host runs at full speed at once (its ranks share them)
      "lockstep_wait_by_size": {"2": [[0.03, 2e-3], [0.36, 1.6e-2]]},  # [work s, wait s] at a collective
      "fit": {...}                   # per-table fit errors (informational)
    }

``attn_full_*_flops_by_length`` are non-causal L x L blocks over all the model's heads, FLOPs counted as
two causal samples of length L (what the off-diagonal blocks of a Ring step run); without them the cost
model prices those blocks at the causal tables.

Version 1 files (``attn_{fwd,bwd}_flops_by_length``, ``nonattn_flops``, ``*_bw_by_degree``, ``allgather_bw``,
``latency_s_by_degree``) still load; those keys stay valid in version 2. The value ranges are in
:mod:`nspsim.cost.profile.ranges`, the tables' interpolation rules in :mod:`nspsim.cost.profile.tables`.
Which coefficient overrides which analytic formula is :class:`~nspsim.cost.analytic.AnalyticCostModel`'s
business. Trade-off: tables per coefficient are easy to measure and check, but a profile measured for
one model's shapes (``model``) and one machine (``cluster``) describes only those, so a workload of
another model or preset is refused rather than priced with the wrong machine's numbers.
"""

from __future__ import annotations

import importlib.resources
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from nspsim.cost.profile.ranges import (
    BANDWIDTH,
    CORES,
    DURATION,
    FLOPS,
    LATENCY,
    SLOWDOWN,
    Plausible,
)
from nspsim.cost.profile.tables import LengthTable, LinkFit, TimeTable, WaitTable, lookup_degree, nearest_key
from nspsim.jsonfile import read_json

__all__ = [
    "COLLECTIVES",
    "FORMAT",
    "PLAUSIBLE",
    "VERSION",
    "LengthTable",
    "LinkFit",
    "Plausible",
    "Profile",
    "TimeTable",
    "WaitTable",
    "builtin_profile_names",
    "load_profile",
    "parse_profile",
]

FORMAT = "nspsim-profile"
VERSION = 2
VERSIONS = (1, 2)
COLLECTIVES = ("alltoall", "p2p", "allgather", "reduce_scatter")

_LENGTH_TABLES = ("attn_fwd_flops_by_length", "attn_bwd_flops_by_length")
_HEADS_TABLES = ("attn_fwd_flops_by_heads", "attn_bwd_flops_by_heads")
_FULL_TABLES = ("attn_full_fwd_flops_by_length", "attn_full_bwd_flops_by_length")
_TIME_TABLES = ("nonattn_fwd_s_by_tokens", "nonattn_bwd_s_by_tokens", "head_fwd_s_by_tokens", "head_bwd_s_by_tokens")
_DEGREE_TABLES = ("alltoall_bw_by_degree", "p2p_bw_by_degree", "latency_s_by_degree")
_SCALARS = ("nonattn_flops", "allgather_bw")
_V2_SCALARS = ("micro_batch_s", "optimizer_s", "step_s", "overlap_slowdown", "host_cores")
_META = ("format", "version", "name", "source", "notes", "provenance", "fit")
_V2_ONLY = (
    *_HEADS_TABLES,
    *_FULL_TABLES,
    *_TIME_TABLES,
    *_V2_SCALARS,
    "collectives",
    "cluster",
    "model",
    "element_bytes",
    "ranks",
    "lockstep_wait_by_size",
)
MAX_DEGREE = 2**20  # an SP degree is at most the GPU count; no cluster has a million GPUs

PLAUSIBLE: Mapping[str, Plausible] = {
    "attn_fwd_flops_by_length": FLOPS,
    "attn_bwd_flops_by_length": FLOPS,
    "nonattn_flops": FLOPS,
    "allgather_bw": BANDWIDTH,
    "alltoall_bw_by_degree": BANDWIDTH,
    "p2p_bw_by_degree": BANDWIDTH,
    "latency_s_by_degree": LATENCY,
    "micro_batch_s": DURATION,
    "optimizer_s": DURATION,
    "step_s": DURATION,
    "overlap_slowdown": SLOWDOWN,
    "host_cores": CORES,
}
"""The range each scalar or per-degree key's values must lie in (:mod:`nspsim.cost.profile.ranges`)."""

_V1_FIELDS = (
    "attn_fwd_flops_by_length",
    "attn_bwd_flops_by_length",
    "nonattn_flops",
    "allgather_bw",
    "alltoall_bw_by_degree",
    "p2p_bw_by_degree",
    "latency_s_by_degree",
)


@dataclass(frozen=True, kw_only=True)
class Profile:
    """Parsed profile. ``None`` / empty tables mean "use the analytic default"; ``provenance`` and
    ``fit`` describe where the numbers come from and do not enter :meth:`coefficients`."""

    name: str = "analytic"
    source: str = ""
    attn_fwd_flops_by_length: LengthTable | None = None
    attn_bwd_flops_by_length: LengthTable | None = None
    nonattn_flops: float | None = None
    allgather_bw: float | None = None
    alltoall_bw_by_degree: Mapping[int, float] = field(default_factory=dict)
    p2p_bw_by_degree: Mapping[int, float] = field(default_factory=dict)
    latency_s_by_degree: Mapping[int, float] = field(default_factory=dict)
    # version 2
    cluster: str | None = None
    model: str | None = None
    element_bytes: int | None = None
    ranks: int | None = None
    attn_fwd_flops_by_heads: Mapping[int, LengthTable] = field(default_factory=dict)
    attn_bwd_flops_by_heads: Mapping[int, LengthTable] = field(default_factory=dict)
    attn_full_fwd_flops_by_length: LengthTable | None = None
    attn_full_bwd_flops_by_length: LengthTable | None = None
    nonattn_fwd_s_by_tokens: TimeTable | None = None
    nonattn_bwd_s_by_tokens: TimeTable | None = None
    head_fwd_s_by_tokens: TimeTable | None = None
    head_bwd_s_by_tokens: TimeTable | None = None
    micro_batch_s: float | None = None
    optimizer_s: float | None = None
    step_s: float | None = None
    collectives: Mapping[str, Mapping[int, LinkFit]] = field(default_factory=dict)
    overlap_slowdown: float | None = None
    host_cores: float | None = None
    lockstep_wait_by_size: Mapping[int, WaitTable] = field(default_factory=dict)
    provenance: Mapping[str, Any] = field(default_factory=dict)
    fit: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for key in (*_SCALARS, *_V2_SCALARS):
            value = getattr(self, key)
            if value is not None:
                PLAUSIBLE[key].check(value, key)
        for key in _DEGREE_TABLES:
            for degree, value in getattr(self, key).items():
                PLAUSIBLE[key].check(value, f"{key}[{degree}]")
        unknown = set(self.collectives) - set(COLLECTIVES)
        if unknown:
            raise ValueError(f"collectives: unknown collective {sorted(unknown)} (known: {', '.join(COLLECTIVES)})")
        size, ranks = self.element_bytes, self.ranks  # as written: a file's "2" is named, not replaced
        if size is not None and not (_is_int(size) and size in (1, 2, 4, 8)):
            raise ValueError(f"element_bytes must be 1, 2, 4 or 8 bytes per element, got {_cut(repr(size))}")
        if ranks is not None and not (_is_int(ranks) and 1 <= ranks <= MAX_DEGREE):
            raise ValueError(f"ranks must be a positive integer <= {MAX_DEGREE:,}, got {_cut(repr(ranks))}")
        bound = [k for k in (*_TIME_TABLES, "micro_batch_s", "optimizer_s") if getattr(self, k) is not None]
        if bound and not self.model:
            raise ValueError(f'{", ".join(bound)} describe one model\'s shapes: the profile must name it ("model")')

    @staticmethod
    def lookup(table: Mapping[int, float], degree: int) -> float | None:
        """Value for ``degree``: exact, else the nearest smaller profiled degree, else the smallest."""
        return lookup_degree(table, degree)

    def attention_table(self, backward: bool, heads: int | None) -> LengthTable | None:
        """The attention throughput table for kernels over ``heads`` query heads per rank: the per-heads
        table nearest in log2 when there is one, else the length-only table (version 1), else ``None``."""
        by_heads = self.attn_bwd_flops_by_heads if backward else self.attn_fwd_flops_by_heads
        if by_heads and heads is not None:
            return nearest_key(by_heads, heads)
        if by_heads:
            return by_heads[max(by_heads)]
        return self.attn_bwd_flops_by_length if backward else self.attn_fwd_flops_by_length

    def full_attention_table(self, backward: bool) -> LengthTable | None:
        """The throughput table of non-causal (full) L x L blocks over all the model's heads (what a ring
        step's off-diagonal blocks run), or ``None`` when the profile did not measure them."""
        return self.attn_full_bwd_flops_by_length if backward else self.attn_full_fwd_flops_by_length

    def link(self, collective: str, group_size: int) -> LinkFit | None:
        """The fitted ``collective`` over ``group_size`` ranks (nearest smaller profiled size), or ``None``."""
        return lookup_degree(self.collectives.get(collective, {}), group_size)

    def coefficients(self) -> dict[str, Any]:
        """Every coefficient (what a plan's profile fingerprint hashes): the version-1 fields always, so
        a version-1 profile hashes as it always did, and the version-2 ones only when set."""
        from dataclasses import asdict

        values = asdict(self)
        out = {k: values[k] for k in _V1_FIELDS}
        for f in fields(self):
            if f.name in _V1_FIELDS or f.name in ("name", "source", "provenance", "fit"):
                continue
            value = values[f.name]
            if value not in (None, {}):
                out[f.name] = value
        return out

    def check_applies(self, *, cluster: str, model: str, gpus: int, origin: str) -> None:
        """``ValueError`` when this profile describes another cluster preset, model or rank count than
        the workload's (its numbers would price another machine, other shapes, or ranks that share the
        cores differently)."""
        if self.cluster is not None and self.cluster != cluster:
            raise ValueError(
                f"{origin} was measured on the cluster preset {self.cluster!r}, but the workload uses {cluster!r}: "
                f"use --cluster {self.cluster}, or calibrate a profile for {cluster}"
            )
        if self.model is not None and self.model != model:
            raise ValueError(
                f"{origin} holds times measured for the model {self.model!r}, but the workload trains {model!r}: "
                f"calibrate for it (python -m nspsim_runtime.calibrate --model {model}) or use --model {self.model}"
            )
        if self.ranks is not None and self.ranks != gpus:
            raise ValueError(
                f"{origin} was measured with {self.ranks} ranks sharing the machine, but the workload has {gpus}: "
                f"calibrate at that count (python -m nspsim_runtime.calibrate --ranks {gpus})"
            )


def parse_profile(data: Mapping[str, Any], origin: str = "profile") -> Profile:
    """Validate a decoded JSON profile; ``ValueError`` naming the bad key otherwise."""
    version = data.get("version")
    if data.get("format") != FORMAT or isinstance(version, bool) or version not in VERSIONS:
        raise ValueError(
            f'{origin}: not an nspsim profile (need "format": "{FORMAT}", "version": one of '
            f"{', '.join(map(str, VERSIONS))})"
        )
    allowed = {*_LENGTH_TABLES, *_DEGREE_TABLES, *_SCALARS, *_META}
    if version >= 2:
        allowed |= set(_V2_ONLY)
    unknown = set(data) - allowed
    if unknown:
        newer = sorted(unknown & set(_V2_ONLY))
        hint = f' ({", ".join(newer)} need "version": 2)' if newer else ""
        raise ValueError(f"{origin}: unknown profile keys {sorted(unknown)}{hint}")
    kwargs: dict[str, Any] = {"name": str(data.get("name", "profile")), "source": str(data.get("source", ""))}
    for key in (*_LENGTH_TABLES, *_FULL_TABLES):
        if key in data:
            kwargs[key] = _length_table(data[key], f"{origin}: {key}")
    for key in _HEADS_TABLES:
        if key in data:
            kwargs[key] = _keyed(data[key], f"{origin}: {key}", _length_table)
    for key in _TIME_TABLES:
        if key in data:
            kwargs[key] = _time_table(data[key], f"{origin}: {key}")
    for key in _DEGREE_TABLES:
        if key in data:
            kwargs[key] = _keyed(data[key], f"{origin}: {key}", _positive)
    for key in (*_SCALARS, *_V2_SCALARS):
        if key in data:
            kwargs[key] = _number(data[key], f"{origin}: {key}", positive=key not in ("micro_batch_s", "step_s"))
    if "collectives" in data:
        kwargs["collectives"] = _collectives(data["collectives"], f"{origin}: collectives")
    if "lockstep_wait_by_size" in data:
        kwargs["lockstep_wait_by_size"] = _keyed(
            data["lockstep_wait_by_size"], f"{origin}: lockstep_wait_by_size", _wait_table
        )
    for key in ("cluster", "model"):
        if key in data:
            if not isinstance(data[key], str) or not data[key]:
                raise ValueError(f"{origin}: {key} must be a non-empty string, got {_cut(repr(data[key]))}")
            kwargs[key] = data[key]
    for key in ("element_bytes", "ranks"):  # checked by Profile, which names the value as written
        if key in data:
            if data[key] is None:  # null is not "not given"
                raise ValueError(f"{origin}: {key} must be a positive integer, got None")
            kwargs[key] = data[key]
    for key in ("provenance", "fit"):
        if key in data:
            if not isinstance(data[key], dict):
                raise ValueError(f"{origin}: {key} must be a JSON object")
            kwargs[key] = dict(data[key])
    try:
        return Profile(**kwargs)
    except ValueError as exc:
        raise ValueError(f"{origin}: {exc}") from None


def builtin_profile_names() -> tuple[str, ...]:
    """Profiles shipped in ``nspsim/profiles`` (usable by name wherever a profile path is accepted)."""
    folder = importlib.resources.files("nspsim") / "profiles"
    return tuple(sorted(p.name.removesuffix(".json") for p in folder.iterdir() if p.name.endswith(".json")))


def load_profile(path: str | Path) -> Profile:
    """Read and validate a profile file, or a built-in profile by name."""
    known = ", ".join(builtin_profile_names())
    if not str(path).strip():
        raise ValueError(f"cost profile: empty path; give a profile file or a built-in profile ({known})")
    if str(path) in builtin_profile_names():
        text = (importlib.resources.files("nspsim") / "profiles" / f"{path}.json").read_text()
        return parse_profile(json.loads(text), str(path))
    if not Path(path).exists():
        raise ValueError(f"cannot read profile {path}: No such file or directory (built-in profiles: {known})")
    data = read_json(path, "cost profile")  # names the file in every error (undecodable bytes too)
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a profile must be a JSON object")
    return parse_profile(data, str(path))


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _number(value: Any, what: str, *, positive: bool = True) -> float:
    number = math.nan
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            number = float(value)
        except OverflowError:  # an integer beyond float range (10**400)
            number = math.inf
    if not math.isfinite(number) or number < 0 or (positive and number == 0):
        kind = "positive" if positive else "non-negative"
        raise ValueError(f"{what} must be a {kind} number, got {_cut(repr(value))}")
    return number


def _positive(value: Any, what: str) -> float:
    return _number(value, what)


def _cut(text: str) -> str:
    return text if len(text) <= 40 else f"{text[:20]}... ({len(text)} characters)"


def _pairs(value: Any, what: str, kind: str) -> list[tuple[float, float]]:
    if not isinstance(value, list) or not all(isinstance(p, list) and len(p) == 2 for p in value):
        raise ValueError(f"{what} must be a list of [{kind}, value] pairs")
    return [(_positive(p[0], what), _number(p[1], what, positive=False)) for p in value]


def _table(value: Any, what: str, kind: str, build: Any) -> Any:
    """``build(points, values)`` of a ``[[point, value], ...]`` list, its errors naming ``what``."""
    pairs = _pairs(value, what, kind)
    try:
        return build(tuple(p[0] for p in pairs), tuple(p[1] for p in pairs))
    except ValueError as exc:
        raise ValueError(f"{what}: {exc}") from None


def _length_table(value: Any, what: str) -> LengthTable:
    out: LengthTable = _table(value, what, "length", lambda x, y: LengthTable(lengths=x, values=y))
    return out


def _time_table(value: Any, what: str) -> TimeTable:
    out: TimeTable = _table(value, what, "tokens", lambda x, y: TimeTable(tokens=x, seconds=y))
    return out


def _wait_table(value: Any, what: str) -> WaitTable:
    out: WaitTable = _table(value, what, "work seconds", lambda x, y: WaitTable(work_s=x, wait_s=y))
    return out


def _degree(key: Any, what: str) -> int:
    text = str(key)
    if not (text.isascii() and text.isdecimal()) or len(text) > 7 or not 1 <= int(text) <= MAX_DEGREE:
        raise ValueError(f"{what}: degree {_cut(repr(key))} is not a positive integer <= {MAX_DEGREE:,} (2**20)")
    return int(text)


def _keyed(value: Any, what: str, parse: Any) -> dict[int, Any]:
    if not isinstance(value, dict):
        raise ValueError(f"{what} must be an object mapping degree to value")
    return {_degree(key, what): parse(val, f"{what}[{key}]") for key, val in value.items()}


def _link(value: Any, what: str) -> LinkFit:
    if not isinstance(value, list) or len(value) != 2:
        raise ValueError(f"{what} must be [latency seconds, bandwidth bytes/s]")
    latency, bandwidth = _number(value[0], what, positive=False), _positive(value[1], what)
    LATENCY.check(max(latency, LATENCY.low), f"{what} latency")
    try:
        return LinkFit(latency_s=max(latency, LATENCY.low), bandwidth=bandwidth)
    except ValueError as exc:
        raise ValueError(f"{what}: {exc}") from None


def _collectives(value: Any, what: str) -> dict[str, dict[int, LinkFit]]:
    if not isinstance(value, dict):
        raise ValueError(f"{what} must be an object mapping a collective to its fits by group size")
    unknown = set(value) - set(COLLECTIVES)
    if unknown:
        raise ValueError(f"{what}: unknown collective {sorted(unknown)} (known: {', '.join(COLLECTIVES)})")
    return {name: _keyed(fits, f"{what}.{name}", _link) for name, fits in value.items()}
