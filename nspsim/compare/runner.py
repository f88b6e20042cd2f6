"""Run a comparison: every planner spec on the same K batches, planned, prepared, simulated (docs/paper_figures.md).

For each spec and each of K batches (``sampler.batch(first_batch + i)``, identical for every spec)
the batch is planned, prepared as the spec says (:func:`nspsim.execution.prepare.prepare_plan`:
tree-level recomputation marks, then an optimised issue order re-ranked with the simulator; a spec
without either runs as planned) and simulated. Each distinct (plan, mode) is simulated once (results
are memoised by content hash), so ranking issue-order candidates, recording the chosen plan and
identical plans of different specs share one simulation. Timelines (tens of thousands of events
each) are recorded only at the end, for one iteration: the config's, or with ``"widest"`` the batch
on which the planners' step times differ most (:func:`~nspsim.compare.summary.widest_iteration`),
each planner's prepared plan of that batch simulated again with its timeline.

``static-best`` is the fastest *fixed* degree over the whole run: every admissible degree is planned
on the same K batches and the one with the least mean simulated step time is kept. A degree that
cannot hold some sample (not planned at all), or runs out of memory on any batch, is not eligible (a
fixed degree must run the whole run); the note and ``CompareResult.static_best_ineligible`` say which
degrees were passed over and why. If none is eligible, the comparison stops with a one-line error. It
runs first, so a failing sweep wastes nothing else. ``static-paper`` (the paper's Static SP: token
packing, :data:`nspsim.compare.specs.SWEPT_STATIC`) is swept and chosen the same way, right after it
(``CompareResult.static_paper_ineligible``, ``static_paper_degree`` in the resolved config).

Before anything runs, every spec's planner checks its options against the workload
(:meth:`nspsim.planners.base.Planner.check`: e.g. a fixed degree or FlexSP's ``min_group`` above
spmax), so a bad option fails at once rather than after the static-best sweep.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from nspsim.compare.specs import SWEPT_STATIC, WIDEST, CompareConfig, PlannerSpec
from nspsim.compare.steps import cannot_hold, iteration_record, prepare_for, run_window
from nspsim.compare.summary import (
    BatchDrops,
    CompareResult,
    IterationRecord,
    baseline_of,
    mean_step_time,
    summarise,
    widest_iteration,
)
from nspsim.compare.windows import WindowRecord, window_record
from nspsim.plan import Plan
from nspsim.plan.window import WindowPlan
from nspsim.planners import get_planner
from nspsim.planners.base import Planner
from nspsim.simulator import SimOptions, Simulator, StepResult
from nspsim.simulator.approximate import ApproxCheck
from nspsim.simulator.modes import SimMode
from nspsim.trace.batching import Batch
from nspsim.units import format_seconds
from nspsim.workload import Workload, build_workload, input_digests

Progress = Callable[[int, int, str], None]


def run_compare(config: CompareConfig, progress: Progress | None = None) -> CompareResult:
    """Plan and simulate every planner on the same batches; see the module docstring.
    ``progress(done, total, label)`` is called after every planned-and-simulated batch."""
    workload = build_workload(config.workload)
    run = config.run
    if run.approx_layers >= workload.model.num_layers:
        raise ValueError(
            f"approx_layers (--approx-layers) {run.approx_layers}: {workload.model.name} has "
            f"{workload.model.num_layers} layers; give fewer to simulate, or 0 for an exact simulation"
        )
    specs = run.specs()
    for spec in specs.values():  # options that cannot apply to this workload fail before anything runs
        if spec.label not in SWEPT_STATIC:
            get_planner(spec.planner, **spec.options).check(workload)
    batches = [workload.sampler.batch(run.first_batch + i) for i in range(run.iters)]
    runner = _Runner(workload, batches, config, progress)
    runs: dict[str, tuple[list[IterationRecord], str]] = {}
    for label in sorted(run.planners, key=lambda p: p not in SWEPT_STATIC):  # a failing sweep fails first
        runs[label] = runner.run(specs[label])
    records = [r for label in run.planners for r in runs[label][0]]
    windows = [w for label in run.planners for w in runner.window_records(label, runs[label][0])]
    baseline = baseline_of(run.planners, run.baseline)
    chosen = config.timeline_iteration
    shown = widest_iteration(records) if chosen == WIDEST else chosen
    if chosen == WIDEST and shown is None and records:  # fewer than two planners ran anywhere
        shown = 0
    timelines = runner.timelines([specs[p] for p in run.planners], None if shown is None else int(shown))
    summaries = summarise(run.planners, records, {p: note for p, (_, note) in runs.items()}, baseline, run.window)
    resolved = {
        **config.to_dict(),
        "workload": config.workload.to_dict(),
        "inputs": input_digests(config.workload),
        "baseline": baseline,
        "static_best_degree": runner.best_degrees.get("static-best"),
        "static_paper_degree": runner.best_degrees.get("static-paper"),
        "token_budget": workload.token_budget,
        "memory_token_budget": workload.memory.derived_token_budget,
        "spmax": workload.tree.spmax,
    }
    return CompareResult(
        config=resolved,
        baseline=baseline,
        summaries=summaries,
        records=tuple(records),
        timelines=timelines,
        drops=BatchDrops.of_batches(batches),
        static_best_ineligible=dict(runner.ineligible_by.get("static-best", {})),
        static_paper_ineligible=dict(runner.ineligible_by.get("static-paper", {})),
        batches=tuple(batches),
        timeline_iteration=None if shown is None else int(shown),
        windows=tuple(windows),
        approximation=runner.approximation_check([specs[p] for p in run.planners]),
    )


class _Runner:
    """Plans, prepares and simulates planner specs on a fixed list of batches.

    Each distinct (plan content, mode) is simulated once: issue-order candidates, the chosen plan and
    identical plans of different specs (``static`` and a ``static-best`` degree) share results.
    """

    def __init__(
        self, workload: Workload, batches: list[Batch], config: CompareConfig, progress: Progress | None
    ) -> None:
        self.workload, self.batches, self.config = workload, batches, config
        self.progress = progress
        self.total = self._total_steps()
        self.done = 0
        self.prepared: dict[str, list[Plan]] = {}  # label -> the prepared plan of every batch
        self.best_degrees: dict[str, int] = {}  # static-best, static-paper: the chosen degree
        self.ineligible_by: dict[str, dict[int, str]] = {}  # the same: degree -> why it was passed over
        self.simulators: dict[tuple[str, bool], Simulator] = {}
        self.results: dict[tuple[str, str, bool], tuple[StepResult, bool]] = {}
        self.windows: dict[str, list[WindowPlan]] = {}  # label -> its window plans (window > 1)

    @property
    def best_degree(self) -> int | None:
        """The degree static-best chose (``None`` before it ran)."""
        return self.best_degrees.get("static-best")

    @property
    def ineligible(self) -> dict[int, str]:
        """The degrees static-best passed over, with why."""
        return self.ineligible_by.get("static-best", {})

    def _total_steps(self) -> int:
        swept = sum(label in SWEPT_STATIC for label in self.config.run.planners)
        others = len(self.config.run.planners) - swept
        return (swept * len(self.workload.tree.degrees) + others) * len(self.batches)

    def _tick(self, label: str) -> None:
        self.done += 1
        if self.progress is not None:
            self.progress(self.done, self.total, label)

    def simulator(self, mode: str, timeline: bool) -> Simulator:
        """A simulator for ``mode`` (cached; one per mode and timeline setting)."""
        key = (mode, timeline)
        if key not in self.simulators:
            options = SimOptions(mode=SimMode(mode), timeline=timeline, approx_layers=self.config.run.approx_layers)
            self.simulators[key] = Simulator.for_workload(self.workload, options)
        return self.simulators[key]

    def simulate(self, plan: Plan, mode: str, timeline: bool, optimizer_step: bool = True) -> StepResult:
        """The simulated step of ``plan`` (memoised; a result with a timeline serves both kinds); without
        ``optimizer_step``, a window's pass that accumulates its gradients."""
        key = (plan.content_hash, mode, optimizer_step)
        cached = self.results.get(key)
        if cached is not None and (cached[1] or not timeline):
            return cached[0]
        result = self.simulator(mode, timeline).simulate(plan, optimizer_step=optimizer_step)
        self.results[key] = (result, timeline)
        return result

    def approximation_check(self, specs: list[PlannerSpec]) -> ApproxCheck | None:
        """With an approximate simulation, its error on this workload: the first step (first planner, then
        batch) that fits in memory, simulated exactly once more; ``None`` for an exact run."""
        if not self.config.run.approx_layers:
            return None
        for spec in specs:
            for i, plan in enumerate(self.prepared.get(spec.label, [])):
                last = (i + 1) % self.config.run.window == 0
                approx = self.simulate(plan, spec.mode, False, last)
                if approx.step_time_s is None:  # out of memory: no step to check
                    continue
                exact = Simulator.for_workload(self.workload, SimOptions(mode=SimMode(spec.mode)))
                exact_s = exact.simulate(plan, optimizer_step=last).step_time_s
                if exact_s is not None:
                    return ApproxCheck(
                        label=f"{spec.label} on batch {plan.batch.index}",
                        layers_simulated=approx.layers_simulated,
                        num_layers=approx.num_layers,
                        exact_s=exact_s,
                        approximate_s=approx.step_time_s,
                    )
        return None

    def timelines(self, specs: list[PlannerSpec], iteration: int | None) -> dict[str, StepResult]:
        """Each spec's step on ``iteration`` simulated again with its timeline (none for ``None``)."""
        if iteration is None:
            return {}
        last = (iteration + 1) % self.config.run.window == 0  # the pass that ends its window steps the optimizer
        return {
            s.label: self.simulate(self.prepared[s.label][iteration], s.mode, timeline=True, optimizer_step=last)
            for s in specs
        }

    def window_records(self, label: str, records: list[IterationRecord]) -> list[WindowRecord]:
        """The window records of ``label`` (none without windows), from its window plans and records."""
        size = self.config.run.window
        return [
            window_record(
                label, w, window, [None if r.oom else r.step_time_s for r in records[w * size : (w + 1) * size]]
            )
            for w, window in enumerate(self.windows.get(label, []))
        ]

    def run(self, spec: PlannerSpec) -> tuple[list[IterationRecord], str]:
        """Records of ``spec`` on every batch, and a note (how static-best or static-paper chose its degree)."""
        if spec.label in SWEPT_STATIC:
            records, plans, note = self._static_best(spec)
        else:
            (records, plans, windows), note = self._run_fixed(spec), ""
            self.windows[spec.label] = windows
        self.prepared[spec.label] = plans
        return records, note

    def _run_fixed(self, spec: PlannerSpec) -> tuple[list[IterationRecord], list[Plan], list[WindowPlan]]:
        """Every batch planned and simulated, with the prepared plans (and the window plans, by windows)."""
        planner = get_planner(spec.planner, **spec.options)
        if self.config.run.window > 1:
            return self._run_windows(spec, planner)
        out, plans = [], []
        for i, batch in enumerate(self.batches):
            record, prepared = self._simulate(spec, i, batch, planner.plan(batch, self.workload))
            out.append(record)
            plans.append(prepared)
            self._tick(spec.label)
        return out, plans, []

    def _run_windows(
        self, spec: PlannerSpec, planner: Planner
    ) -> tuple[list[IterationRecord], list[Plan], list[WindowPlan]]:
        """Every window planned and its passes simulated (:func:`nspsim.compare.steps.run_window`: the
        simulator judges per-step against the best-estimated candidate; every pass but the last of a
        window without the optimizer step)."""
        size = self.config.run.window
        out, plans, windows = [], [], []
        for first in range(0, len(self.batches), size):
            window, passes = run_window(
                spec,
                planner,
                self.batches[first : first + size],
                self.workload,
                lambda p, last: self.simulate(p, spec.mode, False, last),
            )
            for k, step in enumerate(passes):
                record = iteration_record(spec.label, first + k, step.batch, step.planned, step.prepared, step.result)
                out.append(record)
                plans.append(step.prepared)
                self._tick(spec.label)
            windows.append(window)
        return out, plans, windows

    def _evaluator(self, spec: PlannerSpec, optimizer_step: bool) -> Callable[[Plan], float]:
        return lambda p: self.simulate(p, spec.mode, False, optimizer_step).step_time_or_inf

    def _static_best(self, spec: PlannerSpec) -> tuple[list[IterationRecord], list[Plan], str]:
        """The fastest fixed degree among those that run every batch (an out-of-memory batch means the
        degree cannot be the fixed degree of the run). When every degree that ran is out of memory on
        some batch, the one out of memory on the fewest batches is shown with its out-of-memory rows (the
        note says so), so the other planners' results stand; ``ValueError`` only when no degree ran at
        all. Every degree passed over is in ``self.ineligible_by[spec.label]`` with the reason, and in
        the note."""
        runs: dict[int, tuple[list[IterationRecord], list[Plan], list[WindowPlan]]] = {}
        ineligible = self.ineligible_by.setdefault(spec.label, {})
        for degree in self.workload.tree.degrees:
            ticks = self.done
            reason = self._cannot_hold(degree)
            if reason is None:
                try:
                    runs[degree] = self._run_fixed(replace(spec, options={**spec.options, "degree": degree}))
                except ValueError as exc:
                    reason = " ".join(str(exc).split())
            if reason is not None:
                ineligible[degree] = reason
                while self.done < ticks + len(self.batches):
                    self._tick(spec.label)
        for d, (recs, _, _) in runs.items():
            failed = [r.batch_index for r in recs if r.oom]
            if failed:
                listed = ", ".join(map(str, failed[:5])) + (", ..." if len(failed) > 5 else "")
                ineligible[d] = f"out of memory on {len(failed)} of {len(recs)} batches (batch {listed})"
        means = {
            d: m for d, (recs, _, _) in runs.items() if d not in ineligible and (m := mean_step_time(recs)) is not None
        }
        passed_over = "; ".join(f"SP{d} {why}" for d, why in sorted(ineligible.items()))
        if not means and not runs:
            raise ValueError(f"{spec.label}: no fixed SP degree runs every batch: {passed_over}")
        if not means:  # every degree ran out of memory somewhere: shown as the one that fails least, its OOM rows kept
            fewest = min(runs, key=lambda d: (sum(r.oom for r in runs[d][0]), mean_step_time(runs[d][0]) or 0.0))
            self.best_degrees[spec.label] = fewest
            records, kept, self.windows[spec.label] = runs[fewest]
            note = (
                f"no fixed SP degree runs every batch; shown: SP{fewest}, the one out of memory least ({passed_over})"
            )
            return [replace(r, planner=spec.label) for r in records], kept, note
        best = self.best_degrees[spec.label] = min(means, key=lambda d: means[d])
        tried = ", ".join(f"SP{d} {format_seconds(m)}" for d, m in sorted(means.items()))
        records, kept, self.windows[spec.label] = runs[best]
        note = f"fastest fixed degree SP{best} ({tried})" + (f"; not eligible: {passed_over}" if passed_over else "")
        return [replace(r, planner=spec.label) for r in records], kept, note

    def _cannot_hold(self, degree: int) -> str | None:
        return cannot_hold(self.workload, self.batches, degree)

    def _simulate(
        self, spec: PlannerSpec, i: int, batch: Batch, plan: Plan, optimizer_step: bool = True
    ) -> tuple[IterationRecord, Plan]:
        evaluate = self._evaluator(spec, optimizer_step)
        prepared = prepare_for(spec, self.workload, plan, evaluate=evaluate)
        result = self.simulate(prepared, spec.mode, False, optimizer_step)
        return iteration_record(spec.label, i, batch, plan, prepared, result), prepared
