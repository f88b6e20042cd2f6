"""Repeated decoder layers: simulate a few, extrapolate the rest exactly.

Decoder layers are identical, so after a short transient (the first exposed gather, the warm-up of
prefetching) the step settles into a periodic regime: every task of layer l+1 happens exactly
``shift`` seconds after the same task of layer l. The system is deterministic and time-invariant,
so once the state repeats up to a shift, every further layer repeats too. The simulator therefore
builds the step with ``n`` layers instead of L, finds per micro-batch and pass the earliest layer r
such that in layers r-1, r, r+1, r+2 (up to r+d+1 when FSDP gathers run d > 1 layers ahead) every
task issues, starts and ends exactly ``shift`` after the same task of the layer before (the end of
a pass disturbs the last few layers through transfers that overlap later layers, so the run must
reach past r), and then treats the L-layer step as the n-layer step with layer r repeated L - n + 1
times: later tasks move by (L - n) * shift, and the time accounts of layer r count L - n more times.
If no layer repeats (or noise is on), the simulator runs all L layers instead; it skips the short run
when :func:`settling_layers` estimates that unequal GPUs would still be drifting apart at its end.

Trade-off: exact (to ``TOLERANCE_S``) only when the regime is reached within ``n`` layers, which the
check verifies on the simulated layers; tests compare extrapolated against full simulations.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from nspsim.simulator.program import Program, SharedTask
from nspsim.simulator.work import MicroBatchWork, StepWork

TOLERANCE_S = 1e-9


@dataclass(frozen=True, kw_only=True)
class Repeat:
    """Layer segment ``segment`` is repeated ``copies`` extra times, each ``shift`` seconds later."""

    segment: int
    shift: float
    copies: int

    def __post_init__(self) -> None:
        if self.segment < 0 or self.copies < 0 or not np.isfinite(self.shift):
            raise ValueError(f"invalid layer repeat: segment {self.segment}, {self.copies} copies, shift {self.shift}")


def find_repeats(program: Program, total_layers: int, simulated_layers: int, window: int = 4) -> list[Repeat] | None:
    """One :class:`Repeat` per micro-batch and pass, or ``None`` if some pass has no periodic layer.

    ``window`` consecutive layers from r-1 on must repeat by one shift (4; more when FSDP gathers run
    further ahead, since their issue times carry state over more layers)."""
    if simulated_layers >= total_layers:
        return []
    times = _segment_times(program)
    repeats = []
    micro_batches = {s.micro_batch for s in program.segments if s.kind == "fwd"}
    for mb in sorted(micro_batches):
        for kind in ("fwd", "bwd"):
            found = _periodic_layer(program.layer_segments(kind, mb), times, window)
            if found is None:
                return None
            repeats.append(Repeat(segment=found[0], shift=found[1], copies=total_layers - simulated_layers))
    return repeats


def _segment_times(program: Program) -> dict[int, np.ndarray]:
    """Per segment, the (issue, start, end) times of its tasks in creation order; a shared FSDP task
    gives one row per unit, with that unit's own issue time (what a per-unit member would record)."""
    rows: dict[int, list[tuple[float, float, float]]] = {}
    for task in program.tasks:
        row = rows.setdefault(task.seg, [])
        if isinstance(task, SharedTask):
            row.extend((task.unit_issue(u)[0], task.start, task.end) for u in range(task.first_unit, task.end_unit))
        else:
            row.append((task.issue, task.start, task.end))
    return {seg: np.array(r) for seg, r in rows.items()}


def _periodic_layer(segments: list[int], times: dict[int, np.ndarray], window: int) -> tuple[int, float] | None:
    """The earliest layer r >= 2 such that layers r-1 .. r+window-2 follow each other by one constant shift."""
    for r in range(2, len(segments) - window + 2):
        found = _window_shift([times.get(segments[k]) for k in range(r - 1, r + window - 1)])
        if found is not None:
            return segments[r], found
    return None


def _window_shift(window: list[np.ndarray | None]) -> float | None:
    """The shift shared by every consecutive pair of ``window``, if there is one."""
    arrays = [w for w in window if w is not None]
    if len(arrays) != len(window) or any(w.shape != arrays[0].shape for w in arrays):
        return None
    found = [_uniform_shift(x, y) for x, y in zip(arrays, arrays[1:])]
    values = [d for d in found if d is not None]
    if len(values) != len(found) or max(values) - min(values) > TOLERANCE_S:
        return None
    return values[0]


def _uniform_shift(a: np.ndarray, b: np.ndarray) -> float | None:
    """The constant ``d`` with ``b == a + d`` everywhere (within tolerance), else ``None``."""
    if a.size == 0:
        return None
    diff = b - a
    d = float(diff.flat[0])
    return d if bool(np.all(np.abs(diff - d) <= TOLERANCE_S)) else None


def shifts(repeats: list[Repeat], num_segments: int) -> np.ndarray:
    """Per segment: how far its tasks move in the full step (repeated segments: their first copy)."""
    out = np.zeros(num_segments)
    for rep in repeats:
        out[rep.segment + 1 :] += rep.copies * rep.shift
    return out


def settling_layers(work: StepWork, prefetch: int, overlap: bool = True) -> float:
    """Rough number of layers before the slowest coupled GPUs pace every other one (``inf``: never).

    Used only to decide whether a short simulation is worth trying (:func:`find_repeats` still verifies
    every repeat). GPUs joined by a tree node's collective or an expert-parallel group form a coupled
    cluster, which moves at its busiest member's per-layer pace ``c``: the larger of its kernel time
    and its SP communication time when the two overlap (``overlap``, phase streaming), their sum when
    they do not. FSDP gathers of ``a`` seconds, issued ``prefetch`` = d layers ahead, hold every
    cluster within ``d * lam - a`` of the slowest (period ``lam``); a faster cluster gains
    ``lam - max(c, a)`` per layer until that lead is used up, and only then can every layer repeat by
    one shift. Without gathers nothing couples the clusters, so unequal paces never settle. Paces
    within ``TOLERANCE_S`` per layer count as equal, as they do for :func:`find_repeats`.
    """
    a, worst = work.fsdp.allgather, 0.0
    for mbw in work.micro_batches:
        for backward in (False, True):
            rates = _cluster_rates(mbw, work.ep_units, backward, overlap)
            lam = max(a, *rates)
            faster = [lam - max(c, a) for c in rates if lam - max(c, a) > TOLERANCE_S]
            if not faster:
                continue
            if a <= 0:
                return math.inf
            worst = max(worst, max(prefetch * lam - a, 0.0) / min(faster))
    return worst


def _cluster_rates(
    mbw: MicroBatchWork, ep_units: tuple[tuple[int, int], ...], backward: bool, overlap: bool
) -> list[float]:
    """Per coupled cluster of units, the per-layer pace of its busiest member (kernels and SP
    communication, overlapped or not). Link sharing is left out: charging every unit's SP traffic
    with the FSDP traffic as well skipped 17 of 1,600 generated plans that repeat, against 2."""
    paces = []
    for u in range(len(mbw.chains)):
        kernels, comm = _unit_busy(mbw, u, backward)
        paces.append(max(kernels, comm) if overlap else kernels + comm)
    cluster = list(range(len(paces)))  # union-find over contiguous unit ranges
    ranges = [r for nw, r in zip(mbw.nodes, mbw.node_units) if nw.node.degree > 1] + list(ep_units)

    def root(u: int) -> int:
        while cluster[u] != u:
            cluster[u] = cluster[cluster[u]]
            u = cluster[u]
        return u

    for first, end in ranges:
        for u in range(first + 1, end):
            cluster[root(u)] = root(first)
    rates: dict[int, float] = {}
    for u, t in enumerate(paces):
        r = root(u)
        rates[r] = max(rates.get(r, 0.0), t)
    return list(rates.values())


def _unit_busy(mbw: MicroBatchWork, unit: int, backward: bool) -> tuple[float, float]:
    """Seconds of one layer's work of ``unit`` in one pass: on its compute queue (kernels and EP
    all-to-alls) and on its SP queue (prologues and epilogues of its multi-GPU nodes)."""
    na = mbw.non_attn[unit]
    nodes = [mbw.nodes[i] for i in mbw.chains[unit]]
    if not backward:
        comm = sum(nw.fwd.comm for nw in nodes if nw.node.degree > 1)
        return na.fwd_compute + na.fwd_comm + sum(nw.fwd.compute for nw in nodes), comm
    redo = [nw.remat for nw in nodes if nw.remat is not None]
    comm = sum(nw.bwd.comm + (nw.remat.comm if nw.remat is not None else 0.0) for nw in nodes if nw.node.degree > 1)
    kernels = na.bwd_compute + na.bwd_comm + sum(p.compute for p in redo) + sum(nw.bwd.compute for nw in nodes)
    return kernels, comm
