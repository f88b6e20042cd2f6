"""Per-backend attention costs behind one registry keyed by :class:`~nspsim.specs.backend.SPBackend`.

:func:`backend_cost` gives the :class:`~nspsim.cost.backends.base.BackendCost` of a backend: how it
prices a node of degree > 1 (:mod:`~nspsim.cost.backends.ulysses`, :mod:`~nspsim.cost.backends.ring`)
and the largest degree it admits; :data:`LOCAL` prices degree-1 nodes, the same for every backend.
:class:`~nspsim.cost.analytic.AnalyticCostModel` looks its backend up once. Trade-off: one small
file per backend instead of ``if backend == ...`` branches spread over the cost model, the workload
and the runtime, at the price of one indirection per node.

Adding an SP backend ``foo`` (one name, one cost file, one runtime file, one registration each):

1. name it: ``FOO = "foo"`` in :class:`nspsim.specs.backend.SPBackend` (specs, plans, configs and the
   ``--backend`` choices of ``nspsim`` and ``nspsim_runtime.train`` accept it from then on);
2. its cost: ``nspsim/cost/backends/foo.py`` with a frozen ``FooCost(BackendCost)`` (``node``,
   ``sample_costs``, ``collectives_per_node``, ``max_degree``), registered in :data:`COSTS` below;
3. its execution: ``nspsim_runtime/backends/foo.py`` with a class of the three-phase interface
   (``nspsim_runtime.backends.base.PhaseBackend``, built from ``num_heads`` and ``num_kv_heads``),
   registered in ``nspsim_runtime.backends.RUNTIME_BACKENDS``;
4. its layout: a :class:`~nspsim.specs.backend.BackendLayout` in :data:`nspsim.specs.backend.LAYOUTS`
   (contiguous or zigzag chunks, what a saved node keeps), which the memory model, the execution
   shards and the runtime's validation cases read (a chunk layout other than the two is a new
   ``chunks`` value and its rule in :func:`nspsim.execution.shards.chunk_owners`).

All three registries must cover every member (``tests/specs/test_cost_model.py`` and
``tests/runtime/test_runtime_backends_local.py`` check it), so a missed step fails at once.
"""

from __future__ import annotations

from collections.abc import Mapping

from nspsim.cost.backends.base import BackendCost, Coefficients, NodeCost, attention_compute
from nspsim.cost.backends.local import LocalCost
from nspsim.cost.backends.ring import RingCost
from nspsim.cost.backends.ulysses import UlyssesCost
from nspsim.specs.backend import BACKENDS, SPBackend

__all__ = [
    "BACKENDS",
    "COSTS",
    "LOCAL",
    "BackendCost",
    "Coefficients",
    "NodeCost",
    "SPBackend",
    "attention_compute",
    "backend_cost",
]

COSTS: Mapping[SPBackend, BackendCost] = {SPBackend.ULYSSES: UlyssesCost(), SPBackend.RING: RingCost()}
LOCAL: NodeCost = LocalCost()


def backend_cost(backend: str) -> BackendCost:
    """The registered cost of ``backend`` (a member or its value); ``ValueError`` if unknown."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown SP backend {backend!r} (known: {', '.join(BACKENDS)})")
    return COSTS[SPBackend(backend)]
