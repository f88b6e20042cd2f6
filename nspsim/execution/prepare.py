"""Executor preparation: a routed plan becomes the executable plan that runs (NSP paper section 4.2).

Two optional steps, in this order:

1. tree-level recomputation marks for the memory budget (:func:`nspsim.execution.recompute.mark_recompute`):
   which samples keep their attention state and which recompute it in backward;
2. the issue order for inter-level phase streaming (:func:`nspsim.execution.issue_order.optimize_issue_order`),
   scored after the marks (a marked node's recompute pass streams in its backward) and, with
   ``evaluate`` (lower is better, e.g. a simulator's :attr:`~nspsim.simulator.StepResult.step_time_or_inf`),
   re-ranked by it, so the result is never worse than the planner's own order there.

Which steps run is one value, :class:`Preparation`. Every planner declares its own (a class attribute:
plans routed for nesting want both steps, the baselines run as planned), and every entry point
(``nspsim plan``, ``simulate``, ``compare``, ``sweep``, ``nspsim_runtime.train``, the Python API) takes one
``prepare`` choice (:data:`PREPARE_CHOICES`) whose default, ``"planner"``, is that declaration
(:func:`resolve_preparation`). So ``nspsim plan | nspsim simulate``, ``nspsim compare`` and the runtime
prepare a plan the same way unless told otherwise. A prepared plan records what was applied in its
metadata (``prepared``, ``none`` included), and ``"planner"`` leaves such a plan as it is: a runtime plan
log replays as it was executed. Both steps are deterministic for a plan and a cost/memory model (``evaluate`` aside).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from nspsim.cost.interface import CostModel
from nspsim.execution.issue_order import optimize_issue_order
from nspsim.execution.recompute import mark_recompute
from nspsim.plan import Plan
from nspsim.specs.memory import MemoryModel

PREPARE_CHOICES = ("planner", "none", "recompute", "order", "all")
"""``planner``: as the plan's planner declares; ``none``: as routed; ``recompute``: tree-level marks only;
``order``: optimised issue order only; ``all``: both."""
PREPARE_HELP = (
    "how plans are prepared before they run: planner (default: as the plan's planner declares; a plan "
    "that records a preparation stays as it is), none (as routed), recompute (tree-level recompute marks), "
    "order (optimised issue order), all (both)"
)
PREPARED_KEY = "prepared"
"""Plan metadata key naming the preparation applied to the plan (absent: as routed)."""


@dataclass(frozen=True, kw_only=True)
class Preparation:
    """Which preparation steps run: tree-level recompute marks (``tree_recompute``), then an optimised
    issue order (``optimize_order``)."""

    tree_recompute: bool = False
    optimize_order: bool = False

    def __post_init__(self) -> None:
        for key in ("tree_recompute", "optimize_order"):
            if not isinstance(getattr(self, key), bool):
                raise ValueError(f"preparation {key} must be True or False, got {getattr(self, key)!r}")

    @property
    def label(self) -> str:
        """The :data:`PREPARE_CHOICES` name of this preparation (``none``, ``recompute``, ``order``, ``all``)."""
        return _LABELS[(self.tree_recompute, self.optimize_order)]


AS_PLANNED = Preparation()
NESTED_PREPARATION = Preparation(tree_recompute=True, optimize_order=True)
_LABELS = {(False, False): "none", (True, False): "recompute", (False, True): "order", (True, True): "all"}
_NAMED = {label: Preparation(tree_recompute=t, optimize_order=o) for (t, o), label in _LABELS.items()}


def check_prepare(prepare: str) -> str:
    """``prepare`` if it is one of :data:`PREPARE_CHOICES`, else ``ValueError`` naming them."""
    if prepare not in PREPARE_CHOICES:
        raise ValueError(f"unknown preparation {prepare!r} (known: {', '.join(PREPARE_CHOICES)})")
    return prepare


def resolve_preparation(prepare: str, declared: Preparation) -> Preparation:
    """The preparation ``prepare`` names; ``"planner"`` is ``declared`` (the planner's own)."""
    return declared if check_prepare(prepare) == "planner" else _NAMED[prepare]


def recorded_preparation(plan: Plan) -> str | None:
    """The preparation a prepared plan records (``none`` included: it was asked to run as routed);
    ``None`` for a plan no preparation step has seen; ``ValueError`` for a value that names none."""
    value = plan.metadata.get(PREPARED_KEY)
    if value is None:
        return None
    if value not in _NAMED:
        raise ValueError(
            f"plan metadata {PREPARED_KEY}={value!r} is not a preparation (known: {', '.join(_NAMED)}); "
            "remove it to prepare the plan as its planner declares"
        )
    return str(value)


def prepare_plan(
    plan: Plan,
    *,
    memory: MemoryModel,
    cost: CostModel,
    preparation: Preparation,
    evaluate: Callable[[Plan], float] | None = None,
) -> Plan:
    """``plan`` with tree-level recompute marks (``preparation.tree_recompute``) and an optimised issue
    order (``preparation.optimize_order``, re-ranked by ``evaluate`` when given), recording the
    preparation in its metadata (``none`` too: the plan then runs as written wherever it is replayed);
    its content (and hash) is unchanged when no step runs."""
    if preparation.tree_recompute:
        plan = mark_recompute(plan, memory, cost)
    if preparation.optimize_order:
        plan = optimize_issue_order(plan, cost, evaluate=evaluate)
    return plan.with_metadata({PREPARED_KEY: preparation.label})
