"""Per-rank phase clock: wall seconds spent per step-breakdown category.

The executor measures, on the host, the time spent inside attention kernels (``attn_fwd``,
``attn_bwd``, ``attn_remat``), blocked on SP collectives (``sp_exposed_comm``) and the issue-to-
completion span of every SP collective (``sp_comm``). :func:`breakdown` turns those and the step's
wall time into the shared record categories (``nspsim.records.BREAKDOWN_CATEGORIES``): whatever the
measured categories do not claim inside forward/backward is ``non_attn``. On CUDA the host only sees
kernel launches, so the executor synchronises the device before reading the clock when asked to
(``sync``); the CPU/gloo path needs no synchronisation.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from nspsim.records import BREAKDOWN_CATEGORIES

MEASURED = ("attn_fwd", "attn_bwd", "attn_remat", "sp_exposed_comm", "sp_comm", "comm_wait", "fsdp_exposed_comm")


class PhaseClock:
    """Accumulates seconds per category; one per rank, owned by the executor (no global state)."""

    def __init__(self, sync: Callable[[], None] | None = None) -> None:
        self.seconds: dict[str, float] = dict.fromkeys(MEASURED, 0.0)
        self._sync = sync

    def reset(self) -> None:
        """Zero every category (start of a step)."""
        self.seconds = dict.fromkeys(MEASURED, 0.0)

    def add(self, category: str, seconds: float) -> None:
        """Add ``seconds`` to ``category``."""
        self.seconds[category] = self.seconds.get(category, 0.0) + seconds

    def now(self) -> float:
        """Host clock after draining queued device work (when a device sync is configured)."""
        if self._sync is not None:
            self._sync()
        return time.perf_counter()

    @contextmanager
    def measure(self, category: str) -> Iterator[None]:
        """Time the enclosed block into ``category``."""
        start = self.now()
        try:
            yield
        finally:
            self.add(category, self.now() - start)


def breakdown(seconds: dict[str, float], fwd_bwd_s: float, step_s: float) -> dict[str, float]:
    """Record breakdown from measured categories: ``non_attn`` is the rest of forward/backward and
    ``other`` the rest of the step, so the categories add up to ``step_s``. ``ep_exposed_comm`` is 0:
    the runtime holds every expert on every rank (no expert parallelism), so it runs no expert
    all-to-all to measure; the key is there so measured and simulated records join."""
    attn = seconds["attn_fwd"] + seconds["attn_bwd"] + seconds["attn_remat"] + seconds["sp_exposed_comm"]
    out = {name: 0.0 for name in BREAKDOWN_CATEGORIES}
    for name in ("attn_fwd", "attn_bwd", "attn_remat", "sp_exposed_comm", "fsdp_exposed_comm", "comm_wait"):
        out[name] = seconds[name]
    out["non_attn"] = max(0.0, fwd_bwd_s - attn)
    claimed = sum(v for k, v in out.items() if k != "other")
    out["other"] = max(0.0, step_s - claimed)
    return out
