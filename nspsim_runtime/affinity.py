"""Pin CPU ranks to cores when there is a core for each, so runs are repeatable.

With fewer ranks than cores the Linux scheduler may still put two single-threaded ranks on one core
for a while; on the 2-core development machine the same 2-rank configuration then measured 2.13 to
2.94 s/step from run to run (nsp on ``code`` batches, four runs), which no model of the step can
predict. One core per rank removes that: each rank (and its gloo threads, which inherit the mask)
runs on its own core. With more ranks than cores nothing is pinned: the ranks share the host's
cores as a pool, which is what the simulator's core sharing models (:mod:`nspsim.simulator.sharing`).
Trade-off: a pinned rank's communication threads compete with its own compute rather than spreading
over idle cores.
"""

from __future__ import annotations

import os


def pin_to_core(local_rank: int, local_world: int) -> int | None:
    """Restrict this process to one core of those it may use when ``local_world`` ranks fit one per
    core; the core, or ``None`` (more ranks than cores, or no affinity support on this platform)."""
    if not hasattr(os, "sched_getaffinity"):
        return None
    cores = sorted(os.sched_getaffinity(0))
    if local_world > len(cores) or not 0 <= local_rank < local_world:
        return None
    core = cores[local_rank]
    os.sched_setaffinity(0, {core})
    return core
