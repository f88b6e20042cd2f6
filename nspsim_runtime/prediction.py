"""The simulator's prediction of a step *as the runtime executes it* (pure; no torch).

A measured record is only comparable with a prediction of the same configuration, so the runtime's
options are mapped onto the simulator's before simulating:

* recomputation: ``--recompute all|none`` forces per-sample marks, so the executed plan *is*
  ``replace(plan, recompute=marks)`` (:func:`executed_plan`); it is that plan which is hashed,
  broadcast, written to ``<records>.plans.jsonl`` and simulated. ``--recompute plan`` leaves the plan
  unchanged and the executor takes the simulator's own decision
  (:func:`nspsim.execution.activation.plan_activations`), so both always use the same marks, and the
  record's ``recompute_policy`` is the simulator's label (:func:`recompute_policy`);
* phase streaming (:func:`simulated_mode`): ``--lookahead all`` (every prologue first) is the
  simulator's ``stream`` mode; ``--lookahead 0`` (each node's prologue, compute and epilogue in turn:
  no overlap between a rank's SP phases) is ``no-stream``; a lookahead of
  ``k >= m - 1`` for the longest issue order of ``m`` nodes is the same schedule as ``all``; any
  other bounded lookahead has no simulator counterpart;
* gradient sync: the simulator models FSDP; ``--grad-sync allreduce`` on more than one rank (one
  all-reduce after the last backward) has no counterpart, nor has ``--accumulate-sync window`` (FSDP2
  reduce-scatters once per accumulation window; the simulator reduce-scatters every pass);
* accumulation windows (``--accumulate W``): every pass is simulated as a step, and every pass but
  the window's last without the optimizer step (``Simulator.simulate(plan, optimizer_step=False)``).

A configuration without a counterpart gets no prediction (``step_time_s`` null) and a note saying
why, rather than a number that describes something else. Trade-off: fewer predicted runs, but every
prediction in a record is of the step that ran.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

from nspsim.execution.activation import RecomputePolicy, plan_activations
from nspsim.execution.recompute import RECOMPUTE_CHOICES, RecomputeMode
from nspsim.plan import Plan
from nspsim.simulator import StepResult
from nspsim.simulator.modes import SimMode
from nspsim.specs.memory import MemoryModel


def executed_plan(plan: Plan, recompute: str) -> Plan:
    """``plan`` with the marks ``--recompute`` forces (``all``: every sample, ``none``: no sample)."""
    if recompute not in RECOMPUTE_CHOICES:
        raise ValueError(f"recompute must be one of {', '.join(RECOMPUTE_CHOICES)}, got {recompute!r}")
    if recompute == RecomputeMode.PLAN:
        return plan
    return replace(plan, recompute=(recompute == RecomputeMode.ALL,) * plan.num_samples)


def simulated_mode(
    plan: Plan, *, lookahead: int | None, grad_sync: str, world: int, accumulate_sync: str = "pass"
) -> tuple[SimMode | None, str]:
    """``(mode, note)``: the simulator mode that matches the executed options, or ``None`` and why."""
    if grad_sync == "allreduce" and world > 1:
        return None, "not simulated: --grad-sync allreduce has no simulator counterpart (it models FSDP)"
    if accumulate_sync == "window" and world > 1:
        return None, (
            "not simulated: --accumulate-sync window has no simulator counterpart "
            "(it reduce-scatters every pass, as FSDP2 does by default)"
        )
    if lookahead == 0:
        return SimMode.NO_STREAM, ""
    longest = max((len(order) for order in plan.issue_order), default=0)
    if lookahead is None or lookahead >= longest - 1:
        return SimMode.STREAM, ""
    return None, (
        f"not simulated: --lookahead {lookahead} (a bounded prologue window) has no simulator "
        "counterpart (stream = all, no-stream = 0)"
    )


def recompute_policy(plan: Plan, memory: MemoryModel) -> tuple[RecomputePolicy, float]:
    """The simulator's recompute policy label and recomputed-sample share of ``plan``."""
    act = plan_activations(plan, memory)
    return act.policy, act.remat_fraction


@dataclass(frozen=True, kw_only=True)
class Prediction:
    """A simulated step of the executed configuration, or why there is none (``note``)."""

    mode: SimMode | None
    step_time_s: float | None = None
    breakdown_s: dict[str, float] = field(default_factory=dict)
    note: str = ""

    def __post_init__(self) -> None:
        if (self.step_time_s is None) == (not self.note):
            raise ValueError("a prediction has a step time or a note saying why it has none, not both")


def predict(plan: Plan, mode: SimMode | None, note: str, simulate: Callable[[Plan, SimMode], StepResult]) -> Prediction:
    """Simulate ``plan`` in ``mode`` (``None``: record ``note`` instead); an out-of-memory result is
    recorded as a note too (the runtime runs it anyway; the simulator's memory model says it would
    not fit)."""
    if mode is None:
        return Prediction(mode=None, note=note)
    result = simulate(plan, mode)
    if result.step_time_s is None:
        return Prediction(mode=mode, note=f"simulated out of memory: {result.oom_detail}")
    return Prediction(mode=mode, step_time_s=result.step_time_s, breakdown_s=dict(result.breakdown_s))
