"""Ranks that share a host's cores: processor sharing of kernels, by fixed-point iteration.

On a CPU host running more ranks than it has cores (``nspsim_runtime.train`` under gloo: 4 ranks on 2
cores), a kernel runs at full speed while at most ``slots`` ranks of its host compute at once, and
at ``slots / n`` of it while ``n > slots`` do. Which ranks compute at once depends on the plan: a
balanced plan keeps every rank busy (each at half speed on 4 ranks / 2 cores), while an imbalanced
one lets its busiest rank run nearly alone at full speed as the others wait in collectives.

The profile's kernel times are measured with all ``R`` ranks of the host busy at once (what a
balanced step runs), so a kernel during which ``n`` ranks compute takes its profiled time times
``max(1, n / slots) / max(1, R / slots)``: unchanged when every rank computes, shorter when fewer do.
The engine resolves a kernel's end when it starts, so this is applied as a fixed point: simulate
with the profiled durations, measure for every kernel the mean number of its host's ranks computing
during its interval (``n``, its own rank included), rescale, and simulate again, :data:`ITERATIONS`
times. Trade-off: an approximation of true processor
sharing (a kernel's rate does not change mid-kernel), in exchange for an unchanged engine; on
balanced plans it is exact (every kernel sees every rank busy), and on GPUs (no ``slots``) it costs
nothing. Communication's own CPU use (gloo copying buffers) is not counted as computing.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from nspsim.simulator.program import COMPUTE, Program

ITERATIONS = 3
"""Fixed-point passes after the solo one (measured on 4 ranks / 2 cores: the step time changes by
< 1% after the third)."""


def kernel_tasks(program: Program) -> list[int]:
    """Indices into ``program.tasks`` of the kernels (compute-queue tasks without a collective, > 0 s),
    in creation order (the order :class:`~nspsim.simulator.step_model.StepModel` draws their durations)."""
    return [i for i, t in enumerate(program.tasks) if t.queue == COMPUTE and t.coll is None and t.dur > 0]


def stretch_factors(
    program: Program, kernels: Sequence[int], unit_members: Sequence[Sequence[int]], gpus_per_host: int, slots: float
) -> np.ndarray:
    """For every kernel (``kernels`` order), ``max(1, n / slots) / max(1, gpus_per_host / slots)`` with
    ``n`` the mean number of its host's ranks computing during it in the executed ``program`` (units
    count once per member GPU on the host)."""
    full = max(1.0, gpus_per_host / slots)  # the concurrency the profile's kernel times were measured at
    factors = np.full(len(kernels), 1.0 / full)
    by_host: dict[int, list[tuple[int, float, float, int]]] = {}
    for k, i in enumerate(kernels):
        task = program.tasks[i]
        hosts: dict[int, int] = {}
        for g in unit_members[task.gpu]:
            hosts[g // gpus_per_host] = hosts.get(g // gpus_per_host, 0) + 1
        for host, weight in hosts.items():
            by_host.setdefault(host, []).append((k, task.start, task.end, weight))
    for items in by_host.values():
        starts = np.array([s for _, s, _, _ in items])
        ends = np.array([e for _, _, e, _ in items])
        weights = np.array([w for _, _, _, w in items], dtype=np.float64)
        edges = np.unique(np.concatenate([starts, ends]))
        # ranks computing on each elementary interval [edges[j], edges[j+1])
        delta = np.zeros(edges.size)
        np.add.at(delta, np.searchsorted(edges, starts), weights)
        np.add.at(delta, np.searchsorted(edges, ends), -weights)
        busy = np.cumsum(delta)[:-1]
        area = np.concatenate([[0.0], np.cumsum(busy * np.diff(edges))])  # integral of busy up to each edge
        lo, hi = np.searchsorted(edges, starts), np.searchsorted(edges, ends)
        span = np.maximum(ends - starts, 1e-300)
        mean_busy = (area[hi] - area[lo]) / span
        for (k, _, _, _), n in zip(items, mean_busy, strict=True):
            factors[k] = max(factors[k], max(n / slots, 1.0) / full)
    return factors
