"""Turn timings into profile coefficients (pure: numpy only, no torch; unit-testable on synthetic data).

* collectives: ``t = latency + bytes / bandwidth`` by least squares on *relative* error (each size
  weighs 1 / its time, so the 4 KiB points fix the latency as well as the 4 MiB ones fix the
  bandwidth), with the latency floored at 10 ns (:data:`nspsim.cost.profile.ranges.LATENCY`);
* attention kernels: throughput tables by (query heads per rank, length), FLOPs counted as the cost
  model counts them (forward ``2 * L^2 * heads * head_dim``, backward 2.5x), so a table entry divided
  into the cost model's FLOPs returns the measured time exactly;
* per-layer and head times: ``[tokens, seconds]`` tables as measured (the cost model fits them
  affinely, :class:`nspsim.cost.profile.tables.AffineFit`).

Every fit reports its maximum relative error over its points (``fit`` in the profile). Trade-off: a
median over repeats is robust to a descheduled rank but hides variance; the spread is recorded too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from nspsim.cost.backends.base import BWD_ATTN_FLOP_RATIO
from nspsim.cost.profile import FORMAT, VERSION
from nspsim.cost.profile.ranges import LATENCY
from nspsim.cost.profile.tables import AffineFit, TimeTable


@dataclass(frozen=True, kw_only=True)
class LinkMeasurement:
    """Median seconds of one collective over one group size at several byte counts (per rank, as the
    cost model counts them for that collective)."""

    collective: str
    group_size: int
    nbytes: tuple[float, ...]
    seconds: tuple[float, ...]


def fit_link(nbytes: Sequence[float], seconds: Sequence[float]) -> tuple[float, float, float]:
    """``(latency_s, bandwidth B/s, max relative error)`` of ``t = latency + bytes / bandwidth``."""
    x, y = np.asarray(nbytes, dtype=np.float64), np.asarray(seconds, dtype=np.float64)
    if x.size < 2 or np.any(y <= 0):
        raise ValueError("a link fit needs at least two positive timings")
    w = 1.0 / y
    design = np.stack([np.ones_like(x), x], axis=1) * w[:, None]
    (lat, per_byte), *_ = np.linalg.lstsq(design, y * w, rcond=None)
    if per_byte <= 0:  # time does not grow with size over the measured range: latency-bound
        per_byte = float(np.min(y / x)) * 1e-3
    lat = max(float(lat), LATENCY.low)
    err = float(np.max(np.abs(lat + per_byte * x - y) / y))
    return lat, 1.0 / float(per_byte), err


def attention_flops(length: float, heads: int, head_dim: int, backward: bool) -> float:
    """FLOPs of one causal sample as the cost model counts them (backward 2.5x forward)."""
    fwd = 2.0 * length**2 * heads * head_dim
    return BWD_ATTN_FLOP_RATIO * fwd if backward else fwd


def throughput_table(
    lengths: Sequence[int], seconds: Sequence[float], heads: int, head_dim: int, backward: bool
) -> list[list[float]]:
    """``[[length, FLOP/s], ...]`` from kernel times of one sample per length."""
    return [
        [float(n), attention_flops(n, heads, head_dim, backward) / t] for n, t in zip(lengths, seconds, strict=True)
    ]


def time_table(tokens: Sequence[int], seconds: Sequence[float]) -> list[list[float]]:
    """``[[tokens, seconds], ...]``."""
    return [[float(n), float(t)] for n, t in zip(tokens, seconds, strict=True)]


def affine_error(table: list[list[float]]) -> float:
    """Maximum relative error of the cost model's affine fit of a time table."""
    return AffineFit.of(TimeTable(tokens=tuple(p[0] for p in table), seconds=tuple(p[1] for p in table))).max_rel_error


@dataclass(frozen=True, kw_only=True)
class Measurements:
    """Everything one calibration measured (medians over repeats and over ranks)."""

    model: str
    head_dim: int
    attn_lengths: tuple[int, ...]
    attn_fwd_s: Mapping[int, tuple[float, ...]]  # query heads per rank -> seconds per length
    attn_bwd_s: Mapping[int, tuple[float, ...]]
    layer_tokens: tuple[int, ...]
    nonattn_fwd_s: tuple[float, ...]
    nonattn_bwd_s: tuple[float, ...]
    head_fwd_s: tuple[float, ...]
    head_bwd_s: tuple[float, ...]
    optimizer_s: float
    step_s: float
    micro_batch_s: float
    links: tuple[LinkMeasurement, ...]
    overlap_slowdown: float
    element_bytes: int
    host_cores: float | None = None
    sharing_curve: Mapping[int, float] | None = None


def build_profile(m: Measurements, *, name: str, provenance: Mapping[str, Any], cluster: str) -> dict[str, Any]:
    """The version-2 profile JSON object of ``m`` (validated by :func:`nspsim.cost.profile.parse_profile`)."""
    fit: dict[str, Any] = {}
    collectives: dict[str, dict[str, list[float]]] = {}
    for link in m.links:
        lat, bw, err = fit_link(link.nbytes, link.seconds)
        collectives.setdefault(link.collective, {})[str(link.group_size)] = [lat, bw]
        fit[f"{link.collective}[{link.group_size}]"] = {"max_rel_error": err, "points": len(link.nbytes)}
    tables = {
        "nonattn_fwd_s_by_tokens": time_table(m.layer_tokens, m.nonattn_fwd_s),
        "nonattn_bwd_s_by_tokens": time_table(m.layer_tokens, m.nonattn_bwd_s),
        "head_fwd_s_by_tokens": time_table(m.layer_tokens, m.head_fwd_s),
        "head_bwd_s_by_tokens": time_table(m.layer_tokens, m.head_bwd_s),
    }
    for key, table in tables.items():
        fit[key] = {"affine_max_rel_error": affine_error(table)}
    profile: dict[str, Any] = {
        "format": FORMAT,
        "version": VERSION,
        "name": name,
        "source": f"measured by runtime.calibrate on {provenance.get('host', '?')} ({provenance.get('date', '?')})",
        "provenance": dict(provenance),
        "cluster": cluster,
        "model": m.model,
        "element_bytes": m.element_bytes,
        "attn_fwd_flops_by_heads": {
            str(h): throughput_table(m.attn_lengths, t, h, m.head_dim, False) for h, t in sorted(m.attn_fwd_s.items())
        },
        "attn_bwd_flops_by_heads": {
            str(h): throughput_table(m.attn_lengths, t, h, m.head_dim, True) for h, t in sorted(m.attn_bwd_s.items())
        },
        **tables,
        "micro_batch_s": m.micro_batch_s,
        "optimizer_s": m.optimizer_s,
        "step_s": m.step_s,
        "ranks": int(provenance.get("ranks", 1)),
        "collectives": collectives,
        "overlap_slowdown": max(m.overlap_slowdown, 1.0),
        "fit": fit,
    }
    if m.host_cores is not None:
        profile["host_cores"] = m.host_cores
        fit["sharing_curve"] = {str(n): s for n, s in sorted((m.sharing_curve or {}).items())}
    return profile
