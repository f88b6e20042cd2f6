"""Approximate layer extrapolation, opt-in (``SimOptions.approx_layers`` = K): simulate K decoder layers
and extend each pass by the L - K missing ones at the pace measured on the simulated ones.

Algorithm. The step is built and run with K layers instead of L. A unit's time accounts (kernels,
charged gaps and waits, :meth:`~nspsim.simulator.engine.Executor.accounts`) partition its timeline
by segment, so one layer's accounts sum to the time the unit spent in that layer. Per micro-batch
and pass (forward, backward), each unit's per-layer accounts are averaged over ``WINDOW_LAYERS``
layers that end ``prefetch + 1`` layers before the pass's last one (the end of a pass disturbs the
layers that FSDP prefetch overlaps with it, :mod:`~nspsim.simulator.periodic`). The L - K missing
layers are inserted there: every unit's accounts grow by L - K times its window mean, and the step
by L - K times the largest per-layer time of any unit in that pass (the slowest unit paces the
pass; the FSDP gather chain holds the faster ones to it). Every GPU is then topped up with comm
wait to the step's end, as in an exact step.

Measured choices (against full simulations of the Figure 7 workloads, nsp and static SP8, 2 batches,
during development): extending each unit at its own pace instead of the slowest unit's was 0.5-0.8%
short on NSP plans (a unit faster in one pass is held back by the gather chain, which its own pace
ignores), and the pace of the latest task end per layer was noisy (-10% at K = 8); a window of 2
layers was as good as 4 or 6 at K >= 12 and better at K = 8.

Trade-off (benchmarks/results/approx_simulation.md, 109 cases): at K = 12 the CPU time is 4.7x less
than exact and the step time within 0.78% (median error 0.00%; FlexSP plans err most, always above);
K = 8: 6.7x, 0.91%; K = 24: 2.5x, 0.52%. Not exact: a group still drifting against the FSDP chain after K layers
(docs/simulator.md) is extended at its pace so far. The result says so (``StepResult.approximate``),
and the CLI prints the measured error beside it. Off by default; exact periodic extrapolation
(:mod:`~nspsim.simulator.periodic`) still wins when it applies to the K-layer run.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from nspsim.simulator.program import Program

WINDOW_LAYERS = 2
"""Layers each pace is averaged over (2, 4 and 6 compared during development, module docstring)."""
TRANSIENT_LAYERS = 2
"""Layers at a pass's start that the window never covers: the first exposed gather and the prefetch
warm-up (the earliest layer exact extrapolation may repeat is layer 2, :mod:`~nspsim.simulator.periodic`)."""
MIN_APPROX_LAYERS = 8
"""Smallest K accepted: the transient, the window and a tail of up to 4 layers (FSDP prefetch up to 3)."""
MEASURED_SOURCE = "benchmarks/results/approx_simulation.md"
MEASURED_MAX_ERROR: dict[int, float] = {8: 0.0091, 12: 0.0078, 16: 0.0069, 24: 0.0052}
"""Per K measured, the largest |approximate / exact - 1| of the step time over the benchmark's 109 cases
(:data:`MEASURED_SOURCE`: Figure 7 workloads, nsp, static SP8 and flexsp, 3 batches each, and 30B on 1,024
GPUs; the CLI prints them beside an approximate result)."""


@dataclass(frozen=True, kw_only=True)
class Extension:
    """What the L - K layers that were not simulated add: ``accounts`` seconds per (unit, category)
    and ``step`` seconds to the step's end."""

    accounts: np.ndarray
    step: float

    def __post_init__(self) -> None:
        if not np.isfinite(self.step) or self.step < 0 or not bool(np.all(self.accounts >= 0)):
            raise ValueError(f"an extension adds non-negative time, got step {self.step}")


def min_layers(prefetch: int) -> int:
    """The fewest simulated layers the pace window fits in with FSDP gathers ``prefetch`` layers ahead."""
    return TRANSIENT_LAYERS + WINDOW_LAYERS + prefetch + 1


def extend(program: Program, accounts: np.ndarray, total_layers: int, prefetch: int) -> Extension:
    """The :class:`Extension` of a run of ``program`` (its time ``accounts`` per segment, unit and
    category) to ``total_layers`` layers per pass; see the module docstring."""
    added = np.zeros(accounts.shape[1:])
    step = 0.0
    tail = prefetch + 1
    for mb in sorted({s.micro_batch for s in program.segments if s.kind == "fwd"}):
        for kind in ("fwd", "bwd"):
            layers = program.layer_segments(kind, mb)
            missing = total_layers - len(layers)
            if len(layers) < min_layers(prefetch):
                raise ValueError(f"{len(layers)} simulated layers leave no pace window (need {min_layers(prefetch)})")
            window = layers[len(layers) - tail - WINDOW_LAYERS : len(layers) - tail]
            pace = accounts[window].mean(axis=0)  # per unit and category, seconds per layer
            added += missing * pace
            step += missing * float(pace.sum(axis=1).max())
    return Extension(accounts=added, step=step)


def error_line() -> str:
    """The benchmark's measured error of the approximation, for printing beside an approximate result."""
    figures = ", ".join(f"{100 * e:.2f}% at K={k}" for k, e in sorted(MEASURED_MAX_ERROR.items()))
    return (
        f"step-time error measured on the Figure 7 workloads ({MEASURED_SOURCE}): max |error| {figures}; the "
        "breakdown is the GPU with least comm wait, which can be another near-critical GPU than an exact run's"
    )


def measured_error() -> dict[str, object]:
    """The benchmark's measured error (:data:`MEASURED_MAX_ERROR`) and its source, for JSON beside a result."""
    return {
        "max_abs_step_error_by_k": {str(k): e for k, e in sorted(MEASURED_MAX_ERROR.items())},
        "source": MEASURED_SOURCE,
    }


@dataclass(frozen=True, kw_only=True)
class ApproxCheck:
    """One step simulated both approximately and exactly on the user's own workload: what ``nspsim compare``
    prints beside approximate results (``label`` names the step, e.g. its planner and batch)."""

    label: str
    layers_simulated: int
    num_layers: int
    exact_s: float
    approximate_s: float

    def __post_init__(self) -> None:
        if not (self.exact_s > 0 and math.isfinite(self.exact_s) and math.isfinite(self.approximate_s)):
            raise ValueError(f"a check needs finite step times, got {self.exact_s} and {self.approximate_s}")

    @property
    def error(self) -> float:
        """approximate / exact - 1."""
        return self.approximate_s / self.exact_s - 1

    def line(self) -> str:
        """The check as one printed line."""
        return (
            f"approximate: {self.layers_simulated} of {self.num_layers} layers simulated per step; measured error on "
            f"this workload ({self.label}, simulated exactly once): {100 * self.error:+.2f}% "
            f"(exact {self.exact_s:.4f} s, approximate {self.approximate_s:.4f} s)"
        )

    def to_dict(self) -> dict[str, object]:
        """JSON-ready fields, with the error."""
        return {**asdict(self), "error": self.error}
