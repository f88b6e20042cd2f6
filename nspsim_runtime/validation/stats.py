"""Error statistics of a validation (pure; no torch): per case, overall, and strategy order.

Per case: the measured step time is the mean over the steps after warm-up (the standard deviation is
over those steps, which are different batches); the prediction is the mean of the simulator's
predictions of the same steps; the error is signed, ``(predicted - measured) / measured``; the
per-category error is ``(predicted - measured) / measured step`` for every breakdown category, so
categories add up to the step's error.

Overall: MAPE (mean absolute error), the maximum and the geometric mean of the absolute errors; with
speed factors (:mod:`nspsim_runtime.validation.drift`) also each case's corrected prediction and error
and the corrected MAPE, beside the raw ones. Pairs and Kendall's tau use the raw predictions (the
cases of a suite run interleaved, so a drift scales every strategy's blocks alike).

Order: two cases *on the same batches* (same trace, model, sizes, seed, steps and ranks; different
strategies) are *resolved* when their measured means differ by more than two standard errors of the
difference, ``2 * sqrt(se_a**2 + se_b**2)`` with ``se = std / sqrt(steps)``; a resolved pair *agrees*
when the simulator orders the two the same way. Kendall's tau (scipy) is computed within each group
of cases on the same batches and averaged, weighted by the group's pairs.

Trade-off: the standard error over steps includes the batch-to-batch spread, so only clear
differences resolve. A paired test over the shared steps would resolve more, but it assumes the noise
is independent per step, and it is not: on the 2-core development machine two runs of the same
placement (``static:degree=2`` and FlexSP, which put every sample on degree 2) differed by 10-18% on
every step of a run (2.53 against 2.98 s/step, and 2.88 against 2.53 in a rerun), a run-level offset
that pairing would have counted as a resolved difference.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import combinations
from typing import Any

import numpy as np
from scipy.stats import kendalltau

from nspsim_runtime.validation.drift import DRIFT_FLAG, corrected_mean


@dataclass(frozen=True, kw_only=True)
class CaseResult:
    """The measured and predicted steps of one case (after warm-up), aligned by step."""

    label: str
    ranks: int
    planner: str
    batches: tuple[Any, ...]
    measured_s: tuple[float, ...]
    predicted_s: tuple[float, ...]
    measured_breakdown_s: dict[str, float] = field(default_factory=dict)  # mean per category
    predicted_breakdown_s: dict[str, float] = field(default_factory=dict)
    note: str = ""
    speed_factors: tuple[float, ...] = ()  # per step, the machine's speed against calibration (empty: unknown)
    reference_drift: float | None = None  # the largest move of the speed reference within a block of the case

    def __post_init__(self) -> None:
        if len(self.measured_s) != len(self.predicted_s) or not self.measured_s:
            raise ValueError(f"case {self.label}: needs one prediction per measured step and at least one step")
        if self.speed_factors and len(self.speed_factors) != len(self.measured_s):
            raise ValueError(f"case {self.label}: needs one speed factor per measured step or none")

    @property
    def speed_factor(self) -> float | None:
        """Mean speed factor over the steps (:mod:`nspsim_runtime.validation.drift`), ``None`` if unknown."""
        return float(np.mean(self.speed_factors)) if self.speed_factors else None

    @property
    def corrected_predicted_step_s(self) -> float | None:
        """Mean prediction with each step scaled by its speed factor (``None`` without factors)."""
        return corrected_mean(self.predicted_s, self.speed_factors) if self.speed_factors else None

    @property
    def corrected_error(self) -> float | None:
        """Signed relative error of the corrected prediction (``None`` without factors)."""
        c = self.corrected_predicted_step_s
        return None if c is None else (c - self.measured_step_s) / self.measured_step_s

    @property
    def flagged(self) -> bool:
        """The speed reference moved more than :data:`~nspsim_runtime.validation.drift.DRIFT_FLAG` within a block."""
        return self.reference_drift is not None and self.reference_drift > DRIFT_FLAG

    @property
    def measured_step_s(self) -> float:
        """Mean measured step time."""
        return float(np.mean(self.measured_s))

    @property
    def measured_std_s(self) -> float:
        """Standard deviation of the measured step times (0 for one step)."""
        return float(np.std(self.measured_s, ddof=1)) if len(self.measured_s) > 1 else 0.0

    @property
    def predicted_step_s(self) -> float:
        """Mean predicted step time."""
        return float(np.mean(self.predicted_s))

    @property
    def error(self) -> float:
        """Signed relative error of the mean prediction."""
        return (self.predicted_step_s - self.measured_step_s) / self.measured_step_s

    @property
    def breakdown_error(self) -> dict[str, float]:
        """Per-category error as a share of the measured step (adds up to :attr:`error`)."""
        keys = sorted(set(self.measured_breakdown_s) | set(self.predicted_breakdown_s))
        m = self.measured_step_s
        return {k: (self.predicted_breakdown_s.get(k, 0.0) - self.measured_breakdown_s.get(k, 0.0)) / m for k in keys}

    def to_dict(self) -> dict[str, Any]:
        """The JSON fields of a case."""
        return {
            "label": self.label,
            "ranks": self.ranks,
            "planner": self.planner,
            "steps": len(self.measured_s),
            "measured_step_s": self.measured_step_s,
            "measured_std_s": self.measured_std_s,
            "predicted_step_s": self.predicted_step_s,
            "error": self.error,
            "breakdown_error": self.breakdown_error,
            "measured_steps_s": list(self.measured_s),
            "predicted_steps_s": list(self.predicted_s),
            "measured_breakdown_s": self.measured_breakdown_s,
            "predicted_breakdown_s": self.predicted_breakdown_s,
            "note": self.note,
            "speed_factor": self.speed_factor,
            "corrected_predicted_step_s": self.corrected_predicted_step_s,
            "corrected_error": self.corrected_error,
            "speed_factors": list(self.speed_factors),
            "reference_drift": self.reference_drift,
            "drift_flagged": self.flagged,
        }


@dataclass(frozen=True, kw_only=True)
class PairResult:
    """Two cases on the same batches: measured and predicted difference (a - b), and the verdict."""

    a: str
    b: str
    measured_diff_s: float
    stderr_s: float
    predicted_diff_s: float

    @property
    def resolved(self) -> bool:
        """Measured difference beyond two standard errors."""
        return abs(self.measured_diff_s) > 2.0 * self.stderr_s

    @property
    def agrees(self) -> bool:
        """The simulator orders the pair as measured."""
        return math.copysign(1.0, self.measured_diff_s) == math.copysign(1.0, self.predicted_diff_s)


def paired(a: CaseResult, b: CaseResult) -> PairResult | None:
    """The pair statistic of two cases on the same batches (``None`` if either has fewer than 2 steps)."""
    if min(len(a.measured_s), len(b.measured_s)) < 2:
        return None
    se_a = a.measured_std_s / math.sqrt(len(a.measured_s))
    se_b = b.measured_std_s / math.sqrt(len(b.measured_s))
    return PairResult(
        a=a.label,
        b=b.label,
        measured_diff_s=a.measured_step_s - b.measured_step_s,
        stderr_s=math.sqrt(se_a**2 + se_b**2),
        predicted_diff_s=a.predicted_step_s - b.predicted_step_s,
    )


@dataclass(frozen=True, kw_only=True)
class Summary:
    """The whole validation's statistics."""

    mape: float
    max_abs_error: float
    geomean_abs_error: float
    pairs: tuple[PairResult, ...]
    kendall_tau: float | None
    corrected_mape: float | None = None  # MAPE of the speed-corrected predictions (None: some case has no factors)

    @property
    def pairs_resolved(self) -> int:
        """Pairs whose measured order is decided."""
        return sum(p.resolved for p in self.pairs)

    @property
    def pairs_agree(self) -> int:
        """Resolved pairs the simulator orders right."""
        return sum(p.resolved and p.agrees for p in self.pairs)

    def to_dict(self) -> dict[str, Any]:
        """The JSON fields of the summary."""
        return {
            "mape": self.mape,
            "max_abs_error": self.max_abs_error,
            "geomean_abs_error": self.geomean_abs_error,
            "pairs_resolved": self.pairs_resolved,
            "pairs_agree": self.pairs_agree,
            "kendall_tau": self.kendall_tau,
            "corrected_mape": self.corrected_mape,
            "pairs": [{**p.__dict__, "resolved": p.resolved, "agrees": p.agrees} for p in self.pairs],
        }


def summarise(cases: Sequence[CaseResult]) -> Summary:
    """Overall errors and order agreement of ``cases`` (module docstring)."""
    if not cases:
        raise ValueError("no case has a prediction to compare")
    errors = np.abs([c.error for c in cases])
    known = [e for e in (c.corrected_error for c in cases) if e is not None]
    groups: dict[tuple[Any, ...], list[CaseResult]] = {}
    for c in cases:
        groups.setdefault(c.batches, []).append(c)
    pairs: list[PairResult] = []
    taus: list[tuple[float, int]] = []
    for members in groups.values():
        for a, b in combinations(members, 2):
            p = paired(a, b)
            if p is not None:
                pairs.append(p)
        if len(members) >= 2:
            tau = kendalltau([c.measured_step_s for c in members], [c.predicted_step_s for c in members]).statistic
            if tau is not None and math.isfinite(tau):
                taus.append((float(tau), len(members) * (len(members) - 1) // 2))
    weight = sum(w for _, w in taus)
    return Summary(
        mape=float(np.mean(errors)),
        max_abs_error=float(np.max(errors)),
        geomean_abs_error=float(np.exp(np.mean(np.log(np.maximum(errors, 1e-12))))),
        pairs=tuple(pairs),
        kendall_tau=sum(t * w for t, w in taus) / weight if weight else None,
        corrected_mape=float(np.mean([abs(e) for e in known])) if len(known) == len(cases) else None,
    )
