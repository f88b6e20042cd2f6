"""Window planning: route a gradient-accumulation window of W batches as one problem.

Algorithm: build every candidate assignment of :mod:`nspsim.planners.window.assign` (per-step, grouped,
balanced, graded), route each candidate's W passes with the step planner (any registered planner:
NSP first, and the baselines get the same candidates, so a comparison isolates what nesting adds), and
score a candidate by the sum of its passes' estimates (each plan's highest recorded rung: recompute-aware
where the planner evaluated it, else the step estimate; :mod:`nspsim.plan.estimates`). Without a judge
the lowest estimate wins. With a ``judge`` (a function from the candidate's W plans to seconds; compare
passes the simulator) the per-step candidate and the best-estimated other one are judged and the
lower judged time wins: the estimate proposes, the judge disposes. Ties keep per-step, so the window
planner never does worse than per-step planning by the measure that chose. With ``search`` among the
candidates (opt-in), :func:`~nspsim.planners.window.search.local_search` then moves long samples between
the passes of the best-estimated candidate, re-routing the two passes each move touches, and its result
competes as one more candidate.

Trade-off: routing every candidate costs (candidates x W) step plans per window (``window_planning_time_s``:
the assignments plus every routing's ``planning_time_s``, so, like a plan's, it leaves out building and
validating plans); judging only two candidates keeps a simulator judge at 2W simulations per window
while catching the estimate's misrankings between per-step and the best alternative. The search costs two
more routings a move, which is why it is not a default (:mod:`nspsim.planners.window.search`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from nspsim.plan import Plan
from nspsim.plan.window import Assignment, WindowPlan, pass_batches, window_plan
from nspsim.planners.base import Planner
from nspsim.planners.window.assign import CANDIDATES, assign
from nspsim.planners.window.search import DEFAULT_MOVES, DEFAULT_SEED, local_search
from nspsim.trace.batching import Batch
from nspsim.workload import Workload

SEARCH = "search"
"""The opt-in candidate: :func:`~nspsim.planners.window.search.local_search` from the best-estimated
structured candidate (two step routings per move, so not among the defaults :data:`CANDIDATES`)."""
KNOWN_CANDIDATES = (*CANDIDATES, SEARCH)

Judge = Callable[[Sequence[Plan]], float]
"""Seconds of a window whose passes run these plans (lower is better)."""


def plan_estimate(plan: Plan) -> float:
    """The highest rung a plan records (the recompute-aware estimate when its planner evaluated it);
    ``ValueError`` for a plan without estimates."""
    estimates = plan.estimates
    if estimates is None:
        raise ValueError(f"a {plan.planner} plan records no estimates: a window planner cannot compare candidates")
    return max(estimates.step_estimate_s, estimates.chosen_estimate_s)


@dataclass(frozen=True)
class Candidate:
    """One routed candidate: its name, assignment, pass plans and summed estimate."""

    name: str
    assignment: Assignment
    plans: tuple[Plan, ...]
    estimate_s: float


@dataclass(frozen=True, kw_only=True)
class WindowPlanner:
    """Plans windows with ``step`` (module docstring); ``candidates`` restricts the assignments tried
    (``("per-step",)`` is per-step planning in window form); with ``search`` among them, ``search_moves``
    moves of the local search (seeded by ``search_seed``) follow the best-estimated other candidate."""

    step: Planner
    candidates: tuple[str, ...] = CANDIDATES
    search_moves: int = DEFAULT_MOVES
    search_seed: int = DEFAULT_SEED

    def __post_init__(self) -> None:
        unknown = [c for c in self.candidates if c not in KNOWN_CANDIDATES]
        if unknown or not self.candidates:
            raise ValueError(
                f"window candidates must be among {', '.join(KNOWN_CANDIDATES)}, got {list(self.candidates)}"
            )
        if isinstance(self.search_moves, bool) or not isinstance(self.search_moves, int) or self.search_moves < 0:
            raise ValueError(f"search_moves must be a non-negative integer, got {self.search_moves!r}")
        if "per-step" not in self.candidates:
            raise ValueError("window candidates must include per-step (the assignment every other is judged against)")

    def plan(self, batches: Sequence[Batch], workload: Workload, judge: Judge | None = None) -> WindowPlan:
        """The window plan of ``batches`` (consecutive batches of one sampler) on ``workload``."""
        if not batches:
            raise ValueError("a window needs at least one batch")
        start = time.perf_counter()
        sizes = [len(b.lengths) for b in batches]
        lengths = np.concatenate([b.lengths_array() for b in batches])
        work = sample_work(workload, lengths)
        assigning = time.perf_counter() - start
        routed: list[Candidate] = []
        structured = (c for c in self.candidates if c not in ("per-step", SEARCH))
        for name in ("per-step", *structured):  # per-step first: ties keep it
            start = time.perf_counter()
            ids = assign(name, sizes, lengths, work, batches[0].tokens_per_batch)
            assigning += time.perf_counter() - start
            if ids is None or any(c.assignment == ids for c in routed):
                continue
            plans = tuple(self.step.plan(b, workload) for b in pass_batches(batches, ids))
            routed.append(Candidate(name, ids, plans, sum(plan_estimate(p) for p in plans)))
        routing = sum(float(p.metadata.get("planning_time_s", 0.0)) for c in routed for p in c.plans)
        if SEARCH in self.candidates:
            start = time.perf_counter()
            found = self._search(batches, workload, min(routed, key=lambda c: c.estimate_s))
            assigning += time.perf_counter() - start  # its routings' wall time included
            if all(c.assignment != found.assignment for c in routed):
                routed.append(found)
        per_step = routed[0]  # routed first, and no other candidate can equal it (duplicates are skipped)
        best = min(routed, key=lambda c: c.estimate_s)
        judged: dict[str, float] = {}
        if judge is not None and best is not per_step:
            judged = {c.name: judge(c.plans) for c in (per_step, best)}
            best = best if judged[best.name] < judged[per_step.name] else per_step
        metadata: dict[str, float | int | str] = {
            "window_candidate": best.name,
            "window_planning_time_s": assigning + routing,
            "window_candidates_routed": len(routed),
            **{f"window_estimate_s[{c.name}]": c.estimate_s for c in routed},
            **{f"window_judged_s[{name}]": value for name, value in judged.items()},
        }
        return window_plan(batches, best.assignment, best.plans, **metadata)

    def _search(self, batches: Sequence[Batch], workload: Workload, start: Candidate) -> Candidate:
        """The ``search`` candidate: the local search from ``start``, routed and scored by the step planner."""
        ids, plans = local_search(
            batches,
            start.assignment,
            start.plans,
            route=lambda b: self.step.plan(b, workload),
            estimate=plan_estimate,
            moves=self.search_moves,
            seed=self.search_seed,
        )
        return Candidate(SEARCH, ids, plans, sum(plan_estimate(p) for p in plans))


def sample_work(workload: Workload, lengths: np.ndarray) -> np.ndarray:
    """Per sample, its forward and backward seconds on one GPU per layer (attention at degree 1 plus
    the linear layers' per-token time), the cost model's: what ``balanced`` spreads."""
    attention = workload.cost.attention_sample_costs(np.asarray(lengths, dtype=np.int64), 1)
    probe = 4096.0
    linear = workload.cost.non_attention(probe)
    per_token = (linear.fwd + linear.bwd) / probe
    work: np.ndarray = attention.fwd + attention.bwd + per_token * np.asarray(lengths, dtype=np.float64)
    return work
