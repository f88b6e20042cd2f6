"""SP backends: the three-phase interface and the local leaf backend (:mod:`~nspsim_runtime.backends.base`),
Ulysses and Ring, and the registry :data:`RUNTIME_BACKENDS` keyed by
:class:`~nspsim.specs.backend.SPBackend`, the same enum the cost models are registered under
(:mod:`nspsim.cost.backends`, whose docstring has the recipe for adding a backend).

Degree-1 nodes always run on :class:`~nspsim_runtime.backends.base.LocalBackend`; a plan's backend runs
every larger node. Trade-off: every registered backend is built once per executor (they are
stateless beyond the head counts), so switching backends between plans costs nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from nspsim.specs.backend import SPBackend
from nspsim.specs.model import ModelSpec
from nspsim_runtime.backends.base import PhaseBackend
from nspsim_runtime.backends.ring import RingBackend
from nspsim_runtime.backends.ulysses import UlyssesBackend


class BackendFactory(Protocol):
    """What a registered backend class is: built from the model's attention head counts."""

    def __call__(self, *, num_heads: int, num_kv_heads: int) -> PhaseBackend: ...


RUNTIME_BACKENDS: Mapping[SPBackend, BackendFactory] = {
    SPBackend.ULYSSES: UlyssesBackend,
    SPBackend.RING: RingBackend,
}


def sp_backends(spec: ModelSpec) -> dict[SPBackend, PhaseBackend]:
    """One instance of every registered backend for the heads of ``spec``."""
    return {
        name: make(num_heads=spec.num_heads, num_kv_heads=spec.num_kv_heads) for name, make in RUNTIME_BACKENDS.items()
    }
