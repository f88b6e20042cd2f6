"""A validation's common level and each case's deviation from it: what the machine can explain and what it cannot.

The cases of one rank count run interleaved in one process group (:mod:`nspsim_runtime.validation.run`),
so a change of the machine's speed since calibration, or a calibration taken at another speed, moves
every case's error the same way. The *common level* of a rank count is the median of its cases'
signed errors; a case's *deviation* from it, ``(1 + error) / (1 + level) - 1``, is the part of its error
that no speed common to the run explains: the model's, or that case's own noise. The deviation's
standard error is the per-step errors' (``(predicted - measured) / measured`` of each step) standard
deviation over the square root of the steps, divided by ``1 + level``. A case *stands out* when
``|deviation|`` exceeds the threshold (``--max-mape``, else :data:`STANDOUT`) by more than two
standard errors: the model is wrong for that case whatever the machine did. The *spread* is the mean
``|deviation|``: the model's accuracy across strategies once the common level is set aside.

Measured on the 2-core development VM (2026-12-02, 18 runs of the default and held-out suites at 2
ranks, 153 cases, each run on a fresh calibration, no other job): the common level moved from -22% to
+11% between runs while the spread stayed at 2.3-8.3%. ``nsp ring @2`` was +10% to +47% off the level
in all 9 default runs and stood out (at ``--max-mape`` 10%) in 6 of them, standard errors 1-6%: a model
error that the run-wide MAPE and the machine signals had hidden (the verdict had blamed the machine).
One other case stood out once (``static:degree=1 commoncrawl @2``, +21% with a standard error of 5%,
in a run whose level was -21%).

Trade-off: a model error common to every case (every prediction 10% low) cannot be told from a level
shift here; the speed reference (:mod:`nspsim_runtime.validation.drift`) is the independent evidence of
the machine's speed, and the verdict never passes a run on the level alone. With fewer than
:data:`MIN_CASES` cases at a rank count, the median is no estimate of a common level and nothing
stands out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

STANDOUT = 0.10
"""Deviation beyond which a case stands out when no ``--max-mape`` is given: the validation's 10% scale."""
MIN_CASES = 3
"""Cases a rank count needs for its median error to be a common level (two cases have no majority)."""


@dataclass(frozen=True, kw_only=True)
class Deviation:
    """One case's place against its rank count's common level (module docstring)."""

    label: str
    ranks: int
    level: float
    deviation: float
    stderr: float
    stands_out: bool

    def to_dict(self) -> dict[str, object]:
        """The JSON fields a case's record gains (its label and ranks are already there)."""
        return {"level": self.level, "deviation": self.deviation, "deviation_se": self.stderr,
                "stands_out": self.stands_out}  # fmt: skip


def step_error_se(measured: Sequence[float], predicted: Sequence[float]) -> float:
    """Standard error of a case's mean error from its per-step errors (0 for one step)."""
    if len(measured) < 2:
        return 0.0
    m = np.asarray(measured, dtype=float)
    errors = (np.asarray(predicted, dtype=float) - m) / m
    return float(np.std(errors, ddof=1) / math.sqrt(len(errors)))


def deviations(cases: Sequence[tuple[str, int, float, float]], threshold: float | None = None) -> tuple[Deviation, ...]:
    """Each case's deviation from its rank count's common level; ``cases`` are ``(label, ranks, error,
    stderr)`` with ``stderr`` from :func:`step_error_se`. Rank counts with fewer than :data:`MIN_CASES`
    cases get level 0 and never stand out."""
    limit = STANDOUT if threshold is None else threshold
    levels: dict[int, float | None] = {}
    for ranks in {r for _, r, _, _ in cases}:
        errors = [e for _, r, e, _ in cases if r == ranks]
        levels[ranks] = float(np.median(errors)) if len(errors) >= MIN_CASES else None
    out = []
    for label, ranks, error, stderr in cases:
        level = levels[ranks]
        base = 0.0 if level is None else level
        dev = (1.0 + error) / (1.0 + base) - 1.0
        se = stderr / (1.0 + base)
        out.append(Deviation(label=label, ranks=ranks, level=base, deviation=dev, stderr=se,
                             stands_out=level is not None and abs(dev) > limit + 2.0 * se))  # fmt: skip
    return tuple(out)


def spread(devs: Sequence[Deviation]) -> float | None:
    """Mean absolute deviation (``None`` without cases)."""
    return float(np.mean([abs(d.deviation) for d in devs])) if devs else None


def standout_phrase(devs: Sequence[Deviation]) -> str:
    """``"nsp ring @2 +47% (se 5%)"``, ... for the cases that stand out ("" if none)."""
    return ", ".join(f"{d.label} {d.deviation:+.0%} (se {d.stderr:.0%})" for d in devs if d.stands_out)
