"""Compare parallel strategies on the same batches: plan, prepare, simulate, summarise (SPEC section 8).

For each planner spec and each of K batches (``sampler.batch(first_batch + i)``, identical for every
planner) the batch is planned, made executable and simulated. Specs:

* a registered planner name (``static``, ``flexsp``, ``basp``, ``nsp2l``, ``nsp``, ``greedy``, ...);
* ``static-<d>``: Static SP with the fixed degree d;
* ``static-best``: the paper's Static SP baseline, the fastest *fixed* degree over the whole run:
  every admissible degree is planned on the same K batches and the one with the least mean simulated
  step time is kept. A degree that cannot hold some sample, or runs out of memory on any batch, is
  not eligible (a fixed degree must run the whole run); if none is, the comparison stops with a
  one-line error (static-best runs first, so nothing else is wasted);
* NSP ablations (paper section 6.4): ``nsp-no-recompute`` (no tree-level marks: full recomputation
  when memory forces it), ``nsp-no-overlap`` (phase streaming off), ``nsp-greedy`` (the ``greedy``
  planner, "w/o router"), ``nsp-attn-fwd`` (``proxy="attn-fwd"``, "w/o cost model").

Executors: NSP-family plans (nsp, nsp2l, greedy and the ablations) are prepared by
:func:`nspsim.execution.prepare.prepare_plan`: tree-level recomputation marks, then an optimised issue order
re-ranked with the simulator; baselines run as planned (no marks: full attention recomputation when
memory forces it). Each distinct (plan, mode) is simulated once (results are memoised by content
hash), so ranking candidates and recording the chosen plan share one simulation.

Results are typed records; normalisation is to ``static-best`` when it is compared, else to ``static``
(per-batch automatic degree), else to the first planner. ``normalized_to_static`` is the planner's
summed step time over the baseline's on the iterations where *both* ran in memory (the paper's
Figure 7 form on the same batches; ``normalized_iterations`` says how many), ``speedup_vs_static``
its inverse. ``mean_step_time_s`` averages the iterations that fit; out-of-memory iterations are
counted (``oom_count``), never averaged. Every spec and planner option is validated when the
:class:`CompareConfig` is built, before anything runs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np

from nspsim.trace.batching import Batch
from nspsim.workload import Workload, WorkloadConfig, build_workload
from nspsim.options import parse_options
from nspsim.plan import Plan
from nspsim.planners import PLANNER_NAMES, get_planner
from nspsim.execution.prepare import prepare_plan
from nspsim.records import BREAKDOWN_CATEGORIES
from nspsim.simulator import SimOptions, Simulator, StepResult
from nspsim.simulator.step_model import MODES

DEFAULT_ITERS = 3
MAX_ITERS = 100_000  # batches are drawn up front; 10**9 would look like a hang while memory filled
DEFAULT_FLEXSP_TIME_LIMIT_S = 10.0  # per MILP solve (the artifact's); a safety net: FlexSP's deterministic work limit stops first
MAIN_PLANNERS = ("static", "flexsp", "basp", "nsp2l", "nsp")
NSP_FAMILY = ("nsp", "nsp2l", "greedy")
ABLATIONS: dict[str, tuple[str, dict[str, Any], dict[str, Any]]] = {
    # label: (planner, planner options, executor overrides)
    "nsp-no-recompute": ("nsp", {}, {"tree_recompute": False}),
    "nsp-no-overlap": ("nsp", {}, {"mode": "no-stream"}),
    "nsp-greedy": ("greedy", {}, {}),
    "nsp-attn-fwd": ("nsp", {"proxy": "attn-fwd"}, {}),
}
LENGTH_BUCKETS = (("0-8K", 8 * 1024), ("8-32K", 32 * 1024), ("32-128K", 128 * 1024), ("128K+", None))

Progress = Callable[[int, int, str], None]


def default_planners() -> tuple[str, ...]:
    """``static-best`` plus every main strategy whose planner is registered."""
    return ("static-best", *(name for name in MAIN_PLANNERS if name in PLANNER_NAMES))


@dataclass(frozen=True, kw_only=True)
class PlannerSpec:
    """How to plan and execute one compared strategy."""

    label: str
    planner: str
    options: dict[str, Any] = field(default_factory=dict)
    tree_recompute: bool = False
    optimize_order: bool = False
    mode: str = "stream"

    def __post_init__(self) -> None:
        if not self.label:
            raise ValueError("a planner spec needs a label")
        if self.mode not in MODES:
            raise ValueError(f"planner spec {self.label!r}: unknown mode {self.mode!r} (known: {', '.join(MODES)})")
        if self.planner not in PLANNER_NAMES:
            raise ValueError(f"planner spec {self.label!r}: planner {self.planner!r} is not registered "
                             f"(known: {', '.join(PLANNER_NAMES)})")
        get_planner(self.planner, **self.options)  # unknown or invalid options fail here, before anything runs


def parse_planner_spec(label: str, mode: str = "stream", defaults: dict[str, dict[str, Any]] | None = None) -> PlannerSpec:
    """The :class:`PlannerSpec` of a label (see the module docstring); ``ValueError`` if unknown.

    ``name:key=value+key=value`` passes options to the planner (``flexsp:time_limit=10``); ``defaults``
    gives per-planner options used when the label does not set them.
    """
    name, _, text = label.partition(":")
    if name == "static-best" and text:
        raise ValueError(f"planner spec {label!r}: static-best sweeps the degree and takes no options")
    spec = _base_spec(name, mode)
    options = {**(defaults or {}).get(spec.planner, {}), **spec.options, **_parse_options(label, text)}
    return replace(spec, label=label, options=options)


def _parse_options(label: str, text: str) -> dict[str, Any]:
    try:
        return parse_options(filter(None, text.split("+")))
    except ValueError as exc:
        raise ValueError(f"planner spec {label!r}: {exc} (options look like name:key=value+key=value)") from None


def _base_spec(label: str, mode: str) -> PlannerSpec:
    if label in ABLATIONS:
        planner, options, overrides = ABLATIONS[label]
        _check_registered(planner, label)
        spec = PlannerSpec(label=label, planner=planner, options=options, tree_recompute=True, optimize_order=True,
                           mode=mode)
        return replace(spec, **overrides)
    if label.startswith("static-") and label != "static-best":
        degree = label.removeprefix("static-")
        if not degree.isdigit():
            raise ValueError(f"planner spec {label!r}: expected static-<degree>, e.g. static-8, or static-best")
        return PlannerSpec(label=label, planner="static", options={"degree": int(degree)}, mode=mode)
    if label == "static-best":
        return PlannerSpec(label=label, planner="static", mode=mode)
    _check_registered(label, label)
    nested = label in NSP_FAMILY
    return PlannerSpec(label=label, planner=label, tree_recompute=nested, optimize_order=nested, mode=mode)


def _check_registered(planner: str, label: str) -> None:
    if planner not in PLANNER_NAMES:
        known = ", ".join([*PLANNER_NAMES, "static-best", "static-<d>", *ABLATIONS])
        raise ValueError(f"planner {label!r} is not available (known: {known})")


@dataclass(frozen=True, kw_only=True)
class CompareConfig:
    """Everything that identifies a comparison (plain values; what the CLI writes beside results)."""

    workload: WorkloadConfig = field(default_factory=WorkloadConfig)
    planners: tuple[str, ...] = field(default_factory=default_planners)
    planner_options: dict[str, dict[str, Any]] = field(
        default_factory=lambda: {"flexsp": {"time_limit": DEFAULT_FLEXSP_TIME_LIMIT_S}})
    iters: int = DEFAULT_ITERS
    first_batch: int = 0
    mode: str = "stream"
    timeline_iteration: int | None = 0

    def __post_init__(self) -> None:
        if not _is_int(self.iters) or self.iters <= 0 or not _is_int(self.first_batch) or self.first_batch < 0:
            raise ValueError(f"iters must be a positive integer and first_batch an integer >= 0, got {self.iters!r} "
                             f"and {self.first_batch!r}")
        if self.iters > MAX_ITERS:
            raise ValueError(f"iters must be at most {MAX_ITERS:,} batches per comparison, got {self.iters:,} "
                             "(split a longer sweep with --first-batch)")
        if self.timeline_iteration is not None and not (_is_int(self.timeline_iteration)
                                                        and 0 <= self.timeline_iteration < self.iters):
            raise ValueError(f"timeline_iteration must be None or an iteration in 0..{self.iters - 1}, "
                             f"got {self.timeline_iteration!r}")
        if self.mode not in MODES:
            raise ValueError(f"unknown simulation mode {self.mode!r} (known: {', '.join(MODES)})")
        if not self.planners:
            raise ValueError("no planners given: name at least one, e.g. --planners static-best,nsp")
        if len(set(self.planners)) != len(self.planners):
            raise ValueError(f"planners must be a list without repeats, got {', '.join(self.planners)}")
        for name, options in self.planner_options.items():
            if name not in PLANNER_NAMES:
                raise ValueError(f"planner_options names {name!r}, which is not a registered planner "
                                 f"(known: {', '.join(PLANNER_NAMES)})")
            get_planner(name, **options)
        for label in self.planners:
            parse_planner_spec(label, self.mode, self.planner_options)

    def to_dict(self) -> dict[str, Any]:
        """Plain dict for JSON output."""
        return asdict(self)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True, kw_only=True)
class IterationRecord:
    """One planner on one batch."""

    planner: str
    iteration: int
    batch_index: int
    plan_hash: str
    step_time_s: float | None
    breakdown_s: dict[str, float]
    oom: bool
    oom_detail: str | None
    planning_time_s: float
    sim_wall_time_s: float
    events: int
    num_micro_batches: int
    recompute_policy: str
    routing: dict[str, dict[int, int]]
    load_over_lower_bound: float | None = None  # the routed plan's proxy Load / the batch's lower bound


@dataclass(frozen=True, kw_only=True)
class PlannerSummary:
    """Means over the iterations of one planner (``None`` when every iteration ran out of memory).

    ``mean_step_time_s`` and the breakdown average the iterations that fit in memory;
    ``normalized_to_static`` compares sums over the ``normalized_iterations`` batches on which both this
    planner and the baseline ran (``None`` when there are none)."""

    planner: str
    mean_step_time_s: float | None
    normalized_to_static: float | None
    speedup_vs_static: float | None
    normalized_iterations: int
    breakdown_share: dict[str, float]
    mean_breakdown_s: dict[str, float]
    mean_planning_time_s: float
    oom_count: int
    iterations: int
    sim_wall_time_s: float
    routing_share: dict[str, dict[int, float]]
    mean_load_over_lower_bound: float | None = None
    note: str = ""


@dataclass(frozen=True, kw_only=True)
class CompareResult:
    """A whole comparison: the resolved config, one summary per planner, every iteration record and,
    per planner, the simulated step (with timeline) of ``config.timeline_iteration``."""

    config: dict[str, Any]
    baseline: str
    summaries: tuple[PlannerSummary, ...]
    records: tuple[IterationRecord, ...]
    timelines: dict[str, StepResult]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: ``config`` and ``results`` (one object per planner), plus every iteration."""
        return {"config": self.config, "baseline": self.baseline,
                "results": [asdict(s) for s in self.summaries], "iterations": [asdict(r) for r in self.records]}


# ---- running -------------------------------------------------------------------------------------------
def run_compare(config: CompareConfig, progress: Progress | None = None) -> CompareResult:
    """Plan and simulate every planner on the same batches; see the module docstring."""
    workload = build_workload(config.workload)
    batches = [workload.sampler.batch(config.first_batch + i) for i in range(config.iters)]
    runner = _Runner(workload, batches, config, progress)
    runs: dict[str, tuple[list[IterationRecord], str]] = {}
    for label in sorted(config.planners, key=lambda p: p != "static-best"):  # a failing sweep fails first
        runs[label] = runner.run(parse_planner_spec(label, config.mode, config.planner_options))
    records = [r for label in config.planners for r in runs[label][0]]
    baseline = _baseline(config.planners)
    summaries = _summaries(config.planners, records, {p: note for p, (_, note) in runs.items()}, baseline)
    resolved = {**config.to_dict(), "workload": config.workload.to_dict(), "baseline": baseline,
                "static_best_degree": runner.best_degree, "token_budget": workload.token_budget,
                "spmax": workload.tree.spmax}
    return CompareResult(config=resolved, baseline=baseline, summaries=summaries, records=tuple(records),
                         timelines={p: runner.timelines[p] for p in config.planners if p in runner.timelines})


class _Runner:
    """Plans, prepares and simulates planner specs on a fixed list of batches.

    Each distinct (plan content, mode) is simulated once: issue-order candidates, the chosen plan and
    identical plans of different specs (``static`` and a ``static-best`` degree) share results.
    """

    def __init__(self, workload: Workload, batches: list[Batch], config: CompareConfig,
                 progress: Progress | None) -> None:
        self.workload, self.batches, self.config = workload, batches, config
        self.progress = progress
        self.total = self._total_steps()
        self.done = 0
        self.timelines: dict[str, StepResult] = {}
        self.best_degree: int | None = None
        self.simulators: dict[tuple[str, bool], Simulator] = {}
        self.results: dict[tuple[str, str], tuple[StepResult, bool]] = {}

    def _total_steps(self) -> int:
        sweeps = len(self.workload.tree.degrees) if "static-best" in self.config.planners else 0
        others = len(self.config.planners) - (1 if sweeps else 0)
        return (sweeps + others) * len(self.batches)

    def _tick(self, label: str) -> None:
        self.done += 1
        if self.progress is not None:
            self.progress(self.done, self.total, label)

    def simulator(self, mode: str, timeline: bool) -> Simulator:
        """A simulator for ``mode`` (cached; one per mode and timeline setting)."""
        key = (mode, timeline)
        if key not in self.simulators:
            self.simulators[key] = Simulator.for_workload(self.workload, SimOptions(mode=mode, timeline=timeline))
        return self.simulators[key]

    def simulate(self, plan: Plan, mode: str, timeline: bool) -> StepResult:
        """The simulated step of ``plan`` (memoised; a result with a timeline serves both kinds)."""
        key = (plan.content_hash, mode)
        cached = self.results.get(key)
        if cached is not None and (cached[1] or not timeline):
            return cached[0]
        result = self.simulator(mode, timeline).simulate(plan)
        self.results[key] = (result, timeline)
        return result

    def _drop_timelines(self, keep: tuple[str, str]) -> None:
        """Forget cached results that carry a timeline (tens of thousands of events each), except ``keep``:
        only the chosen plan's timeline is reported."""
        for key in [k for k, (_, has) in self.results.items() if has and k != keep]:
            del self.results[key]

    def run(self, spec: PlannerSpec) -> tuple[list[IterationRecord], str]:
        """Records of ``spec`` on every batch, and a note (how static-best chose its degree)."""
        if spec.label == "static-best":
            records, kept, note = self._static_best(spec)
        else:
            (records, kept), note = self._run_fixed(spec), ""
        if kept is not None:
            self.timelines[spec.label] = kept
        return records, note

    def _run_fixed(self, spec: PlannerSpec) -> tuple[list[IterationRecord], StepResult | None]:
        """Every batch planned and simulated, and the kept timeline iteration's result."""
        planner = get_planner(spec.planner, **spec.options)
        out, kept = [], None
        for i, batch in enumerate(self.batches):
            record, result = self._simulate(spec, i, batch, planner.plan(batch, self.workload))
            out.append(record)
            kept = result if self.config.timeline_iteration == i else kept
            self._tick(spec.label)
        return out, kept

    def _static_best(self, spec: PlannerSpec) -> tuple[list[IterationRecord], StepResult | None, str]:
        """The fastest fixed degree among those that run every batch (an out-of-memory batch means the
        degree cannot be the fixed degree of the run); ``ValueError`` when no degree does."""
        runs: dict[int, tuple[list[IterationRecord], StepResult | None]] = {}
        skipped = []
        for degree in self.workload.tree.degrees:
            ticks = self.done
            try:
                runs[degree] = self._run_fixed(replace(spec, options={"degree": degree}))
            except ValueError as exc:
                skipped.append(f"SP{degree}: {exc}")
                while self.done < ticks + len(self.batches):
                    self._tick(spec.label)
        oom = {d for d, (recs, _) in runs.items() if any(r.oom for r in recs)}
        means = {d: m for d, (recs, _) in runs.items() if d not in oom and (m := _mean_step(recs)) is not None}
        skipped += [f"SP{d}: {sum(r.oom for r in recs)} of {len(recs)} batches out of memory"
                    for d, (recs, _) in runs.items() if d in oom]
        if not means:
            raise ValueError("static-best: no fixed SP degree runs every batch; " + "; ".join(skipped))
        best = self.best_degree = min(means, key=lambda d: means[d])
        tried = ", ".join(f"SP{d} {m:.4f}s" for d, m in sorted(means.items()))
        dropped = "".join(f"; SP{d} out of memory" for d in sorted(oom))
        records, kept = runs[best]
        note = f"fastest fixed degree SP{best} ({tried}{dropped})"
        return [replace(r, planner=spec.label) for r in records], kept, note

    def _simulate(self, spec: PlannerSpec, i: int, batch: Batch, plan: Plan) -> tuple[IterationRecord, StepResult]:
        planning = float(plan.metadata.get("planning_time_s", 0.0))
        ratio = plan.metadata.get("load_over_lower_bound")
        timeline = self.config.timeline_iteration == i
        plan = prepare_plan(plan, memory=self.workload.memory, cost=self.workload.cost,
                            tree_recompute=spec.tree_recompute, optimize_order=spec.optimize_order,
                            evaluate=lambda p: self.simulate(p, spec.mode, timeline).step_time_or_inf)
        result = self.simulate(plan, spec.mode, timeline)
        if timeline:
            self._drop_timelines(keep=(plan.content_hash, spec.mode))
        record = IterationRecord(
            planner=spec.label, iteration=i, batch_index=batch.index, plan_hash=plan.content_hash,
            step_time_s=result.step_time_s, breakdown_s=dict(result.breakdown_s), oom=result.oom,
            oom_detail=result.oom_detail, planning_time_s=planning, sim_wall_time_s=result.sim_wall_time_s,
            events=result.events, num_micro_batches=plan.num_micro_batches,
            recompute_policy=result.recompute_policy, routing=routing_counts(plan),
            load_over_lower_bound=None if ratio is None else float(ratio),
        )
        return record, result


# ---- summaries -----------------------------------------------------------------------------------------
def routing_counts(plan: Plan) -> dict[str, dict[int, int]]:
    """Samples per SP degree in each length bucket (0-8K, 8-32K, 32-128K, 128K+)."""
    lengths, degrees, _, _ = plan.arrays
    out: dict[str, dict[int, int]] = {}
    low = 0
    for name, high in LENGTH_BUCKETS:
        mask = (lengths > low) & (lengths <= high if high is not None else True)
        values, counts = np.unique(degrees[mask], return_counts=True)
        out[name] = {int(v): int(c) for v, c in zip(values, counts)}
        low = high or 0
    return out


def _baseline(planners: Iterable[str]) -> str:
    labels = list(planners)
    return next((b for b in ("static-best", "static") if b in labels), labels[0])


def _mean_step(records: list[IterationRecord]) -> float | None:
    steps = [r.step_time_s for r in records if r.step_time_s is not None]
    return float(np.mean(steps)) if steps else None



def _summaries(planners: tuple[str, ...], records: list[IterationRecord], notes: dict[str, str],
               baseline: str) -> tuple[PlannerSummary, ...]:
    by_planner = {p: [r for r in records if r.planner == p] for p in planners}
    base = {r.iteration: r.step_time_s for r in by_planner[baseline] if r.step_time_s is not None}
    return tuple(_summary(p, by_planner[p], base, notes.get(p, "")) for p in planners)


def _normalised(records: list[IterationRecord], base: dict[int, float]) -> tuple[float | None, int]:
    """(sum of step times / the baseline's sum over the same iterations, how many), over the
    iterations where both ran (same batches, so the ratio of means is the ratio of sums)."""
    both = [(r.step_time_s, base[r.iteration]) for r in records if r.step_time_s is not None and r.iteration in base]
    if not both:
        return None, 0
    ours, theirs = (float(sum(col)) for col in zip(*both))
    return (ours / theirs if theirs > 0 else None), len(both)


def _summary(label: str, records: list[IterationRecord], base: dict[int, float], note: str) -> PlannerSummary:
    ok = [r for r in records if r.step_time_s is not None]
    mean = _mean_step(records)
    norm, compared = _normalised(records, base)
    breakdown = {k: float(np.mean([r.breakdown_s[k] for r in ok])) if ok else 0.0 for k in BREAKDOWN_CATEGORIES}
    return PlannerSummary(
        planner=label, mean_step_time_s=mean, normalized_to_static=norm,
        speedup_vs_static=1.0 / norm if norm else None, normalized_iterations=compared,
        breakdown_share={k: v / mean for k, v in breakdown.items()} if mean else {},
        mean_breakdown_s=breakdown, mean_planning_time_s=float(np.mean([r.planning_time_s for r in records])),
        oom_count=sum(r.oom for r in records), iterations=len(records),
        sim_wall_time_s=float(sum(r.sim_wall_time_s for r in records)), routing_share=_routing_share(records),
        mean_load_over_lower_bound=_mean_ratio(records), note=note,
    )


def _mean_ratio(records: list[IterationRecord]) -> float | None:
    """Mean Load / lower bound over the iterations whose plan reports a finite one (a planning figure:
    out-of-memory iterations count too)."""
    ratios = [r.load_over_lower_bound for r in records
              if r.load_over_lower_bound is not None and np.isfinite(r.load_over_lower_bound)]
    return float(np.mean(ratios)) if ratios else None


def _routing_share(records: list[IterationRecord]) -> dict[str, dict[int, float]]:
    """Share of samples per SP degree within each length bucket, over all iterations."""
    out: dict[str, dict[int, float]] = {}
    for name, _ in LENGTH_BUCKETS:
        totals: dict[int, int] = {}
        for r in records:
            for degree, count in r.routing.get(name, {}).items():
                totals[degree] = totals.get(degree, 0) + count
        n = sum(totals.values())
        out[name] = {d: c / n for d, c in sorted(totals.items(), reverse=True)} if n else {}
    return out
