"""The sweep's table schemas: rows (``results.parquet``), summary (``summary.parquet``) and, with
gradient-accumulation windows, per-window rows (``windows.parquet``), as explicit Arrow schemas.

Explicit types (not inferred from the rows) so an all-null column (``profile``) still has its type in
every reader (pandas, polars, DuckDB). A sweep with windows (some point's window W > 1) adds one column,
``window`` (W), to its rows and summary, placed before ``planner``, and the summary's window figures at
its end (:func:`row_schema`, :func:`summary_schema`); a sweep without windows writes the schemas it
wrote before windows existed, column for column. Trade-off: two schemas per table rather than a
``window`` column that is always 1, so that files (and caches of derived tables) of sweeps without
windows stay byte-compatible, at the price of readers checking for the column.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from nspsim.records import BREAKDOWN_CATEGORIES
from nspsim.workload import WorkloadConfig

NAN = float("nan")
WORKLOAD_TYPES: dict[str, pa.DataType] = {
    "trace": pa.string(),
    "model": pa.string(),
    "cluster": pa.string(),
    "gpus": pa.int64(),
    "tokens_per_batch": pa.int64(),
    "max_context": pa.int64(),
    "seed": pa.int64(),
    "backend": pa.string(),
    "profile": pa.string(),
    "token_budget": pa.int64(),
    "spmax": pa.int64(),
    "training": pa.string(),
    "checkpointing": pa.string(),
    "attention_kernel": pa.string(),
    "fused_elementwise": pa.bool_(),
    "expert_parallel": pa.int64(),
    "optimizer_offload": pa.bool_(),
    "fsdp_prefetch_layers": pa.int64(),
}
ROW_SCHEMA = pa.schema(
    [
        ("point", pa.int64()),
        ("point_key", pa.string()),
        *WORKLOAD_TYPES.items(),
        ("planner", pa.string()),
        ("baseline", pa.string()),
        ("iteration", pa.int64()),
        ("batch_index", pa.int64()),
        ("step_time_s", pa.float64()),
        ("normalized", pa.float64()),
        ("oom", pa.bool_()),
        ("error", pa.string()),
        *((f"bd_{c}", pa.float64()) for c in BREAKDOWN_CATEGORIES),
        ("planning_time_s", pa.float64()),
        ("load_over_lower_bound", pa.float64()),
        ("chosen_by", pa.string()),
        ("chosen_estimate_s", pa.float64()),
        ("estimate_error", pa.float64()),
        ("step_estimate_s", pa.float64()),
        ("num_micro_batches", pa.int64()),
        ("recompute_policy", pa.string()),
        ("plan_hash", pa.string()),
        ("batch_samples", pa.int64()),
        ("batch_tokens", pa.int64()),
        ("share_over_128k", pa.float64()),
        ("dropped_samples", pa.int64()),
        ("dropped_tokens", pa.int64()),
        ("cached", pa.bool_()),
    ]
)
ROW_COLUMNS = tuple(ROW_SCHEMA.names)
SUMMARY_SCHEMA = pa.schema(
    [
        ("point", pa.int64()),
        ("point_key", pa.string()),
        *WORKLOAD_TYPES.items(),
        ("planner", pa.string()),
        ("baseline", pa.string()),
        ("batches", pa.int64()),
        ("ok_batches", pa.int64()),
        ("mean_step_time_s", pa.float64()),
        ("normalized", pa.float64()),
        ("normalized_min", pa.float64()),
        ("normalized_median", pa.float64()),
        ("normalized_max", pa.float64()),
        ("normalized_ci_low", pa.float64()),
        ("normalized_ci_high", pa.float64()),
        ("speedup", pa.float64()),
        ("oom_count", pa.int64()),
        ("failed", pa.int64()),
    ]
)
RESULTS_FILE, SUMMARY_FILE, SUMMARY_CSV, CONFIG_FILE = (
    "results.parquet",
    "summary.parquet",
    "summary.csv",
    "sweep.config.json",
)


WINDOWS_FILE = "windows.parquet"
WINDOW_FIELD = pa.field("window", pa.int64())
WINDOW_SUMMARY_FIELDS = [
    ("windows", pa.int64()),
    ("mean_window_time_s", pa.float64()),
    ("time_per_token_s", pa.float64()),
    ("window_over_per_step", pa.float64()),
    ("windows_rearranged", pa.int64()),
]
WINDOWS_SCHEMA = pa.schema(
    [
        ("point", pa.int64()),
        ("point_key", pa.string()),
        *WORKLOAD_TYPES.items(),
        WINDOW_FIELD,
        ("planner", pa.string()),
        ("window_index", pa.int64()),
        ("first_batch", pa.int64()),
        ("passes", pa.int64()),
        ("candidate", pa.string()),
        ("moved_samples", pa.int64()),
        ("tokens", pa.int64()),
        ("window_time_s", pa.float64()),
        ("per_step_time_s", pa.float64()),
        ("window_over_per_step", pa.float64()),
        ("time_per_token_s", pa.float64()),
        ("planning_time_s", pa.float64()),
        ("window_hash", pa.string()),
        ("error", pa.string()),
        ("cached", pa.bool_()),
    ]
)
"""One row per (point, planner, window) of the points with W > 1: :class:`nspsim.compare.windows.WindowRecord`'s
figures, ``window`` the window size W and ``window_index`` which window of the point."""


def _with_window(schema: pa.Schema) -> pa.Schema:
    return schema.insert(schema.get_field_index("planner"), WINDOW_FIELD)


def row_schema(windowed: bool = False) -> pa.Schema:
    """The rows' schema: :data:`ROW_SCHEMA`, with the ``window`` column for a sweep with windows."""
    return _with_window(ROW_SCHEMA) if windowed else ROW_SCHEMA


def summary_schema(windowed: bool = False) -> pa.Schema:
    """The summary's schema: :data:`SUMMARY_SCHEMA`, with ``window`` and the window figures for a sweep
    with windows."""
    if not windowed:
        return SUMMARY_SCHEMA
    schema = _with_window(SUMMARY_SCHEMA)
    for name, kind in WINDOW_SUMMARY_FIELDS:
        schema = schema.append(pa.field(name, kind))
    return schema


def workload_columns(config: WorkloadConfig) -> dict[str, Any]:
    """The workload fields of a row (string enums as their strings; unset training settings ``None``)."""
    data = config.to_dict()
    for key in ("backend", "checkpointing", "attention_kernel"):
        if data[key] is not None:
            data[key] = str(data[key])
    return data


def table(rows: list[dict[str, Any]], schema: pa.Schema) -> pa.Table:
    """``rows`` as an Arrow table of ``schema`` (column order and types exactly)."""
    return pa.Table.from_pylist(rows, schema=schema)
