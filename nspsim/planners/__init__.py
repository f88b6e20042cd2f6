"""Planners: every strategy routes a batch onto the SP tree and returns a validated Plan (docs/planners.md).

One registry chooses planners by name::

    from nspsim.planners import PLANNER_NAMES, get_planner, Planner
    plan = get_planner("nsp", beam_width=8).plan(batch, workload)

``get_planner`` raises ``ValueError`` listing the known names for an unknown name, and naming the
option for an unknown or invalid option. Every plan's metadata holds ``planning_time_s`` (wall) and
``planning_cpu_s``, its :class:`~nspsim.plan.estimates.Estimates` (``lower_bound_s``, ``load_s``,
``step_estimate_s``, ``chosen_by``, ``chosen_estimate_s`` and ``load_over_lower_bound``; read it as
``plan.estimates``; the ladder is :mod:`nspsim.planners.estimate`), ``micro_batches``,
``dropped_samples`` and ``dropped_tokens`` (what the batch's ``max_context`` dropped), plus
planner-specific entries.
"""

from __future__ import annotations

import math
import sys
from dataclasses import fields
from typing import Any

from nspsim.execution.prepare import AS_PLANNED, Preparation, check_prepare, recorded_preparation, resolve_preparation
from nspsim.plan import Plan
from nspsim.planners.base import Planner
from nspsim.planners.basp import BASPPlanner
from nspsim.planners.flexsp.planner import FlexSPPlanner
from nspsim.planners.megatron_cp import MegatronCPPlanner
from nspsim.planners.nsp.greedy import GreedyPlanner
from nspsim.planners.nsp.planner import NSP2LPlanner, NSPPlanner
from nspsim.planners.static.planner import StaticPlanner

PLANNER_CLASSES: tuple[type[Any], ...] = (
    StaticPlanner,
    FlexSPPlanner,
    BASPPlanner,
    NSP2LPlanner,
    NSPPlanner,
    GreedyPlanner,
    MegatronCPPlanner,
)
"""Every planner, in the order compare lists them; each class states its facts (``nspsim.planners.base``)."""
_REGISTRY: dict[str, type[Any]] = {cls.name: cls for cls in PLANNER_CLASSES}

PLANNER_NAMES: tuple[str, ...] = tuple(_REGISTRY)
HEADLINE_PLANNERS: tuple[str, ...] = tuple(name for name, cls in _REGISTRY.items() if cls.headline)


def planner_cost(name: str) -> float:
    """The planner ``name``'s rough planning cost relative to Static SP's (its ``relative_cost``)."""
    cost: float = _planner_class(name).relative_cost
    return cost


def planner_summary(name: str) -> str:
    """The planner ``name``'s one-line summary: the first line of its card (its module docstring), or
    of its class docstring when several planners share the card (NSP-2L beside NSP)."""
    cls = _planner_class(name)
    shared = sum(c.__module__ == cls.__module__ for c in PLANNER_CLASSES) > 1
    own = (cls.__doc__ or "").strip().splitlines()
    doc = own[0] if shared and own and own[0].endswith(".") else sys.modules[cls.__module__].__doc__ or name
    return doc.strip().splitlines()[0].rstrip(".")


def planner_options(name: str) -> tuple[str, ...]:
    """Option names the planner ``name`` accepts."""
    return tuple(f.name for f in fields(_planner_class(name)))


def _planner_class(name: str) -> type[Any]:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown planner {name!r} (known: {', '.join(PLANNER_NAMES)})") from None


def declared_preparation(name: str) -> Preparation:
    """How the planner ``name`` declares its plans are prepared (its ``preparation`` class attribute)."""
    preparation: Preparation = _planner_class(name).preparation
    return preparation


def plan_preparation(plan: Plan, prepare: str) -> Preparation | None:
    """The preparation the choice ``prepare`` asks of ``plan``: for ``"planner"``, what the plan's
    planner declares (nothing for a planner not registered here: it declares nothing), or ``None``
    when the plan records a preparation already (it runs as written); ``ValueError`` for a recorded
    value that names no preparation."""
    recorded = recorded_preparation(plan)
    if check_prepare(prepare) != "planner":
        return resolve_preparation(prepare, AS_PLANNED)
    if recorded is not None:
        return None
    return declared_preparation(plan.planner) if plan.planner in _REGISTRY else AS_PLANNED


def get_planner(name: str, **options: Any) -> Planner:
    """The planner ``name`` configured with ``options`` (see each planner's class for its options)."""
    cls = _planner_class(name)
    known = planner_options(name)
    for key, value in options.items():
        if key not in known:
            listed = ", ".join(known) if known else "none"
            raise ValueError(f"planner {name!r} has no option {key!r} (options: {listed})")
        if isinstance(value, float) and not math.isfinite(value):  # TOML and JSON specs can spell nan and inf
            raise ValueError(f"planner {name!r} option {key}={value!r} is not a finite number")
    planner: Planner = cls(**options)
    return planner


__all__ = [
    "HEADLINE_PLANNERS",
    "PLANNER_CLASSES",
    "PLANNER_NAMES",
    "Planner",
    "declared_preparation",
    "get_planner",
    "plan_preparation",
    "planner_cost",
    "planner_options",
]
