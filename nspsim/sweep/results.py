"""Sweep results as tables: one row per (point, planner, batch), one summary row per (point, planner).

Rows (``results.parquet``, columns :data:`ROW_COLUMNS`): the point and its key, every
:class:`~nspsim.workload.WorkloadConfig` field, the planner label and the baseline it is normalised to
(compare's rule, :func:`nspsim.compare.baseline_of`), the step time (NaN when out of memory or
failed) and ``normalized`` = step time / the baseline's on the same batch, the breakdown
(``bd_<category>``), planning figures, the batch's statistics and whether the unit came from the
cache. ``static-best`` (and ``static-paper``, the paper's token-packed Static SP) takes, per point,
the fixed degree compare would choose: among the degrees that hold every sample and fit in memory on
every batch, the least mean step time; a point where none is eligible gets rows of that label with
that error. A failed unit's row carries the error and NaNs.

Summary (``summary.parquet`` and ``summary.csv``): per point and planner, ``normalized`` is compare's
ratio of sums over the batches where both the planner and the baseline ran, ``normalized_min`` /
``_median`` / ``_max`` the spread of the per-batch ratios, ``normalized_ci_low`` / ``_high`` compare's
interval of the ratio (:data:`nspsim.compare.spread.INTERVAL`), ``speedup`` = 1 / normalized. Trade-off:
the tables are built in memory (a 12 x 6 x 20 sweep is 1,440 rows), typed with an explicit Arrow
schema so an all-null column (``profile``) still has its type in every reader (pandas, polars, DuckDB).

With gradient-accumulation windows (a point's window W > 1, :mod:`nspsim.sweep.windows`), a row is a
pass (so a planner's mean step time is its mean window time / W, as in compare), rows and summary
gain the ``window`` column and the summary the window figures, and ``windows.parquet`` holds one row
per (point, planner, window) (:func:`build_windows`). static-best's degree is chosen over the passes
of its windows, as compare chooses it. A sweep without windows writes what it wrote before.

``nspsim compare -o X.html`` writes its records in the same row schema (:func:`compare_rows`), so a
comparison reads like a one-point sweep.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from nspsim.compare.specs import SWEPT_STATIC
from nspsim.compare.spread import per_window, ratio_interval
from nspsim.compare.summary import CompareResult
from nspsim.jsonfile import dumps_json
from nspsim.output_files import commit_files
from nspsim.records import BREAKDOWN_CATEGORIES
from nspsim.sweep.engine import BatchStats, PointInfo, SweepPlan, batch_stats, degree_label
from nspsim.sweep.keys import point_key, workload_identity
from nspsim.sweep.schema import CONFIG_FILE as CONFIG_FILE
from nspsim.sweep.schema import (
    NAN,
    RESULTS_FILE,
    SUMMARY_CSV,
    SUMMARY_FILE,
    WINDOWS_FILE,
    WINDOWS_SCHEMA,
    WORKLOAD_TYPES,
    row_schema,
    summary_schema,
    workload_columns,
)
from nspsim.sweep.schema import ROW_COLUMNS as ROW_COLUMNS
from nspsim.sweep.schema import ROW_SCHEMA as ROW_SCHEMA
from nspsim.sweep.schema import SUMMARY_SCHEMA as SUMMARY_SCHEMA
from nspsim.sweep.schema import table as table
from nspsim.sweep.windows import pass_record, window_figures, window_row
from nspsim.sweep.work import plain_record
from nspsim.workload import WorkloadConfig


def static_best(plan: SweepPlan, point: PointInfo, label: str = "static-best") -> tuple[int | None, str]:
    """The degree ``label`` (static-best or static-paper) takes at ``point`` (compare's rule, module
    docstring) and a note; ``None`` and the reason when no degree is eligible or one of its units failed."""
    iters = len(point.batches)
    means: dict[int, float] = {}
    passed: list[str] = []
    for d in point.degrees:
        keys = [plan.unit_keys[(point.index, degree_label(d, label), i)] for i in range(iters)]
        failed = next(
            (plan.errors.get(k, "not computed (the sweep was interrupted)") for k in keys if k not in plan.records),
            None,
        )
        if failed is not None:
            return None, f"{label}: the fixed degree SP{d} failed: {failed}"
        records = [rec for i, k in enumerate(keys) if (rec := pass_record(plan.records[k], i)) is not None]
        reason = next((r["ineligible"] for r in records if "ineligible" in r), None)
        oom = [r["batch_index"] for r in records if reason is None and r["oom"]]
        if oom:
            listed = ", ".join(map(str, oom[:5])) + (", ..." if len(oom) > 5 else "")
            reason = f"out of memory on {len(oom)} of {iters} batches (batch {listed})"
        if reason is not None:
            passed.append(f"SP{d} {reason}")
            continue
        means[d] = float(np.mean([r["step_time_s"] for r in records]))
    if not means:
        return None, f"{label}: no fixed SP degree runs every batch: {'; '.join(passed)}"
    best = min(means, key=lambda d: means[d])
    tried = ", ".join(f"SP{d} {m:.4g} s" for d, m in sorted(means.items()))
    return best, f"fastest fixed degree SP{best} ({tried})" + (f"; not eligible: {'; '.join(passed)}" if passed else "")


def swept_degrees(plan: SweepPlan, point: PointInfo) -> dict[str, tuple[int | None, str]]:
    """:func:`static_best` of every swept label (static-best, static-paper) the sweep runs at ``point``."""
    if point.error:
        return {}
    return {label: static_best(plan, point, label) for label in plan.specs if label in SWEPT_STATIC}


def build_rows(plan: SweepPlan) -> list[dict[str, Any]]:
    """Every row (module docstring), in point, planner, iteration order."""
    rows: list[dict[str, Any]] = []
    for point in plan.points:
        chosen = swept_degrees(plan, point)
        point_rows = []
        for label in plan.spec.run.planners:
            best, note = chosen.get(label, (None, ""))
            for i in range(plan.spec.run.iters):
                point_rows.append(_row(plan, point, label, i, best, note))
        rows.extend(normalise(point_rows, plan.baseline))
    return rows


def build_windows(plan: SweepPlan) -> list[dict[str, Any]] | None:
    """The ``windows.parquet`` rows (one per point with W > 1, planner and window, in that order), or
    ``None`` for a sweep without windows (module docstring)."""
    if not plan.spec.windowed:
        return None
    rows: list[dict[str, Any]] = []
    for point in (p for p in plan.points if p.window > 1):
        chosen = swept_degrees(plan, point)
        for label in plan.spec.run.planners:
            best, note = chosen.get(label, (None, ""))
            base = {"point": point.index, "point_key": point.key, **workload_columns(point.config)}
            for index, first in enumerate(range(0, plan.spec.run.iters, point.window)):
                key, record, error = _unit(plan, point, label, first, best, note)
                cached = {"window": point.window, "planner": label, "cached": key in plan.cached}
                rows.append(window_row({**base, **cached}, index, record, error))
    return rows


def normalise(point_rows: list[dict[str, Any]], baseline: str) -> list[dict[str, Any]]:
    """``point_rows`` (one point's) with ``normalized``: the step time over ``baseline``'s on the same iteration."""
    base = {r["iteration"]: r["step_time_s"] for r in point_rows if r["planner"] == baseline}
    for r in point_rows:
        r["normalized"] = _ratio(r["step_time_s"], base.get(r["iteration"], NAN))
    return point_rows


def compare_rows(result: CompareResult, workload: WorkloadConfig) -> list[dict[str, Any]]:
    """A comparison's records as sweep rows (:data:`ROW_SCHEMA`, what ``nspsim compare -o X.html`` writes
    as ``X.results.parquet``): one point (0, keyed as a sweep keys it), every (planner, batch) in the
    result's order, normalised to its baseline; no row failed or came from a cache. ``workload`` is
    the comparison's (``CompareConfig.workload``)."""
    stats = {b.index: batch_stats(b) for b in result.batches}
    key = point_key(workload_identity(workload))
    window = int(result.config.get("run", {}).get("window", 1))
    rows = [
        {
            "point": 0,
            "point_key": key,
            **workload_columns(workload),
            **({"window": window} if window > 1 else {}),  # row_schema(windowed=True)'s column
            "planner": r.planner,
            "baseline": result.baseline,
            "iteration": r.iteration,
            "batch_index": r.batch_index,
            **_measures(plain_record(asdict(r))),
            "error": "",
            "cached": False,
            **_batch_columns(stats.get(r.batch_index)),
        }
        for r in result.records
    ]
    return normalise(rows, result.baseline)


def _ratio(ours: float, theirs: float) -> float:
    return ours / theirs if math.isfinite(ours) and math.isfinite(theirs) and theirs > 0 else NAN


def _row(plan: SweepPlan, point: PointInfo, label: str, i: int, best: int | None, note: str) -> dict[str, Any]:
    batch = point.batches[i] if point.batches else None
    row: dict[str, Any] = {
        "point": point.index,
        "point_key": point.key,
        **workload_columns(point.config),
        "planner": label,
        "baseline": plan.baseline,
        "iteration": i,
        "batch_index": batch.batch_index if batch else plan.spec.run.first_batch + i,
    }
    if plan.spec.windowed:
        row["window"] = point.window
    key, record, error = _unit(plan, point, label, i, best, note)
    row.update(_measures(pass_record(record, i)))
    row["error"] = error
    row["cached"] = key in plan.cached
    row.update(_batch_columns(batch))
    return row


def _unit(
    plan: SweepPlan, point: PointInfo, label: str, i: int, best: int | None, note: str
) -> tuple[str | None, dict[str, Any] | None, str]:
    """The key, record and error of ``label``'s unit of iteration ``i`` at ``point`` (static-best's
    or static-paper's: its chosen degree's); no record, and why, when it did not run."""
    key, error = None, point.error
    if not error:
        if label in SWEPT_STATIC:
            key = None if best is None else plan.unit_keys[(point.index, degree_label(best, label), i)]
            error = note if best is None else ""
        else:
            key = plan.unit_keys[(point.index, label, i)]
    record = plan.records.get(key) if key is not None else None
    if key is not None and record is None:
        error = plan.errors.get(key, "not computed (the sweep was interrupted)")
    if record is not None and "ineligible" in record:
        error, record = f"{label}: {record['ineligible']}", None
    return key, record, error


def _batch_columns(batch: BatchStats | None) -> dict[str, Any]:
    """The batch-statistics columns of a row (zeros and NaN without the batch)."""
    return {
        "batch_samples": batch.samples if batch else 0,
        "batch_tokens": batch.tokens if batch else 0,
        "share_over_128k": batch.share_over_128k if batch else NAN,
        "dropped_samples": batch.dropped_samples if batch else 0,
        "dropped_tokens": batch.dropped_tokens if batch else 0,
    }


def _estimates(record: dict[str, Any] | None) -> dict[str, Any]:
    """The estimate columns of a unit's record: the rung that chose the plan, its value, its error
    against the simulated step, the step estimate (empty and NaN without a record of them)."""
    est = (record or {}).get("estimates") or {}
    error = (record or {}).get("estimate_error")
    return {
        "chosen_by": str(est.get("chosen_by", "")),
        "chosen_estimate_s": float(est.get("chosen_estimate_s", NAN)),
        "estimate_error": NAN if error is None else float(error),
        "step_estimate_s": float(est.get("step_estimate_s", NAN)),
    }


def _measures(record: dict[str, Any] | None) -> dict[str, Any]:
    if record is None:
        return {
            "step_time_s": NAN,
            "oom": False,
            **{f"bd_{c}": NAN for c in BREAKDOWN_CATEGORIES},
            "planning_time_s": NAN,
            "load_over_lower_bound": NAN,
            **_estimates(None),
            "num_micro_batches": 0,
            "recompute_policy": "",
            "plan_hash": "",
        }
    step = record["step_time_s"]
    breakdown = record.get("breakdown_s") or {}
    ratio = record.get("load_over_lower_bound")
    return {
        "step_time_s": NAN if step is None else float(step),
        "oom": bool(record["oom"]),
        **{f"bd_{c}": float(breakdown[c]) if c in breakdown else NAN for c in BREAKDOWN_CATEGORIES},
        "planning_time_s": float(record["planning_time_s"]),
        "load_over_lower_bound": NAN if ratio is None else float(ratio),
        **_estimates(record),
        "num_micro_batches": int(record["num_micro_batches"]),
        "recompute_policy": str(record["recompute_policy"]),
        "plan_hash": str(record["plan_hash"]),
    }


def summarise(rows: list[dict[str, Any]], windows: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """One summary row per (point, planner) in row order (module docstring); with ``windows`` (the rows
    of :func:`build_windows`), each also has its window and window figures."""
    groups: dict[tuple[int, str], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["point"], r["planner"]), []).append(r)
    by_window: dict[tuple[int, str], list[dict[str, Any]]] = {}
    for w in windows or []:
        by_window.setdefault((w["point"], w["planner"]), []).append(w)
    out = []
    for (point, _), group in groups.items():
        first = group[0]
        base = {r["iteration"]: r["step_time_s"] for r in groups[(point, first["baseline"])]}
        ok = [r for r in group if math.isfinite(r["step_time_s"])]
        paired = [r for r in ok if math.isfinite(base.get(r["iteration"], NAN))]
        both = [(r["step_time_s"], base[r["iteration"]]) for r in paired]
        theirs = sum(b for _, b in both)
        norm = sum(a for a, _ in both) / theirs if both and theirs > 0 else NAN
        size = int(first.get("window", 1))  # windows: the spread is over windows (nspsim.compare.spread.per_window)
        ours_w, theirs_w = per_window(
            np.array([r["iteration"] for r in paired], dtype=np.int64),
            np.array([a for a, _ in both], dtype=float),
            np.array([b for _, b in both], dtype=float),
            size,
        )
        if size > 1:
            per_batch = [float(x) for x in ours_w / theirs_w if math.isfinite(x)] if theirs_w.size else []
        else:
            per_batch = [r["normalized"] for r in group if math.isfinite(r["normalized"])]
        ci = ratio_interval(ours_w, theirs_w) if theirs > 0 and ours_w.size else None
        out.append(
            {
                **{k: first[k] for k in ("point", "point_key", *WORKLOAD_TYPES, "planner", "baseline")},
                "batches": len(group),
                "ok_batches": len(ok),
                "mean_step_time_s": float(np.mean([r["step_time_s"] for r in ok])) if ok else NAN,
                "normalized": norm,
                "normalized_min": min(per_batch) if per_batch else NAN,
                "normalized_median": float(np.median(per_batch)) if per_batch else NAN,
                "normalized_max": max(per_batch) if per_batch else NAN,
                "normalized_ci_low": NAN if ci is None else ci[0],
                "normalized_ci_high": NAN if ci is None else ci[1],
                "speedup": 1.0 / norm if math.isfinite(norm) and norm > 0 else NAN,
                "oom_count": sum(bool(r["oom"]) for r in group),
                "failed": sum(bool(r["error"]) for r in group),
            }
        )
        if windows is not None:
            out[-1]["window"] = first["window"]
            out[-1].update(window_figures(group, by_window.get((point, first["planner"]), [])))
    return out


def resolved_config(plan: SweepPlan, source: str | None = None) -> dict[str, Any]:
    """What ``sweep.config.json`` holds: the spec, baseline, code versions and every point."""
    points = []
    for point in plan.points:
        chosen = swept_degrees(plan, point)
        best, note = chosen.get("static-best", (None, ""))
        paper = {}
        if "static-paper" in chosen:
            paper = {"static_paper_degree": chosen["static-paper"][0], "static_paper_note": chosen["static-paper"][1]}
        points.append(
            {
                "point": point.index,
                "point_key": point.key,
                "workload": workload_columns(point.config),
                "error": point.error,
                "static_best_degree": best,
                "static_best_note": note,
                **paper,
                **({"window": point.window} if plan.spec.windowed else {}),
            }
        )
    return {
        **plan.spec.to_dict(),
        "source": source,
        "baseline": plan.baseline,
        "code_versions": {"planner": plan.versions.planner, "simulator": plan.versions.simulator},
        "points": points,
    }


def write_results(
    out_dir: Path,
    rows: list[dict[str, Any]],
    summary: list[dict[str, Any]],
    config: dict[str, Any],
    windows: list[dict[str, Any]] | None = None,
) -> dict[str, Path]:
    """Write the results, the summary (Parquet and CSV), the resolved config and, with ``windows``
    (:func:`build_windows`), ``windows.parquet`` into ``out_dir`` (which the caller chose) as one set
    (:func:`nspsim.output_files.commit_files`: all or none replace the earlier ones); returns the paths
    by name. Without windows, a ``windows.parquet`` left by an earlier sweep into ``out_dir`` is removed."""
    config_text = dumps_json(config, what="sweep config", indent=2) + "\n"  # an unserialisable value fails first
    windowed = windows is not None
    results_table, summary_table = table(rows, row_schema(windowed)), table(summary, summary_schema(windowed))
    paths = {
        "results_path": out_dir / RESULTS_FILE,
        "summary_path": out_dir / SUMMARY_FILE,
        "summary_csv_path": out_dir / SUMMARY_CSV,
        "config_path": out_dir / CONFIG_FILE,
    }
    writers: dict[Path, Callable[[Path], object]] = {
        paths["results_path"]: lambda path: pq.write_table(results_table, path),
        paths["summary_path"]: lambda path: pq.write_table(summary_table, path),
        paths["summary_csv_path"]: lambda path: pd.DataFrame(summary_table.to_pandas()).to_csv(path, index=False),
        paths["config_path"]: lambda path: path.write_text(config_text),
    }
    if windows is not None:
        windows_table = table(windows, WINDOWS_SCHEMA)
        paths["windows_path"] = out_dir / WINDOWS_FILE
        writers[paths["windows_path"]] = lambda path: pq.write_table(windows_table, path)
    commit_files(writers)
    if windows is None:
        (out_dir / WINDOWS_FILE).unlink(missing_ok=True)  # an earlier sweep's windows are not these results'
    return paths
