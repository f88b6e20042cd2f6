"""Errors and per-kind statistics of a validation run, like Calculon's ``llm-validation``.

A row's error is ``simulated / published - 1`` in the row's own unit (so for a throughput a positive
error is an optimistic model; for a time, a pessimistic one); ``time_ratio`` restates every row as
predicted over published *time* (below 1: the model is optimistic), whatever its unit. Per kind:
rows, rows the model expresses, MAPE and max |error| over those; rows it cannot express are counted
and listed with their reasons, never dropped.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from nspsim.validation.dataset import KINDS, ReferenceRow
from nspsim.validation.evaluate import Prediction


@dataclass(frozen=True, kw_only=True)
class RowResult:
    """One row and its prediction."""

    row: ReferenceRow
    prediction: Prediction

    @property
    def error(self) -> float | None:
        """Signed relative error in the row's unit, ``None`` when not expressible."""
        sim = self.prediction.simulated
        return None if sim is None else sim / self.row.published - 1.0

    @property
    def time_ratio(self) -> float | None:
        """Predicted over published time (below 1: optimistic)."""
        sim = self.prediction.simulated
        if sim is None:
            return None
        return self.row.published / sim if self.row.is_rate else sim / self.row.published

    def to_dict(self) -> dict[str, Any]:
        """JSON row: ``id``, ``kind``, ``source``, ``published``, ``simulated``, ``error`` and more."""
        r = self.row
        return {
            "id": r.id,
            "kind": r.kind,
            "source": r.source.cite,
            "published": r.published,
            "unit": r.unit,
            "simulated": self.prediction.simulated,
            "error": self.error,
            "time_ratio": self.time_ratio,
            "not_expressible": self.prediction.reason,
            "file": r.origin,
            "detail": dict(self.prediction.detail),
        }


@dataclass(frozen=True, kw_only=True)
class KindSummary:
    """Statistics of one kind."""

    kind: str
    rows: int
    n: int
    mape: float | None
    max_abs_error: float | None
    optimistic: int

    def to_dict(self) -> dict[str, Any]:
        """JSON: ``n`` (expressed rows), ``mape``, ``max_abs_error`` and counts."""
        return {
            "n": self.n,
            "rows": self.rows,
            "not_expressible": self.rows - self.n,
            "mape": self.mape,
            "max_abs_error": self.max_abs_error,
            "optimistic": self.optimistic,
        }


def summarise(results: Sequence[RowResult]) -> dict[str, KindSummary]:
    """Per-kind statistics, in :data:`KINDS` order (kinds without rows left out)."""
    out = {}
    for kind in KINDS:
        mine = [r for r in results if r.row.kind == kind]
        if not mine:
            continue
        errors = [abs(r.error) for r in mine if r.error is not None]
        ratios = [r.time_ratio for r in mine if r.time_ratio is not None]
        out[kind] = KindSummary(
            kind=kind,
            rows=len(mine),
            n=len(errors),
            mape=sum(errors) / len(errors) if errors else None,
            max_abs_error=max(errors) if errors else None,
            optimistic=sum(1 for t in ratios if t < 1.0),
        )
    return out


def reasons(results: Iterable[RowResult]) -> Mapping[str, int]:
    """How many rows each not-expressible reason covers, most first."""
    counts: dict[str, int] = {}
    for r in results:
        if r.prediction.reason is not None:
            counts[r.prediction.reason] = counts.get(r.prediction.reason, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: -kv[1]))
