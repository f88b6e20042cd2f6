"""FlexSP's MILP solves, one after another or in worker processes, with a per-plan time budget.

**Algorithm.** A micro-batch count's chunks are independent MILPs (as in the FlexSP artifact, which
solves them in a process pool). :class:`Solves` runs a list of prepared problems either in this
process (``workers=1``) or on a pool of ``workers`` processes started with ``forkserver`` (``spawn``
where that is missing), never ``fork``: the solver holds no state between solves, each job gets a
pickled problem and returns its run, and ``Executor.map`` hands the runs back in submission order,
so the result does not depend on which process finishes first. Each solve is single-threaded and
stopped by its deterministic work limit (:mod:`~nspsim.planners.flexsp.highs_solve`), so the runs,
and the plan, are the same for any worker count.

**Time budget.** With ``plan_time_limit`` > 0 every solve's wall-clock limit is cut to what is left of
the plan's budget, and once nothing is left a chunk that has a static incumbent is not solved at all:
it keeps the incumbent (status ``budget-skipped``). Solves the clock stopped or skipped are counted
in the plan metadata; such a plan is not reproducible, which is why the budget is off by default.

**Trade-off.** A pool costs one process start per worker per plan (about a second with scipy's import),
so workers pay only where solves take longer than that (hundreds of GPUs with the per-slot model);
with the aggregated model (:mod:`~nspsim.planners.flexsp.aggregated`) a solve takes well under a second.
"""

from __future__ import annotations

import multiprocessing
import time
from concurrent.futures import Executor, ProcessPoolExecutor
from dataclasses import dataclass, replace
from types import TracebackType

from nspsim.planners.flexsp.aggregated import solve_counts
from nspsim.planners.flexsp.milp import Limits, MilpProblem, MilpRun, solve

MILP_MODELS = ("auto", "slots", "counts")
"""``milp_model`` values: ``slots`` the per-slot MILP, ``counts`` the aggregated one, ``auto`` slots up to
:data:`~nspsim.planners.flexsp.aggregated.AUTO_SLOTS_UP_TO` GPUs and counts above."""
BUDGET_SKIPPED = "budget-skipped"
"""Stop reason of a solve the spent plan budget skipped (not ``time-limit``: that one counts clock stops)."""


@dataclass(frozen=True)
class Job:
    """One solve: the problem, the model (``slots`` or ``counts``), the solver and its limits."""

    problem: MilpProblem
    model: str
    solver: str
    limits: Limits


def run_job(job: Job) -> MilpRun:
    """Solve one job (module-level, so a worker process can run it)."""
    if job.model == "counts":
        return solve_counts(job.problem, solver=job.solver, limits=job.limits)
    return solve(job.problem, solver=job.solver, limits=job.limits)


def _context() -> multiprocessing.context.BaseContext:
    methods = multiprocessing.get_all_start_methods()
    return multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")


class Solves:
    """Runs solves for one plan (module doc): in order, on a pool of ``workers`` processes when more
    than one, each under the per-solve limits cut to the plan's remaining budget (0: no budget)."""

    def __init__(self, workers: int, plan_time_limit: float) -> None:
        self.workers = workers
        self.deadline = time.perf_counter() + plan_time_limit if plan_time_limit > 0 else None
        self._pool: Executor | None = None

    def __enter__(self) -> Solves:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
            self._pool = None

    def remaining(self) -> float | None:
        """Seconds left of the plan's budget (``None``: no budget)."""
        return None if self.deadline is None else self.deadline - time.perf_counter()

    def run(self, jobs: list[Job], has_incumbent: list[bool]) -> list[MilpRun]:
        """The runs of ``jobs`` in their order; a job with an incumbent is skipped once the budget is spent."""
        left = self.remaining()
        skipped = MilpRun(solution=None, status=BUDGET_SKIPPED, solve_time_s=0.0, work=0, solver="none")
        todo = [i for i, fallback in enumerate(has_incumbent) if left is None or left > 0 or not fallback]
        capped = [self._capped(jobs[i], left) for i in todo]
        if self.workers > 1 and len(capped) > 1:
            if self._pool is None:
                self._pool = ProcessPoolExecutor(max_workers=self.workers, mp_context=_context())
            runs = list(self._pool.map(run_job, capped))
        else:
            runs = [run_job(job) for job in capped]
        out = [skipped] * len(jobs)
        for i, r in zip(todo, runs):
            out[i] = r
        return out

    @staticmethod
    def _capped(job: Job, left: float | None) -> Job:
        if left is None or left <= 0 or left >= job.limits.time_limit:
            return job
        return replace(job, limits=replace(job.limits, time_limit=left))
