"""Simulation modes: how much of a step may overlap, and what follows for FSDP prefetching.

``stream`` (inter-level phase streaming and FSDP overlap), ``no-stream`` (a GPU's attention phases
do not overlap each other; FSDP still overlaps) and ``serial`` (nothing overlaps, no FSDP prefetch).
Each mode's dependencies contain the previous mode's, so without link sharing stream <= no-stream <=
serial task by task (:mod:`nspsim.simulator.step_model` builds the dependencies).
"""

from __future__ import annotations

from enum import StrEnum


class SimMode(StrEnum):
    """How much of a step overlaps (see the module docstring); each mode's dependencies contain the
    previous mode's."""

    STREAM = "stream"
    NO_STREAM = "no-stream"
    SERIAL = "serial"


MODES: tuple[str, ...] = tuple(m.value for m in SimMode)
"""The mode names in order (CLI choices, ``in`` tests and error messages)."""


def prefetch_layers(mode: SimMode, depth: int) -> int:
    """How many layers ahead FSDP all-gathers run in ``mode``: the configured ``depth``, 0 in serial
    mode (nothing overlaps)."""
    return 0 if mode == SimMode.SERIAL else depth
