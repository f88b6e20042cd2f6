"""What a comparison runs: planner specs (label -> planner, options, preparation, mode) and the
validated :class:`CompareConfig`.

A label is one of

* a registered planner name (``static``, ``flexsp``, ``basp``, ``nsp2l``, ``nsp``, ``greedy``, ...);
* ``static-<d>``: Static SP with the fixed degree d;
* ``static-best``: the fastest *fixed* degree over the whole run, samples packed by cost-model load
  (the sweep is :mod:`nspsim.compare.runner`'s): the stronger, load-balanced Static SP;
* ``static-paper``: the paper's Static SP, the same sweep with the FlexSP artifact's token packing
  (``packing="tokens"``, :mod:`nspsim.planners.static.token_packing`). The paper "sweep[s] SP degrees that
  fit in memory and select[s] the fastest configuration" (section 6.1), so the degree is chosen as
  static-best's is;
* an NSP ablation (paper section 6.4): ``nsp-no-recompute`` (no tree-level marks: full recomputation
  when memory forces it), ``nsp-no-overlap`` (phase streaming off), ``nsp-greedy`` (the ``greedy``
  planner, "w/o router"), ``nsp-attn-fwd`` (``proxy="attn-fwd"``, "w/o cost model");
* a named variant of a baseline: ``flexsp-artifact`` (``flexsp`` with ``variant="artifact"``: FlexSP
  as its artifact runs it, beside nspsim's default ``flexsp``);

optionally followed by ``:key=value+key=value`` planner options. How a spec's plans are prepared
(tree-level recompute marks, optimised issue order) is the comparison's ``prepare`` choice, by default
what its planner declares (:func:`nspsim.execution.prepare.resolve_preparation`), which an ablation
then overrides (``nsp-no-recompute`` drops the marks); a spec resolves it once, so the run loop never
asks by name. Everything is validated when a spec or a
:class:`CompareConfig` is built, before anything runs: a bad label or option costs nothing.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any

from nspsim.execution.prepare import AS_PLANNED, Preparation, check_prepare, resolve_preparation
from nspsim.options import parse_options
from nspsim.plan.window import MAX_WINDOW
from nspsim.planners import HEADLINE_PLANNERS, PLANNER_NAMES, declared_preparation, get_planner, planner_summary
from nspsim.simulator import SimOptions
from nspsim.simulator.modes import MODES, SimMode
from nspsim.workload import WorkloadConfig

DEFAULT_ITERS = 8  # the demo's headline moved 1.08x -> 1.26x from 3 to 5 batches; 8 fit 2 min on 2 cores
MAX_ITERS = 100_000  # batches are drawn up front; 10**9 would look like a hang while memory filled
# Seconds per MILP solve (the artifact's); a safety net: FlexSP's deterministic work limit stops first.
DEFAULT_FLEXSP_TIME_LIMIT_S = 10.0
MAIN_PLANNERS = HEADLINE_PLANNERS  # the planners that declare themselves headline strategies
# Labels that sweep every fixed degree over the run and keep the fastest: label -> static options.
SWEPT_STATIC: dict[str, dict[str, Any]] = {"static-best": {}, "static-paper": {"packing": "tokens"}}
SWEPT_STATIC_DEFINES = ("packing", "degree")  # static options a swept label fixes itself
ABLATIONS: dict[str, tuple[str, dict[str, Any], dict[str, Any]]] = {
    # label: (planner, planner options, overrides of the planner's preparation and the mode)
    "nsp-no-recompute": ("nsp", {}, {"tree_recompute": False}),  # applied to the resolved preparation
    "nsp-no-overlap": ("nsp", {}, {"mode": SimMode.NO_STREAM}),
    "nsp-greedy": ("greedy", {}, {}),
    "nsp-attn-fwd": ("nsp", {"proxy": "attn-fwd"}, {}),
}
VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    # label: (planner, the options that make the variant)
    "flexsp-artifact": ("flexsp", {"variant": "artifact"}),
}


def default_planners() -> tuple[str, ...]:
    """``static-best`` plus every headline planner (a class fact: ``Planner.headline``)."""
    return ("static-best", *MAIN_PLANNERS)


@dataclass(frozen=True, kw_only=True)
class PlannerSpec:
    """How to plan and execute one compared strategy (``preparation`` is resolved, see the module
    docstring)."""

    label: str
    planner: str
    options: dict[str, Any] = field(default_factory=dict)
    preparation: Preparation = AS_PLANNED
    mode: str = SimMode.STREAM

    def __post_init__(self) -> None:
        if not self.label:
            raise ValueError("a planner spec needs a label")
        if self.mode not in MODES:
            raise ValueError(f"planner spec {self.label!r}: unknown mode {self.mode!r} (known: {', '.join(MODES)})")
        if self.planner not in PLANNER_NAMES:
            raise ValueError(
                f"planner spec {self.label!r}: planner {self.planner!r} is not registered "
                f"(known: {', '.join(PLANNER_NAMES)})"
            )
        get_planner(self.planner, **self.options)  # unknown or invalid options fail here, before anything runs


def parse_planner_spec(
    label: str,
    mode: str = SimMode.STREAM,
    defaults: dict[str, dict[str, Any]] | None = None,
    prepare: str = "planner",
) -> PlannerSpec:
    """The :class:`PlannerSpec` of a label (see the module docstring); ``ValueError`` if unknown.

    ``name:key=value+key=value`` passes options to the planner (``flexsp:time_limit=10``); ``defaults``
    gives per-planner options used when the label does not set them; ``prepare`` is the preparation
    choice (:data:`~nspsim.execution.prepare.PREPARE_CHOICES`, default: the planner's declaration).
    """
    name, _, text = label.partition(":")
    if name in SWEPT_STATIC and text:
        raise ValueError(f"planner spec {label!r}: {name} sweeps the degree and takes no options")
    spec = _base_spec(name, mode, prepare)
    base = dict((defaults or {}).get(spec.planner, {}))
    if name in SWEPT_STATIC:  # the label defines its packing and sweeps the degree: defaults cannot change them
        base = {k: v for k, v in base.items() if k not in SWEPT_STATIC_DEFINES}
    given = _parse_options(label, text)
    fixed = sorted(set(given) & set(VARIANTS.get(name, ("", {}))[1]))
    if fixed:
        raise ValueError(
            f"planner spec {label!r}: {name} defines {', '.join(fixed)} itself; use {spec.planner} to set it"
        )
    options = {**base, **spec.options, **given}
    return replace(spec, label=label, options=options)


def _parse_options(label: str, text: str) -> dict[str, Any]:
    try:
        return parse_options(filter(None, text.split("+")))
    except ValueError as exc:
        raise ValueError(f"planner spec {label!r}: {exc} (options look like name:key=value+key=value)") from None


def _base_spec(label: str, mode: str, prepare: str) -> PlannerSpec:
    if label in ABLATIONS:
        planner, options, overrides = ABLATIONS[label]
        _check_registered(planner, label)
        spec = _declared_spec(label, planner, options, mode, prepare)
        steps = {k: v for k, v in overrides.items() if k in ("tree_recompute", "optimize_order")}
        rest = {k: v for k, v in overrides.items() if k not in steps}
        return replace(spec, preparation=replace(spec.preparation, **steps), **rest)
    if label in VARIANTS:
        planner, options = VARIANTS[label]
        _check_registered(planner, label)
        return _declared_spec(label, planner, dict(options), mode, prepare)
    if label in SWEPT_STATIC:
        return _declared_spec(label, "static", dict(SWEPT_STATIC[label]), mode, prepare)
    if label.startswith("static-"):
        degree = label.removeprefix("static-")
        if not degree.isdigit():
            raise ValueError(
                f"planner spec {label!r}: expected static-<degree>, e.g. static-8, static-best or static-paper"
            )
        return _declared_spec(label, "static", {"degree": int(degree)}, mode, prepare)
    _check_registered(label, label)
    return _declared_spec(label, label, {}, mode, prepare)


def _declared_spec(label: str, planner: str, options: dict[str, Any], mode: str, prepare: str) -> PlannerSpec:
    """A spec prepared as ``prepare`` says, by default as ``planner`` declares (a class attribute)."""
    preparation = resolve_preparation(prepare, declared_preparation(planner))
    return PlannerSpec(label=label, planner=planner, options=options, preparation=preparation, mode=mode)


SWEPT_MEANING = {
    "static-best": "Static SP at the one fixed degree with the least mean step time over all compared batches "
    "(every fixed degree tried), samples packed by cost-model load: the strongest fixed-degree Static SP",
    "static-paper": "the paper's Static SP: the same sweep of fixed degrees, samples packed by token count as "
    "the FlexSP artifact's baseline does (the paper's Figure 7 normalises to it)",
}
ABLATION_MEANING = {
    "nsp-no-recompute": "NSP without tree-level recompute marks (full recomputation where memory forces it)",
    "nsp-no-overlap": "NSP with phase streaming off (no communication hidden under compute)",
    "nsp-greedy": "NSP's greedy routing, the paper's 'w/o router' ablation",
    "nsp-attn-fwd": "NSP routing by attention-forward cost only, the paper's 'w/o cost model' ablation",
}


def describe_label(label: str) -> str:
    """What a compare label means, one line (the reports' legend): the swept Static SP labels, a fixed
    degree (``static-<d>`` or ``static:degree=K``), ``static`` (its degree chosen per batch), an
    ablation, a variant or a registered planner's card title, then any options it sets."""
    name, _, text = label.partition(":")
    options = _parse_options(label, text) if text else {}
    if name in SWEPT_MEANING:
        return SWEPT_MEANING[name]
    if name in ABLATION_MEANING:
        meaning = ABLATION_MEANING[name]
    elif name in VARIANTS:
        planner, fixed = VARIANTS[name]
        meaning = f"{planner_summary(planner)}, with {_options_text(fixed)}"
    elif name.startswith("static-") and name.removeprefix("static-").isdigit():
        options = {"degree": int(name.removeprefix("static-")), **options}
        meaning = "Static SP"
    elif name == "static":
        meaning = "Static SP"
    else:
        return planner_summary(name) + (f"; options {_options_text(options)}" if options else "")
    if name == "static" or name.startswith("static-"):
        degree = options.pop("degree", "auto")
        packing = options.pop("packing", "load")
        meaning += (
            ", its degree chosen per batch (the least step estimate), so it may change from batch to batch"
            if degree == "auto"
            else f" at the fixed degree {degree} on every batch"
        )
        meaning += ", samples packed by cost-model load" if packing == "load" else f", samples packed by {packing}"
    return meaning + (f"; options {_options_text(options)}" if options else "")


def _options_text(options: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in options.items())


def _check_registered(planner: str, label: str) -> None:
    if planner not in PLANNER_NAMES:
        known = ", ".join([*PLANNER_NAMES, *SWEPT_STATIC, "static-<d>", *ABLATIONS, *VARIANTS])
        raise ValueError(f"planner {label!r} is not available (known: {known})")


@dataclass(frozen=True, kw_only=True)
class RunSpec:
    """What a comparison runs on its workload: the one definition ``nspsim compare``, every point of a
    sweep (``[run]``) and the studies share (:class:`CompareConfig` nests it)."""

    planners: tuple[str, ...] = field(default_factory=default_planners)
    planner_options: dict[str, dict[str, Any]] = field(
        default_factory=lambda: {"flexsp": {"time_limit": DEFAULT_FLEXSP_TIME_LIMIT_S}}
    )
    iters: int = DEFAULT_ITERS
    first_batch: int = 0
    mode: str = SimMode.STREAM
    baseline: str | None = None  # the label to normalise to; None: compare's rule (summary.baseline_of)
    prepare: str = "planner"  # nspsim.execution.prepare.PREPARE_CHOICES; "planner": each planner's declaration
    window: int = 1  # batches per optimizer step, planned as one window (nspsim.compare.windows); 1: per step
    approx_layers: int = 0  # simulated layers of an approximate simulation (SimOptions.approx_layers); 0: exact

    def __post_init__(self) -> None:
        if not _is_int(self.window) or not 1 <= self.window <= MAX_WINDOW:
            raise ValueError(
                f"window must be an integer in [1, {MAX_WINDOW}] batches per optimizer step, got {self.window!r}"
            )
        if not _is_int(self.iters) or self.iters <= 0 or not _is_int(self.first_batch) or self.first_batch < 0:
            raise ValueError(
                f"iters must be a positive integer and first_batch an integer >= 0, got {self.iters!r} "
                f"and {self.first_batch!r}"
            )
        if self.iters > MAX_ITERS:
            raise ValueError(
                f"iters must be at most {MAX_ITERS:,} batches per comparison, got {self.iters:,} "
                "(split a longer sweep with --first-batch)"
            )
        if self.iters % self.window:
            raise ValueError(
                f"iters ({self.iters}) must be a multiple of window ({self.window}): a window is {self.window} "
                f"consecutive batches, e.g. --iters {self.window * max(1, round(self.iters / self.window))}"
            )
        if self.mode not in MODES:
            raise ValueError(f"unknown simulation mode {self.mode!r} (known: {', '.join(MODES)})")
        SimOptions(approx_layers=self.approx_layers)  # its ValueError says what is accepted
        if not self.planners:
            raise ValueError("no planners given: name at least one, e.g. --planners static-best,nsp")
        if len(set(self.planners)) != len(self.planners):
            raise ValueError(f"planners must be a list without repeats, got {', '.join(self.planners)}")
        for name, options in self.planner_options.items():
            if name not in PLANNER_NAMES:
                raise ValueError(
                    f"planner_options names {name!r}, which is not a registered planner "
                    f"(known: {', '.join(PLANNER_NAMES)})"
                )
            get_planner(name, **options)
        check_prepare(self.prepare)
        self.specs()
        if self.baseline is not None and self.baseline not in self.planners:
            raise ValueError(
                f"baseline {self.baseline!r} is not one of the compared planners ({', '.join(self.planners)}): "
                "add it to the planners or leave the baseline out"
            )

    def specs(self) -> dict[str, PlannerSpec]:
        """label -> :class:`PlannerSpec` of every compared planner, in order."""
        return {
            label: parse_planner_spec(label, self.mode, self.planner_options, self.prepare) for label in self.planners
        }


WIDEST = "widest"
"""``CompareConfig.timeline_iteration`` asking for the batch on which the planners differ most
(:func:`nspsim.compare.summary.widest_iteration`)."""


@dataclass(frozen=True, kw_only=True)
class CompareConfig:
    """Everything that identifies a comparison (plain values; what the CLI writes beside results): the
    workload, what runs on it, and which iteration records a timeline (an iteration, :data:`WIDEST`
    or ``None`` for none)."""

    workload: WorkloadConfig = field(default_factory=WorkloadConfig)
    run: RunSpec = field(default_factory=RunSpec)
    timeline_iteration: int | str | None = WIDEST

    def __post_init__(self) -> None:
        value = self.timeline_iteration
        if value is not None and value != WIDEST and not (_is_int(value) and 0 <= int(value) < self.run.iters):
            raise ValueError(
                f"timeline_iteration must be None, {WIDEST!r} or an iteration in 0..{self.run.iters - 1}, got {value!r}"
            )
        if value is not None and self.run.approx_layers:
            raise ValueError(
                "an approximate simulation (approx_layers, --approx-layers) keeps no timeline, which the report (-o) "
                "draws: drop one of them"
            )

    def to_dict(self) -> dict[str, Any]:
        """Plain dict for JSON output (``run.approx_layers`` only when on: exact runs' documents are as they were)."""
        data = asdict(self)
        if not self.run.approx_layers:
            del data["run"]["approx_layers"]
        return data


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
