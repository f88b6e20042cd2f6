"""What a comparison reports: one record per planner and batch, the per-planner summary and the whole
result, plus the routing histogram and the normalisation rule they use.

Normalisation is to the configured baseline when one is named (``CompareConfig.baseline``, e.g. ``static-paper``,
the paper's Static SP), else to ``static-best`` when it is compared, else to ``static-paper``, else to ``static``
(per-batch automatic degree), else to the first planner; every summary names it (``baseline``; records before it was
named called the ratio ``normalized_to_static`` whatever the baseline). ``normalized_to_baseline`` is the planner's
summed step time over the baseline's on the iterations where *both* ran in memory (the paper's Figure 7 form on the
same batches; ``normalized_iterations`` says how many), ``speedup_vs_baseline`` its inverse. Sums rather than a mean
of per-batch ratios: the batches are the same, so this is the ratio of mean step times, and a long batch weighs what
it costs. ``mean_step_time_s`` averages the iterations that fit; out-of-memory iterations are counted
(``oom_count``), never averaged. ``normalized_min``, ``normalized_median`` and ``normalized_max`` are the spread of
the per-batch ratios (step time over the baseline's on the same batch) over those same batches: how far one batch's
result can stray; ``speedup_min`` / ``_median`` / ``_max`` the same spread of the per-batch speedups (baseline's
step over this planner's). ``normalized_ci_low`` / ``_high`` is the :data:`INTERVAL` (a paired bootstrap over the
batches, fixed seed) of the ratio of sums, ``speedup_ci_low`` / ``_high`` its inverse: how far the headline could
move with other batches from the same trace. ``saved_share`` says, per breakdown category, what the planner saved
(positive) or paid (negative) against the baseline, as a share of the baseline's summed step time over the same
batches: the shares add up to ``1 - normalized_to_baseline``. :func:`widest_iteration` is the batch on which the
planners' step times differ most, the one whose timelines the report draws.

:class:`BatchDrops` says what ``max_context`` dropped from the compared batches (the same batches for
every planner); a share of the drawn tokens above :data:`DROPPED_WARN_SHARE` deserves a warning, since
the comparison then describes a different length distribution than the trace's.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from nspsim.compare.spread import INTERVAL, per_window, ratio_interval, spread
from nspsim.compare.windows import WindowRecord, window_summaries
from nspsim.plan import Plan
from nspsim.plan.estimates import Estimates
from nspsim.records import BREAKDOWN_CATEGORIES
from nspsim.simulator import StepResult
from nspsim.simulator.approximate import ApproxCheck
from nspsim.trace.batching import Batch
from nspsim.units import format_tokens

DROPPED_WARN_SHARE = 0.10
"""Share of the drawn tokens that ``max_context`` may drop before the CLI warns (README, "Concepts")."""

LENGTH_BUCKETS = (("0-8K", 8 * 1024), ("8-32K", 32 * 1024), ("32-128K", 128 * 1024), ("128K+", None))


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
    dropped_samples: int = 0  # samples of the batch dropped for exceeding max_context
    dropped_tokens: int = 0
    estimates: Estimates | None = None  # what the planner estimated (nspsim.plan.estimates), copied whole
    estimate_error: float | None = None  # the choosing rung's estimate / the simulated step - 1


@dataclass(frozen=True, kw_only=True)
class BatchDrops:
    """What ``max_context`` dropped from ``batches`` batches: samples and tokens kept and dropped.

    Built from the batches themselves (:meth:`of_batches`) or from a plan's metadata
    (:meth:`of_plan`, which planners fill from the batch)."""

    batches: int
    max_context: int
    kept_samples: int
    kept_tokens: int
    dropped_samples: int
    dropped_tokens: int

    def __post_init__(self) -> None:
        for key in ("batches", "max_context", "kept_samples", "kept_tokens"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"batch drops: {key} must be a positive integer, got {value!r}")
        for key in ("dropped_samples", "dropped_tokens"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"batch drops: {key} must be an integer >= 0, got {value!r}")

    @staticmethod
    def of_batches(batches: Sequence[Batch]) -> BatchDrops:
        """The drops of ``batches`` (at least one; they share one ``max_context``)."""
        if not batches:
            raise ValueError("batch drops of no batches")
        return BatchDrops(
            batches=len(batches),
            max_context=batches[0].max_context,
            kept_samples=sum(b.num_samples for b in batches),
            kept_tokens=sum(b.total_tokens for b in batches),
            dropped_samples=sum(b.dropped_samples for b in batches),
            dropped_tokens=sum(b.dropped_tokens for b in batches),
        )

    @staticmethod
    def combine(parts: Sequence[BatchDrops]) -> BatchDrops:
        """The drops of several runs together (at least one; the largest ``max_context`` is named)."""
        if not parts:
            raise ValueError("batch drops of no batches")
        return BatchDrops(
            batches=sum(p.batches for p in parts),
            max_context=max(p.max_context for p in parts),
            kept_samples=sum(p.kept_samples for p in parts),
            kept_tokens=sum(p.kept_tokens for p in parts),
            dropped_samples=sum(p.dropped_samples for p in parts),
            dropped_tokens=sum(p.dropped_tokens for p in parts),
        )

    @staticmethod
    def of_plan(plan: Plan) -> BatchDrops | None:
        """The drops recorded in ``plan``'s metadata (``None`` for a plan written before they were)."""
        samples, tokens = plan.metadata.get("dropped_samples"), plan.metadata.get("dropped_tokens")
        if not isinstance(samples, int) or not isinstance(tokens, int):
            return None
        return BatchDrops(
            batches=1,
            max_context=plan.batch.max_context,
            kept_samples=plan.num_samples,
            kept_tokens=int(sum(plan.lengths)),
            dropped_samples=samples,
            dropped_tokens=tokens,
        )

    @property
    def dropped_token_share(self) -> float:
        """Dropped tokens over all drawn tokens (kept plus dropped)."""
        return self.dropped_tokens / (self.kept_tokens + self.dropped_tokens)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, with the share."""
        return {**asdict(self), "dropped_token_share": self.dropped_token_share}

    def fields(self) -> dict[str, Any]:
        """``dropped_samples``, ``dropped_tokens`` and ``dropped_token_share``: what JSON outputs add."""
        return {k: v for k, v in self.to_dict().items() if k.startswith("dropped_")}

    def describe(self) -> str:
        """One phrase: how many samples and tokens were dropped, over which limit."""
        limit = format_tokens(self.max_context)
        if not self.dropped_samples:
            return f"no sample longer than max_context {limit}"
        return (
            f"{self.dropped_samples} sample(s) longer than max_context {limit} "
            f"({format_tokens(self.dropped_tokens)} tokens, {self.dropped_token_share:.1%} of the drawn tokens)"
        )

    def warning(self, threshold: float = DROPPED_WARN_SHARE) -> str | None:
        """A warning when the dropped share of the drawn tokens exceeds ``threshold``, else ``None``."""
        if self.dropped_token_share <= threshold:
            return None
        return (
            f"--max-context dropped {self.describe()}, over the {threshold:.0%} warning threshold: the batches "
            "no longer follow the trace's length distribution; raise --max-context or use a trace of shorter samples"
        )


@dataclass(frozen=True, kw_only=True)
class PlannerSummary:
    """Means over the iterations of one planner (``None`` when every iteration ran out of memory).

    ``mean_step_time_s`` and the breakdown average the iterations that fit in memory;
    ``normalized_to_baseline`` compares sums over the ``normalized_iterations`` batches on which both
    this planner and ``baseline`` ran (``None`` when there are none); the spread, interval and
    ``saved_share`` use the same batches (module docstring)."""

    planner: str
    baseline: str
    mean_step_time_s: float | None
    normalized_to_baseline: float | None
    speedup_vs_baseline: float | None
    normalized_iterations: int
    breakdown_share: dict[str, float]
    mean_breakdown_s: dict[str, float]
    mean_planning_time_s: float
    oom_count: int
    iterations: int
    sim_wall_time_s: float
    routing_share: dict[str, dict[int, float]]
    mean_load_over_lower_bound: float | None = None
    mean_estimate_error: float | None = None  # mean of the plans' chosen estimate / simulated step - 1
    note: str = ""
    normalized_min: float | None = None  # spread of the per-batch step time / baseline's on those batches
    normalized_median: float | None = None
    normalized_max: float | None = None
    normalized_ci_low: float | None = None  # INTERVAL of normalized_to_baseline (None below 2 batches)
    normalized_ci_high: float | None = None
    speedup_min: float | None = None  # spread of the per-batch speedup (baseline's step / this planner's)
    speedup_median: float | None = None
    speedup_max: float | None = None
    speedup_ci_low: float | None = None  # 1 / normalized_ci_high
    speedup_ci_high: float | None = None
    saved_share: dict[str, float] = field(default_factory=dict)  # per category, share of the baseline's step

    def speedup_spread(self) -> tuple[str, str, str]:
        """(per-batch median, per-batch min-max, interval) of the speedup as text (``-`` each without
        a common batch with the baseline, ``-`` for the interval below two batches): what the text
        table and the report print beside the headline."""
        median, low, high = self.speedup_median, self.speedup_min, self.speedup_max
        if median is None or low is None or high is None:
            return "-", "-", "-"
        ci_low, ci_high = self.speedup_ci_low, self.speedup_ci_high
        interval = "-" if ci_low is None or ci_high is None else f"{ci_low:.2f}-{ci_high:.2f}x"
        return f"{median:.2f}x", f"{low:.2f}-{high:.2f}x", interval


@dataclass(frozen=True, kw_only=True)
class CompareResult:
    """A whole comparison: the resolved config, one summary per planner, every iteration record and,
    per planner, the simulated step (with timeline) of iteration ``timeline_iteration`` (the config's,
    or the :func:`widest_iteration` when it asks for ``"widest"``)."""

    config: dict[str, Any]
    baseline: str
    summaries: tuple[PlannerSummary, ...]
    records: tuple[IterationRecord, ...]
    timelines: dict[str, StepResult]
    drops: BatchDrops | None = None
    static_best_ineligible: dict[int, str] = field(default_factory=dict)  # degree -> why it could not be chosen
    static_paper_ineligible: dict[int, str] = field(default_factory=dict)  # the same for static-paper
    batches: tuple[Batch, ...] = ()  # the compared batches, in iteration order (not in to_dict: the records name them)
    timeline_iteration: int | None = None  # the iteration whose timelines ``timelines`` holds
    windows: tuple[WindowRecord, ...] = ()  # per planner and window, with windows (RunSpec.window > 1)
    approximation: ApproxCheck | None = None  # an approximate run's error on one step simulated exactly too

    @property
    def winner(self) -> PlannerSummary | None:
        """The planner other than the baseline with the least normalised step time (``None`` when no
        other planner shares a batch with the baseline)."""
        others = [s for s in self.summaries if s.planner != self.baseline and s.normalized_to_baseline is not None]
        return min(others, key=lambda s: s.normalized_to_baseline or 0.0) if others else None

    @property
    def all_out_of_memory(self) -> bool:
        """Whether every planner ran out of memory on every batch (there is no step time to compare)."""
        return all(s.oom_count == s.iterations for s in self.summaries)

    @property
    def no_result(self) -> str | None:
        """Why there is nothing to compare, with what to change (every planner ran out of memory on
        every batch); ``None`` when some step ran."""
        if not self.all_out_of_memory:
            return None
        override = self.config.get("workload", {}).get("token_budget")
        fits = self.config.get("memory_token_budget")
        if override is not None and fits is not None and override > fits:
            fix = f"lower --token-budget {override:,} to at most the memory model's B_tok={fits:,}, or leave it out"
        else:
            fix = "lower --tokens-per-batch, or use more GPUs or a cluster preset with more memory per GPU"
        return f"every planner ran out of memory on every batch, so there is no step time to compare; {fix}"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: ``config`` and ``results`` (one object per planner), every iteration, what
        ``max_context`` dropped from the batches, why static-best passed over degrees, and whether
        every planner ran out of memory everywhere."""
        data = {
            "config": self.config,
            "baseline": self.baseline,
            "interval": INTERVAL,
            "timeline_iteration": self.timeline_iteration,
            "results": [asdict(s) for s in self.summaries],
            "iterations": [asdict(r) for r in self.records],
            "batches": None if self.drops is None else self.drops.to_dict(),
            "static_best_ineligible": {str(d): why for d, why in sorted(self.static_best_ineligible.items())},
            "static_paper_ineligible": {str(d): why for d, why in sorted(self.static_paper_ineligible.items())},
            "all_out_of_memory": self.all_out_of_memory,
            "no_result": self.no_result,
        } | (self._windows_dict() if self.windows else {})  # without windows the document is as it was
        return data | ({"approximation": self.approximation.to_dict()} if self.approximation is not None else {})

    def _windows_dict(self) -> dict[str, Any]:
        planners = list(dict.fromkeys(w.planner for w in self.windows))
        return {
            "windows": [asdict(w) for w in self.windows],
            "window_results": window_summaries(planners, self.windows),
        }


def plan_drop_fields(plan: Plan) -> dict[str, Any]:
    """:meth:`BatchDrops.fields` of a plan's batch (empty for a plan written before planners recorded them)."""
    drops = BatchDrops.of_plan(plan)
    return {} if drops is None else drops.fields()


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


BASELINE_ORDER = ("static-best", "static-paper", "static")
"""The labels normalised to when no baseline is named, the first compared one winning."""


def baseline_of(planners: Iterable[str], preferred: str | None = None) -> str:
    """The label everything is normalised to: ``preferred`` when given (it must be compared), else
    the first of :data:`BASELINE_ORDER` compared, else the first planner (module docstring)."""
    labels = list(planners)
    if preferred is not None:
        if preferred not in labels:
            raise ValueError(f"baseline {preferred!r} is not one of the compared planners ({', '.join(labels)})")
        return preferred
    return next((b for b in BASELINE_ORDER if b in labels), labels[0])


def mean_step_time(records: list[IterationRecord]) -> float | None:
    """Mean step time of the records that fit in memory (``None`` if none does)."""
    steps = [r.step_time_s for r in records if r.step_time_s is not None]
    return float(np.mean(steps)) if steps else None


def summarise(
    planners: tuple[str, ...], records: list[IterationRecord], notes: dict[str, str], baseline: str, window: int = 1
) -> tuple[PlannerSummary, ...]:
    """One summary per planner label, in ``planners`` order, normalised to ``baseline``; with ``window``
    > 1 the spread and interval are over windows (:func:`nspsim.compare.spread.per_window`)."""
    by_planner = {p: [r for r in records if r.planner == p] for p in planners}
    base = {r.iteration: r for r in by_planner[baseline] if r.step_time_s is not None}
    return tuple(_summary(p, by_planner[p], base, notes.get(p, ""), baseline, window) for p in planners)


def _paired(records: list[IterationRecord], base: dict[int, IterationRecord]) -> list[tuple[IterationRecord, float]]:
    """(record, the baseline's step time) on the iterations where both ran (a positive baseline step)."""
    out = []
    for r in records:
        theirs = base[r.iteration].step_time_s if r.iteration in base else None
        if r.step_time_s is not None and theirs is not None and theirs > 0:
            out.append((r, theirs))
    return out


def _summary(
    label: str, records: list[IterationRecord], base: dict[int, IterationRecord], note: str, baseline: str, window: int
) -> PlannerSummary:
    ok = [r for r in records if r.step_time_s is not None]
    mean = mean_step_time(records)
    both = _paired(records, base)
    ours = np.array([r.step_time_s for r, _ in both], dtype=float)
    theirs = np.array([t for _, t in both], dtype=float)
    norm = float(ours.sum() / theirs.sum()) if both else None
    ours, theirs = per_window(np.array([r.iteration for r, _ in both], dtype=np.int64), ours, theirs, window)
    ratios = ours / theirs
    ci = ratio_interval(ours, theirs)
    breakdown = {k: float(np.mean([r.breakdown_s[k] for r in ok])) if ok else 0.0 for k in BREAKDOWN_CATEGORIES}
    return PlannerSummary(
        planner=label,
        baseline=baseline,
        mean_step_time_s=mean,
        normalized_to_baseline=norm,
        speedup_vs_baseline=1.0 / norm if norm else None,
        normalized_iterations=len(both),
        breakdown_share={k: v / mean for k, v in breakdown.items()} if mean else {},
        mean_breakdown_s=breakdown,
        mean_planning_time_s=float(np.mean([r.planning_time_s for r in records])),
        oom_count=sum(r.oom for r in records),
        iterations=len(records),
        sim_wall_time_s=float(sum(r.sim_wall_time_s for r in records)),
        routing_share=_routing_share(records),
        mean_load_over_lower_bound=_mean_ratio(records),
        mean_estimate_error=_mean_estimate_error(records),
        note=note,
        **spread("normalized", ratios),
        normalized_ci_low=None if ci is None else ci[0],
        normalized_ci_high=None if ci is None else ci[1],
        **spread("speedup", 1.0 / ratios if ratios.size and ratios.min() > 0 else np.array([])),
        speedup_ci_low=None if ci is None or ci[1] <= 0 else 1.0 / ci[1],
        speedup_ci_high=None if ci is None or ci[0] <= 0 else 1.0 / ci[0],
        saved_share=_saved_share(both, base),
    )


def _saved_share(both: list[tuple[IterationRecord, float]], base: dict[int, IterationRecord]) -> dict[str, float]:
    """Per category, the baseline's summed seconds minus this planner's over the batches both ran, over
    the baseline's summed step time (module docstring)."""
    total = sum(t for _, t in both)
    if not both or total <= 0:
        return {}
    return {
        k: sum(base[r.iteration].breakdown_s[k] - r.breakdown_s[k] for r, _ in both) / total
        for k in BREAKDOWN_CATEGORIES
    }


def widest_iteration(records: Iterable[IterationRecord]) -> int | None:
    """The iteration on which the planners' step times differ most (the largest ratio of the slowest
    to the fastest, over the planners that fit in memory there; the earliest on a tie), or ``None``
    when no iteration has two planners' step times."""
    steps: dict[int, list[float]] = {}
    for r in records:
        if r.step_time_s is not None and r.step_time_s > 0:
            steps.setdefault(r.iteration, []).append(r.step_time_s)
    spreads = {i: max(v) / min(v) for i, v in steps.items() if len(v) > 1}
    return min(spreads, key=lambda i: (-spreads[i], i)) if spreads else None


def _mean_estimate_error(records: list[IterationRecord]) -> float | None:
    """Mean of chosen estimate / simulated step - 1 over the iterations that have both (how far the
    rung that chose the plans was from the simulator; out-of-memory steps have no error)."""
    errors = [r.estimate_error for r in records if r.estimate_error is not None and np.isfinite(r.estimate_error)]
    return float(np.mean(errors)) if errors else None


def _mean_ratio(records: list[IterationRecord]) -> float | None:
    """Mean Load / lower bound over the iterations whose plan reports a finite one (a planning figure:
    out-of-memory iterations count too)."""
    ratios = [
        r.load_over_lower_bound
        for r in records
        if r.load_over_lower_bound is not None and np.isfinite(r.load_over_lower_bound)
    ]
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
