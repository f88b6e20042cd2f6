"""What a planner estimated for its plan, as a typed record: the rungs of the estimate ladder
(:mod:`nspsim.planners.estimate`) evaluated on the plan, and which rung chose it.

A plan stores the record in its metadata (outside the content hash), under fixed keys, so plan files
stay plain JSON and a plan made before the record existed still reads (``Estimates.of`` is then
``None``). ``compare`` and ``sweep`` copy it whole into their records, so "how good was the estimate
against the simulator" is one column: ``chosen_estimate_s / step_time_s - 1``.

Rungs, cheapest first, each at least the one before on any placement: ``lower-bound`` (of the batch,
any plan), ``load`` (proxy Load), ``step`` (Load stages with FSDP floors and the fixed micro-batch
cost), ``recompute-aware`` (step plus the recomputation the tree marking implies, phase-wise per EP
group). ``rule``: the plan was not chosen by comparing estimates (a fixed degree, Megatron's layout).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

RUNGS = ("lower-bound", "load", "step", "recompute-aware")
CHOSEN_BY = (*RUNGS[1:], "rule")  # a lower bound is of the batch, not of a plan
_KEYS = ("lower_bound_s", "load_s", "step_estimate_s", "chosen_by", "chosen_estimate_s")
"""The record's fields, which are also its plan-metadata keys and its columns in compare and sweep."""
_RTOL = 1e-9  # the rungs are sums of the same floats in different orders


@dataclass(frozen=True, kw_only=True)
class Estimates:
    """A plan's estimates in seconds: the batch's lower bound, the plan's proxy Load and step estimate,
    the rung that chose the plan (:data:`CHOSEN_BY`) and that rung's value for it."""

    lower_bound_s: float
    load_s: float
    step_estimate_s: float
    chosen_by: str
    chosen_estimate_s: float

    def __post_init__(self) -> None:
        if self.chosen_by not in CHOSEN_BY:
            raise ValueError(f"estimates chosen_by must be one of {', '.join(CHOSEN_BY)}, got {self.chosen_by!r}")
        values = (self.lower_bound_s, self.load_s, self.step_estimate_s, self.chosen_estimate_s)
        if not all(isinstance(v, float) and math.isfinite(v) and v >= 0 for v in values):
            raise ValueError(f"estimates must be finite non-negative seconds, got {values}")
        if self.load_s > self.step_estimate_s * (1 + _RTOL):  # the bound is of the batch: reported, not enforced
            raise ValueError(
                f"a step estimate is never below the Load, got load {self.load_s} > step {self.step_estimate_s}"
            )

    @property
    def load_over_lower_bound(self) -> float:
        """Load / lower bound (infinite for a zero bound)."""
        return self.load_s / self.lower_bound_s if self.lower_bound_s > 0 else math.inf

    def to_metadata(self) -> dict[str, float | str]:
        """The plan-metadata entries of this record (and ``load_over_lower_bound``)."""
        entries: dict[str, float | str] = {key: getattr(self, key) for key in _KEYS}
        return {**entries, "load_over_lower_bound": self.load_over_lower_bound}

    @staticmethod
    def of(metadata: Mapping[str, float | int | str]) -> Estimates | None:
        """The record a plan's metadata holds; ``None`` for a plan without one (made before it existed)."""
        if not all(key in metadata for key in _KEYS):
            return None
        return Estimates(
            lower_bound_s=float(metadata["lower_bound_s"]),
            load_s=float(metadata["load_s"]),
            step_estimate_s=float(metadata["step_estimate_s"]),
            chosen_by=str(metadata["chosen_by"]),
            chosen_estimate_s=float(metadata["chosen_estimate_s"]),
        )
