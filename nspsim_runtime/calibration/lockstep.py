"""Lockstep waits: how long ranks that computed the same work wait for each other at a collective.

The simulator's ranks are identical, so a group that runs equal work reaches its next collective
together. Real ranks do not: a rank that shares its core with its own gloo threads, the other ranks
(more ranks than cores) or the OS is descheduled now and then, and every collective of a group then
starts when its *slowest* member arrives. The kernel tables are medians averaged over ranks, so they
price a typical rank, not the last one. On the 2-core development machine the Ulysses runs' measured
``sp_exposed_comm`` was 0.05-0.4 s per step against a predicted 0.01 s, on plans whose ranks hold
identical work.

What is measured (every aligned group of a size at once, as :func:`nspsim_runtime.calibration.measure.link_times`
does): each rank repeats *k* runs of the kernel mix (:func:`nspsim_runtime.calibration.mix.kernel_mix`, 512
tokens) then one small all-to-all over its group, for k = 0 (back-to-back collectives: the
collective's own time) and a few k up to ~0.4 s of work. Per k: the mean work per
rank ``d`` and the mean time spent in the all-to-all, less the k = 0 time: the wait a rank pays
because the others are not there yet. The table ``d -> wait`` per group size goes into the profile
(``lockstep_wait_by_size``); the simulator adds ``wait(d)`` to every collective of that size, with
``d`` the time its members ran since their previous collective.

Measured on the 2-core VM (a pure matmul loop, then this mix): with 2 pinned ranks the wait is
4.6-6.7% of ``d`` for 28-360 ms of work; with 4 ranks on the 2 cores it has a floor of ~8-16 ms (a
scheduler time slice) plus 2.5-4.5% of ``d``. Neither a constant fraction nor ``sqrt(d)`` fits both,
so the profile keeps the table. Trade-off: a few seconds per group size buy a table that is noisy
point to point (+-25% between repeats at 4 ranks); the validation's error shows what remains.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from nspsim.specs.model import ModelSpec
from nspsim_runtime.calibration.executor_steps import barrier
from nspsim_runtime.calibration.mix import kernel_mix
from nspsim_runtime.launch import RankEnv

MIX_TOKENS = 512
WORK_TARGETS_S = (0.0, 0.01, 0.04, 0.12, 0.4)
"""Work between two collectives at each point (0: back-to-back collectives)."""
SECONDS_PER_POINT = 2.5
MIN_REPEATS = 8


def lockstep_waits(spec: ModelSpec, env: RankEnv, quick: bool, kernel_name: str = "auto") -> dict[str, Any]:
    """This rank's ``{"sizes": [...], "work_s": {size: [...]}, "in_collective_s": {size: [...]}}``:
    per group size and point, its mean work and mean seconds inside the all-to-all (module docstring)."""
    out: dict[str, Any] = {"sizes": [], "work_s": {}, "in_collective_s": {}}
    if env.world <= 1:
        return out
    mix = kernel_mix(spec, MIX_TOKENS // 2 if quick else MIX_TOKENS, kernel_name)
    for _ in range(3):
        mix()
    started = time.perf_counter()
    for _ in range(5):
        mix()
    unit = _world_mean((time.perf_counter() - started) / 5, env)  # every rank runs the same k
    targets = WORK_TARGETS_S[:3] if quick else WORK_TARGETS_S
    budget = 0.3 if quick else SECONDS_PER_POINT
    size = 2
    while size <= env.world:
        groups = [dist.new_group(list(range(s, s + size))) for s in range(0, env.world, size)]
        group = groups[env.rank // size]
        send, recv = torch.zeros(size * 16), torch.empty(size * 16)
        work, inside = [], []
        for target in targets:
            k = 0 if target == 0 else max(1, round(target / unit))
            reps = max(MIN_REPEATS, int(budget / max(k * unit, 1e-3)))
            spent, waited = 0.0, 0.0
            barrier()
            for _ in range(reps):
                t0 = time.perf_counter()
                for _ in range(k):
                    mix()
                t1 = time.perf_counter()
                dist.all_to_all_single(recv, send, group=group)
                t2 = time.perf_counter()
                spent, waited = spent + (t1 - t0), waited + (t2 - t1)
            work.append(spent / reps)
            inside.append(waited / reps)
        out["sizes"].append(size)
        out["work_s"][size], out["in_collective_s"][size] = work, inside
        size *= 2
    return out


def _world_mean(value: float, env: RankEnv) -> float:
    gathered: list[Any] = [None] * env.world
    dist.all_gather_object(gathered, value)
    return float(np.mean(gathered))
