"""The names of the sequence-parallel (SP) backends: one :class:`SPBackend` enum that specs, cost
models, plans and the runtime all key on.

It is a :class:`~enum.StrEnum`, so a member equals (and hashes like) its plain string value: plans,
configs and records written as JSON keep the same bytes, and values read back from JSON compare equal
to the members. This module imports nothing else from nspsim, so any layer (and ``runtime``) may use
it. How to add a backend: see :mod:`nspsim.cost.backends`.
"""

from __future__ import annotations

from enum import StrEnum


class SPBackend(StrEnum):
    """How one SP-tree node of degree > 1 splits the attention core over its GPUs."""

    ULYSSES = "ulysses"
    RING = "ring"


BACKENDS: tuple[str, ...] = tuple(b.value for b in SPBackend)
"""The backend names in declaration order (``in`` tests and error messages; Python 3.11's
``"x" in SPBackend`` raises for non-members)."""
