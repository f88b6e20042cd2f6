"""Pruning a memory-bound batch's micro-batch splits by a proved floor (NSP, :mod:`~nspsim.planners.nsp.planner`).

NSP tries several splits of a memory-bound batch into micro-batches and keeps the one with the least
summed recompute-aware estimate (strictly less than the best so far: ties keep the earlier). No
micro-batch's estimate is below its :func:`~nspsim.planners.estimate.micro_batch_floor` (proved there;
:data:`~nspsim.planners.estimate.FLOOR_MARGIN` covers the rounding), so while a split is routed,
micro-batch by micro-batch:

* :func:`beaten`: once the routed micro-batches' estimates plus the others' floors reach the best
  split's estimate, the split cannot win; the rest is not routed;
* :func:`part_cap`: a micro-batch's candidate routes whose estimate (or Load, which is below it) reaches
  the best minus the routed estimates minus the later floors cannot make the split win; they are not
  estimated, and static seeds whose floor reaches it are not packed. If that leaves no candidate, or
  the least estimate is not below the cap, the split loses whatever the micro-batch returns.

Both only skip work whose result cannot be chosen: the plan and its estimates are the same
(``tests/planners/test_estimate_ladder.py`` checks the floor on random placements and the plans with
and without pruning). Trade-off: one floor per micro-batch (a sum over its samples) for about a third
fewer micro-batches routed and half the estimates on Qwen3-235B.
"""

from __future__ import annotations

from nspsim.planners.estimate import FLOOR_MARGIN


def beaten(bound: float, best: float) -> bool:
    """Whether a split whose estimate is at least ``bound`` (its routed micro-batches' estimates plus
    the others' floors) cannot be strictly below ``best``."""
    return bound * (1 - FLOOR_MARGIN) >= best


def part_cap(best: float, done: float, later_floors: float) -> float:
    """The estimate a micro-batch must stay below for its split to win against ``best`` (``done``: the
    routed micro-batches' estimates; ``later_floors``: the floors of those after it): at or above it,
    :func:`beaten` holds for the split."""
    return best / (1 - FLOOR_MARGIN) - done - later_floors
