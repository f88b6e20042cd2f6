"""The progress bar every command and study draws: tqdm without its monitor thread.

tqdm starts a monitor thread with its first bar (it refreshes bars idle for ten seconds). A second
thread in the process makes :class:`nspsim.simulator.Simulator` leave Python's cycle collector on
while it builds and runs a step (the switch is process-wide, so it only pauses it when it is alone),
and the collector rescanning tens of thousands of live tasks cost 1.5-2.2x per simulated step. The
bars here redraw on every update anyway, so they lose nothing by going without the monitor.
"""

from __future__ import annotations

from typing import ClassVar

from tqdm import tqdm


class Bar(tqdm):  # type: ignore[misc]  # tqdm ships no type information
    """A :class:`tqdm.tqdm` bar that starts no thread (module doc)."""

    monitor_interval: ClassVar[float] = 0
