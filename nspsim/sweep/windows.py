"""Sweep results with gradient-accumulation windows: a window unit's passes as rows, its window as a
row of ``windows.parquet``, and the summary's window figures.

A window unit (:mod:`nspsim.sweep.work`) records its W passes and its window. Each pass becomes the
row of its iteration (:func:`pass_record`: iteration i is pass i mod W of its window), so the per-batch
columns, normalisation and summary read exactly as compare's per-step keys do: a pass's time, and
means that are a window's time / W. The window itself becomes one row of ``windows.parquet``
(:func:`window_row`, schema :data:`nspsim.sweep.schema.WINDOWS_SCHEMA`): window time, per-step time
(the per-step assignment's, judged by the simulator), time per token, chosen candidate, moved samples.
Per (point, planner), :func:`window_figures` adds compare's window summary
(:func:`nspsim.compare.windows.window_summaries`; ``window_over_per_step`` below 1 is what moving
samples gained). A point with W = 1 has no window rows (compare reports none either); its figures are
those of per-step planning by definition: each batch is a window, its time the step time, and
``window_over_per_step`` = 1, so a plot of the figures against the window starts from W = 1.

Trade-off: windows go to their own file rather than into columns of the pass rows, because a window
is another grain (one row per W passes): as columns its figures would repeat W times and any sum
or mean over rows would count each window W times.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from nspsim.compare.windows import WindowRecord, window_summaries

NAN = float("nan")
_TIMES = ("window_time_s", "per_step_time_s", "time_per_token_s")


def pass_record(record: dict[str, Any] | None, iteration: int) -> dict[str, Any] | None:
    """The record of ``iteration`` in a unit's ``record``: pass ``iteration mod W`` of a window unit's
    record, else the record itself (a step unit's, or an ineligible unit's)."""
    if record is None or "passes" not in record:
        return record
    passes: list[dict[str, Any]] = record["passes"]
    return passes[iteration % len(passes)]


def window_row(base: dict[str, Any], index: int, record: dict[str, Any] | None, error: str) -> dict[str, Any]:
    """The ``windows.parquet`` row of window ``index``: ``base`` (point, workload, window, planner,
    cached) and the figures of the unit's ``record`` (NaN and ``error`` when it has none)."""
    window = (record or {}).get("window") or {}
    times = {name: _number(window.get(name)) for name in (*_TIMES, "planning_time_s")}
    ratio = times["window_time_s"] / times["per_step_time_s"] if times["per_step_time_s"] > 0 else NAN
    return {
        **base,
        "window_index": index,
        "first_batch": int(window.get("first_batch", -1)),
        "passes": int(window.get("passes", 0)),
        "candidate": str(window.get("candidate", "")),
        "moved_samples": int(window.get("moved_samples", 0)),
        "tokens": int(window.get("tokens", 0)),
        **times,
        "window_over_per_step": ratio,
        "window_hash": str(window.get("window_hash", "")),
        "error": error if not window else "",
    }


def window_figures(group: list[dict[str, Any]], windows: list[dict[str, Any]]) -> dict[str, Any]:
    """The summary's window figures of one (point, planner): from its window rows when its window is
    above 1, else from its per-batch ``group`` (module docstring)."""
    if group[0]["window"] == 1:
        ok = [r for r in group if math.isfinite(r["step_time_s"])]
        tokens = sum(r["batch_tokens"] for r in ok)
        total = sum(r["step_time_s"] for r in ok)
        return {
            "windows": len(group),
            "mean_window_time_s": float(np.mean([r["step_time_s"] for r in ok])) if ok else NAN,
            "time_per_token_s": total / tokens if ok and tokens > 0 else NAN,
            "window_over_per_step": 1.0 if ok else NAN,
            "windows_rearranged": 0,
        }
    label = group[0]["planner"]
    records = [_record(label, w) for w in windows if not w["error"]]
    figures = window_summaries([label], records)[0]
    return {
        "windows": len(windows),
        **{k: NAN if figures[k] is None else float(figures[k]) for k in _SUMMARY_TIMES},
        "windows_rearranged": int(figures["windows_rearranged"]),
    }


_SUMMARY_TIMES = ("mean_window_time_s", "time_per_token_s", "window_over_per_step")


def _record(label: str, row: dict[str, Any]) -> WindowRecord:
    """The :class:`WindowRecord` a ``windows.parquet`` row holds (NaN times as ``None``)."""
    return WindowRecord(
        planner=label,
        window=row["window_index"],
        first_batch=row["first_batch"],
        passes=row["passes"],
        candidate=row["candidate"],
        moved_samples=row["moved_samples"],
        tokens=row["tokens"],
        **{name: row[name] if math.isfinite(row[name]) else None for name in _TIMES},
        planning_time_s=row["planning_time_s"],
        window_hash=row["window_hash"],
    )


def _number(value: Any) -> float:
    return NAN if value is None else float(value)
