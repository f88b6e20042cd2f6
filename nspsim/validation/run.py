"""One validation run: load reference rows, predict each, mark which rows fitted coefficients.

:func:`validate` is the API ``nspsim validate`` calls (and a notebook may): it returns a
:class:`ValidationResult` whose ``to_dict()`` is the command's ``--json`` document (keys ``rows`` and
``summary``, the latter per kind with ``n``, ``mape`` and ``max_abs_error``; each also split into the
rows that fitted a coefficient, ``fit``, and the rows that only check the model, ``check``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nspsim.validation.dataset import KINDS, ReferenceRow, builtin_paths, load_reference
from nspsim.validation.evaluate import evaluate_row
from nspsim.validation.fit import fitted_row_ids
from nspsim.validation.summary import KindSummary, RowResult, reasons, summarise

SPLIT = (
    "coefficients come from component rows only (kernel curves, GEMM rates, collective latencies: rows "
    "marked 'fit'); end-to-end rows never fit anything and only validate"
)


@dataclass(frozen=True, kw_only=True)
class ValidationResult:
    """Every row's prediction and the per-kind statistics."""

    results: tuple[RowResult, ...]
    fitted: frozenset[str]
    datasets: tuple[str, ...]

    def summary(self) -> dict[str, KindSummary]:
        """Per kind over every expressed row."""
        return summarise(self.results)

    def split_summary(self, role: str) -> dict[str, KindSummary]:
        """Per kind over the rows that fitted a coefficient (``fit``) or did not (``check``)."""
        fit = role == "fit"
        return summarise([r for r in self.results if (r.row.id in self.fitted) == fit])

    def role(self, row: ReferenceRow) -> str:
        """``fit`` when the row fitted a shipped coefficient, else ``check``."""
        return "fit" if row.id in self.fitted else "check"

    def to_dict(self) -> dict[str, Any]:
        """The ``--json`` document."""
        fit, check = self.split_summary("fit"), self.split_summary("check")
        summary = {}
        for kind, s in self.summary().items():
            summary[kind] = {
                **s.to_dict(),
                "fit": fit[kind].to_dict() if kind in fit else None,
                "check": check[kind].to_dict() if kind in check else None,
            }
        return {
            "split": SPLIT,
            "datasets": list(self.datasets),
            "rows": [{**r.to_dict(), "role": self.role(r.row)} for r in self.results],
            "summary": summary,
            "not_expressible": reasons(self.results),
        }


def validate(datasets: Sequence[str | Path] | None = None, *, kinds: Sequence[str] | None = None) -> ValidationResult:
    """Predict every row of ``datasets`` (the built-in reference set when ``None``), keeping ``kinds``
    (all when ``None``). Which rows fitted coefficients is decided on the built-in set, whatever is
    validated: a user's own rows only check."""
    for kind in kinds or ():
        if kind not in KINDS:
            raise ValueError(f"unknown kind {kind!r} (known: {', '.join(KINDS)})")
    rows = load_reference(datasets)
    if kinds:
        rows = tuple(r for r in rows if r.kind in kinds)
    fitted = fitted_row_ids(load_reference()) if datasets is None else frozenset()
    names = tuple(str(p) for p in (builtin_paths() if datasets is None else datasets))
    results = tuple(RowResult(row=r, prediction=evaluate_row(r)) for r in rows)
    return ValidationResult(results=results, fitted=fitted, datasets=names)
