"""The sweep report's HTML tables: the per-point summary (speedup, its interval and spread, batches,
out-of-memory and failed counts; with windows, the window time over the per-step assignment's), the
failed units and the resolved config. Cells are escaped text."""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from nspsim.units import format_tokens

TOKEN_AXES = frozenset({"max_context", "tokens_per_batch", "token_budget"})
"""Axes whose values are token counts (printed as 192K, 2M)."""


def summary_table(summary: pd.DataFrame, axes: Sequence[str], planners: Sequence[str]) -> str:
    """One row per point x planner: the swept values, speedup, per-batch spread and counts."""
    if summary.empty:
        return "<h2>Summary</h2><p>No summary rows.</p>"
    order = {p: i for i, p in enumerate(planners)}
    frame = summary.assign(_o=summary["planner"].map(lambda p: order.get(p, len(order))))
    frame = frame.sort_values(["point", "_o"])
    cols = [a for a in axes if a in frame.columns]
    windowed = "window_over_per_step" in frame.columns  # a sweep with gradient-accumulation windows
    head = [
        "point",
        *cols,
        "planner",
        "speedup",
        "speedup 95% interval",
        "normalised",
        "per batch min / med / max",
        "ran",
        "OOM",
        "failed",
        *(["window / per-step"] if windowed else []),
    ]
    body = []
    for _, r in frame.iterrows():
        cells = [str(r["point"]), *(cell(a, r[a]) for a in cols), str(r["planner"])]
        cells += [
            _num(r.get("speedup"), ".2f", "x"),
            _interval(r.get("normalized_ci_low"), r.get("normalized_ci_high")),
            _num(r.get("normalized"), ".3f"),
            " / ".join(_num(r.get(k), ".3f") for k in ("normalized_min", "normalized_median", "normalized_max")),
            f"{_int(r.get('ok_batches'))}/{_int(r.get('batches'))}",
            _int(r.get("oom_count")),
            _int(r.get("failed")),
            *([_num(r.get("window_over_per_step"), ".3f")] if windowed else []),
        ]
        body.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>")
    header = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    return f"<h2>Summary</h2><div class='table'><table><tr>{header}</tr>{''.join(body)}</table></div>"


def _interval(low: Any, high: Any) -> str:
    """The speedup interval from the normalised one (``-`` for a summary written before it existed,
    or below two batches)."""
    if not isinstance(low, float) or not isinstance(high, float) or not (math.isfinite(low) and math.isfinite(high)):
        return "-"
    return f"{1 / high:.2f}-{1 / low:.2f}x" if low > 0 else "-"


def errors_list(results: pd.DataFrame) -> str:
    """The failed units (rows with an error), at most 20 listed."""
    if "error" not in results:
        return ""
    failed = results[results["error"].fillna("") != ""]
    if failed.empty:
        return ""
    items = "".join(
        f"<li>point {r['point']}, {html.escape(str(r['planner']))}, batch {r['batch_index']}: "
        f"{html.escape(str(r['error']))}</li>"
        for _, r in failed.head(20).iterrows()
    )
    more = f"<li>... and {len(failed) - 20} more</li>" if len(failed) > 20 else ""
    return f"<h2 style='color:#c00'>{len(failed)} failed unit(s)</h2><ul class='errors'>{items}{more}</ul>"


def config_block(config: dict[str, Any]) -> str:
    """The resolved sweep config, collapsed."""
    rows = "".join(
        f"<tr><th>{html.escape(str(k))}</th><td class='l'>{html.escape(str(v))}</td></tr>" for k, v in config.items()
    )
    return f"<details><summary>Configuration</summary><table>{rows}</table></details>"


def cell(axis: str, value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "default"
    if axis in TOKEN_AXES and isinstance(value, int | float | np.integer | np.floating):
        return format_tokens(float(value))
    if isinstance(value, float | np.floating) and float(value).is_integer():
        return str(int(value))  # an integer column with a missing value reads as floats
    return str(value)


def _num(value: Any, spec: str, suffix: str = "") -> str:
    if value is None or not np.isfinite(value):
        return "-"
    return f"{format(float(value), spec)}{suffix}"


def _int(value: Any) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else str(int(value))
