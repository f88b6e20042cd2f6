"""Turn timings into profile coefficients (pure: numpy only, no torch; unit-testable on synthetic data).

* collectives: ``t = latency + bytes / bandwidth`` by least squares on *relative* error (each size
  weighs 1 / its time, so the 4 KiB points fix the latency as well as the 4 MiB ones fix the
  bandwidth), with the latency floored at 10 ns (:data:`nspsim.cost.profile.ranges.LATENCY`);
* attention kernels: throughput tables by (query heads per rank, length), FLOPs counted as the cost
  model counts them (forward ``2 * L^2 * heads * head_dim``, backward 2.5x), so a table entry divided
  into the cost model's FLOPs returns the measured time exactly; full ``L x L`` blocks (all heads) count
  twice a causal sample's FLOPs (:func:`full_throughput_table`);
* per-layer and head times: ``[tokens, seconds]`` tables as measured (the cost model fits them
  affinely, :class:`nspsim.cost.profile.tables.AffineFit`);
* the executor's own work (:func:`executor_overhead`): real executor steps of degree-1 plans minus
  their attention kernels, against the same tokens priced by the isolated tables (``L`` layers plus
  the head); the residual, fitted as ``a + b * tokens`` by least squares, is ``a`` per micro-batch
  (``micro_batch_s``) and ``b / L`` per token and layer, added to the non-attention tables (split
  between forward and backward as their own times are), so the cost model and the planners'
  affine non-attention time see it without a new coefficient.

* lockstep waits (:func:`lockstep_table`): per group size, the mean time ranks spent in an all-to-all
  after ``d`` seconds of equal work, less its time back to back (:mod:`nspsim_runtime.calibration.lockstep`),
  kept as a ``d -> wait`` table, non-negative and non-decreasing in ``d``.

Every fit reports its maximum relative error over its points (``fit`` in the profile). Trade-off: a
median over repeats is robust to a descheduled rank but hides variance; the spread is recorded too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.optimize import isotonic_regression

from nspsim.cost.backends.base import BWD_ATTN_FLOP_RATIO
from nspsim.cost.profile import FORMAT, VERSION
from nspsim.cost.profile.ranges import LATENCY
from nspsim.cost.profile.tables import AffineFit, TimeTable
from nspsim.specs.model import causal_attention_flops


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
    """FLOPs of one causal sample as the cost model counts them (:func:`causal_attention_flops`;
    backward :data:`BWD_ATTN_FLOP_RATIO` times forward), for ``heads`` query heads on this rank."""
    fwd = causal_attention_flops(float(length) ** 2, heads * head_dim)
    return BWD_ATTN_FLOP_RATIO * fwd if backward else fwd


def throughput_table(
    lengths: Sequence[int], seconds: Sequence[float], heads: int, head_dim: int, backward: bool
) -> list[list[float]]:
    """``[[length, FLOP/s], ...]`` from kernel times of one sample per length."""
    return [
        [float(n), attention_flops(n, heads, head_dim, backward) / t] for n, t in zip(lengths, seconds, strict=True)
    ]


def full_throughput_table(
    lengths: Sequence[int], seconds: Sequence[float], heads: int, head_dim: int, backward: bool
) -> list[list[float]]:
    """``[[length, FLOP/s], ...]`` from kernel times of one full (non-causal) ``L x L`` block per length:
    twice the causal sample's FLOPs (every query attends to every key)."""
    return [[n, 2.0 * f] for n, f in throughput_table(lengths, seconds, heads, head_dim, backward)]


def rising(seconds: Sequence[float]) -> tuple[float, ...]:
    """``seconds`` measured at increasing token counts, made non-decreasing by isotonic regression
    (scipy's pool-adjacent-violators: the least-squares non-decreasing fit). More tokens never take
    less time; a dip is timing noise (a loaded machine measured 5.6 ms at 256 tokens and 3.5 ms at
    1,024), which profiles refuse (:class:`~nspsim.cost.profile.tables.TimeTable`)."""
    return tuple(float(v) for v in isotonic_regression(np.asarray(seconds, dtype=np.float64)).x)


def time_table(tokens: Sequence[int], seconds: Sequence[float]) -> list[list[float]]:
    """``[[tokens, seconds], ...]``, the seconds made non-decreasing (:func:`rising`)."""
    return [[float(n), t] for n, t in zip(tokens, rising(seconds), strict=True)]


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
    num_layers: int = 1
    exec_tokens: tuple[int, ...] = ()
    exec_local_s: tuple[float, ...] = ()  # executor steps of degree-1 plans, kernels subtracted
    exec_sp_s: tuple[float, ...] = ()  # the same with one Ulysses node over all ranks (informational)
    lockstep: Mapping[int, tuple[tuple[float, ...], tuple[float, ...]]] | None = None  # size -> (work, wait)
    attn_full_lengths: tuple[int, ...] = ()  # full L x L blocks over all the model's heads
    attn_full_fwd_s: Mapping[int, tuple[float, ...]] | None = None  # {heads: seconds per length}
    attn_full_bwd_s: Mapping[int, tuple[float, ...]] | None = None

    def __post_init__(self) -> None:
        if self.num_layers < 1:
            raise ValueError(f"num_layers must be at least 1, got {self.num_layers}")
        if len(self.exec_local_s) != len(self.exec_tokens) or len(self.exec_sp_s) not in (0, len(self.exec_tokens)):
            raise ValueError("executor timings need one value per token count in exec_tokens")
        n = len(self.attn_full_lengths)
        for full in (self.attn_full_fwd_s, self.attn_full_bwd_s):
            if n and (not full or any(len(t) != n for t in full.values())):
                raise ValueError("full-block attention timings need one value per length in attn_full_lengths")


@dataclass(frozen=True, kw_only=True)
class ExecutorFit:
    """The executor's work beyond the isolated tables (module docstring): ``micro_batch_s`` per
    micro-batch, ``per_token_layer_s`` per token and layer, and the residuals they were fitted to."""

    micro_batch_s: float
    per_token_layer_s: float
    isolated_s: tuple[float, ...]
    residual_s: tuple[float, ...]


def isolated_step(m: Measurements, tokens: float) -> float:
    """Forward and backward seconds of ``tokens`` per rank as the isolated tables price them:
    ``num_layers`` layers plus the head, each table read piecewise linearly."""

    def table(seconds: tuple[float, ...]) -> TimeTable:
        return TimeTable(tokens=tuple(float(t) for t in m.layer_tokens), seconds=rising(seconds))

    layer = table(m.nonattn_fwd_s)(tokens) + table(m.nonattn_bwd_s)(tokens)
    return m.num_layers * layer + table(m.head_fwd_s)(tokens) + table(m.head_bwd_s)(tokens)


def executor_overhead(m: Measurements) -> ExecutorFit | None:
    """The least-squares ``a + b * tokens`` of executor time minus :func:`isolated_step` (both
    clamped at 0: the tables already price what the executor does not add), or ``None`` without
    executor timings."""
    if not m.exec_tokens:
        return None
    x = np.asarray(m.exec_tokens, dtype=np.float64)
    isolated = np.array([isolated_step(m, t) for t in x])
    residual = np.asarray(m.exec_local_s, dtype=np.float64) - isolated
    if x.size == 1:
        a, b = 0.0, float(residual[0] / x[0])
    else:
        (a, b), *_ = np.linalg.lstsq(np.stack([np.ones_like(x), x], axis=1), residual, rcond=None)
    if a < 0:  # no negative fixed cost: refit the slope through the origin
        a, b = 0.0, float(x @ residual / (x @ x))
    b = max(float(b), 0.0)
    a = max(float(a), 0.0) if b > 0 else max(float(np.mean(residual)), 0.0)
    return ExecutorFit(
        micro_batch_s=a,
        per_token_layer_s=b / m.num_layers,
        isolated_s=tuple(float(v) for v in isolated),
        residual_s=tuple(float(v) for v in residual),
    )


def with_executor(m: Measurements, fit: ExecutorFit) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """The non-attention (forward, backward) tables with ``fit.per_token_layer_s * tokens`` added,
    split between forward and backward in the ratio of their measured times at each point."""
    fwd, bwd = [], []
    for t, f, b in zip(m.layer_tokens, m.nonattn_fwd_s, m.nonattn_bwd_s, strict=True):
        extra = fit.per_token_layer_s * t
        share = f / (f + b) if f + b > 0 else 0.5
        fwd.append(f + extra * share)
        bwd.append(b + extra * (1.0 - share))
    return tuple(fwd), tuple(bwd)


def lockstep_table(
    work_s: Sequence[float], in_collective_s: Sequence[float]
) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """``(work, wait)`` of one group size: points after the first (``k = 0``, back-to-back collectives,
    whose time is the collective's own), the wait each one's time in the collective beyond the first
    point's, clamped at 0 and made non-decreasing (more work never lets ranks drift apart less), and at
    most the work before it: ranks that computed the same work drift apart by less than that work, so a
    longer wait is a busy machine's neighbours, not lockstep (the profile refuses a wait above its work,
    :class:`nspsim.cost.profile.WaitTable`; the calibration's machine record says how busy it was)."""
    if len(work_s) != len(in_collective_s) or len(work_s) < 2:
        raise ValueError("a lockstep table needs the back-to-back point and at least one point with work")
    base = float(in_collective_s[0])
    waits = np.maximum.accumulate(np.maximum(np.asarray(in_collective_s[1:], dtype=np.float64) - base, 0.0))
    work = np.maximum.accumulate(np.asarray(work_s[1:], dtype=np.float64))
    waits = np.minimum(waits, work)  # both non-decreasing, so the minimum is too
    keep = np.concatenate([[True], np.diff(work) > 0])  # strictly increasing work
    return tuple(float(x) for x in work[keep]), tuple(float(x) for x in waits[keep])


def build_profile(m: Measurements, *, name: str, provenance: Mapping[str, Any], cluster: str) -> dict[str, Any]:
    """The version-2 profile JSON object of ``m`` (validated by :func:`nspsim.cost.profile.parse_profile`)."""
    fit: dict[str, Any] = {}
    collectives: dict[str, dict[str, list[float]]] = {}
    for link in m.links:
        lat, bw, err = fit_link(link.nbytes, link.seconds)
        collectives.setdefault(link.collective, {})[str(link.group_size)] = [lat, bw]
        fit[f"{link.collective}[{link.group_size}]"] = {"max_rel_error": err, "points": len(link.nbytes)}
    nonattn_fwd, nonattn_bwd, micro_batch = m.nonattn_fwd_s, m.nonattn_bwd_s, m.micro_batch_s
    executor = executor_overhead(m)
    if executor is not None:
        nonattn_fwd, nonattn_bwd = with_executor(m, executor)
        micro_batch = executor.micro_batch_s
        fit["executor"] = {
            "tokens": list(m.exec_tokens),
            "measured_s": list(m.exec_local_s),
            "isolated_s": list(executor.isolated_s),
            "residual_s": list(executor.residual_s),
            "micro_batch_s": executor.micro_batch_s,
            "per_token_layer_s": executor.per_token_layer_s,
            "isolated_nonattn_fwd_s": list(m.nonattn_fwd_s),
            "isolated_nonattn_bwd_s": list(m.nonattn_bwd_s),
        }
        if m.exec_sp_s:
            fit["executor"]["ulysses_measured_s"] = list(m.exec_sp_s)
    tables = {
        "nonattn_fwd_s_by_tokens": time_table(m.layer_tokens, nonattn_fwd),
        "nonattn_bwd_s_by_tokens": time_table(m.layer_tokens, nonattn_bwd),
        "head_fwd_s_by_tokens": time_table(m.layer_tokens, m.head_fwd_s),
        "head_bwd_s_by_tokens": time_table(m.layer_tokens, m.head_bwd_s),
    }
    for key, table in tables.items():
        fit[key] = {"affine_max_rel_error": affine_error(table)}
    profile: dict[str, Any] = {
        "format": FORMAT,
        "version": VERSION,
        "name": name,
        "source": (
            f"measured by nspsim_runtime.calibrate on {provenance.get('host', '?')} ({provenance.get('date', '?')})"
        ),
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
        "micro_batch_s": micro_batch,
        "optimizer_s": m.optimizer_s,
        "step_s": m.step_s,
        "ranks": int(provenance.get("ranks", 1)),
        "collectives": collectives,
        "overlap_slowdown": max(m.overlap_slowdown, 1.0),
        "fit": fit,
    }
    if m.attn_full_lengths and m.attn_full_fwd_s and m.attn_full_bwd_s:
        for key, times, backward in (("fwd", m.attn_full_fwd_s, False), ("bwd", m.attn_full_bwd_s, True)):
            heads = max(times)
            profile[f"attn_full_{key}_flops_by_length"] = full_throughput_table(
                m.attn_full_lengths, times[heads], heads, m.head_dim, backward
            )
    if m.lockstep:
        profile["lockstep_wait_by_size"] = {
            str(size): [[d, w] for d, w in zip(*points, strict=True)] for size, points in sorted(m.lockstep.items())
        }
    if m.host_cores is not None:
        profile["host_cores"] = m.host_cores
        fit["sharing_curve"] = {str(n): s for n, s in sorted((m.sharing_curve or {}).items())}
    return profile
