"""``nspsim compare -o X.html`` writes ``X.results.parquet`` beside the report and its config (issue 24,
item 3): one row per planner and batch in a sweep's row schema, the numbers of the JSON records, and
written as one set with the other files (a failure leaves the earlier ones intact)."""

from __future__ import annotations

import errno
import json
import math
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.parquet as pq
import pytest

from nspsim.cli.main import main
from nspsim.records import BREAKDOWN_CATEGORIES
from nspsim.sweep.results import ROW_COLUMNS, ROW_SCHEMA

ARGS = ["compare", "--quiet", "--model", "tiny", "--cluster", "cpu", "--trace", "code", "--gpus", "4"]
ARGS += ["--tokens-per-batch", "64k", "--max-context", "64k", "--iters", "2", "--first-batch", "3"]
ARGS += ["--planners", "static-2,static-best,nsp", "--baseline", "static-2"]


def compared(report: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    assert main([*ARGS, "-o", str(report), "--json"]) == 0
    data: dict[str, Any] = json.loads(capsys.readouterr().out)
    return data


def test_the_rows_are_the_json_records_in_the_sweeps_schema(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = compared(tmp_path / "x.html", capsys)
    path = tmp_path / "x.results.parquet"
    assert pq.read_schema(path).remove_metadata() == ROW_SCHEMA
    rows = pd.read_parquet(path)
    assert tuple(rows.columns) == ROW_COLUMNS and len(rows) == len(data["iterations"]) == 6
    base = {r["iteration"]: r["step_time_s"] for r in data["iterations"] if r["planner"] == "static-2"}
    for row, record in zip(rows.to_dict("records"), data["iterations"]):
        for key in ("planner", "iteration", "batch_index", "step_time_s", "plan_hash", "oom", "num_micro_batches"):
            assert row[key] == record[key], key
        assert [row[f"bd_{c}"] for c in BREAKDOWN_CATEGORIES] == [
            record["breakdown_s"][c] for c in BREAKDOWN_CATEGORIES
        ]
        assert row["normalized"] == record["step_time_s"] / base[record["iteration"]]
        assert (row["baseline"], row["point"], row["error"], row["cached"]) == ("static-2", 0, "", False)
        assert (row["model"], row["gpus"], row["tokens_per_batch"]) == ("tiny", 4, 65536)
    batches = rows.drop_duplicates("batch_index")
    assert list(batches["batch_index"]) == [3, 4] and batches["batch_samples"].sum() == data["batches"]["kept_samples"]
    assert rows["point_key"].nunique() == 1 and math.isclose(
        rows.loc[rows.planner == "static-2", "normalized"].sum(), 2.0
    )
    by_planner = rows.groupby("planner", sort=False)["step_time_s"].mean()
    assert [by_planner[r["planner"]] for r in data["results"]] == [r["mean_step_time_s"] for r in data["results"]]


def test_a_failed_write_leaves_the_earlier_files_as_they_were(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    report = tmp_path / "x.html"
    compared(report, capsys)
    files = [report, tmp_path / "x.config.json", tmp_path / "x.results.parquet"]
    before = [f.read_bytes() for f in files]

    def full_disk(*_: object, **__: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(pq, "write_table", full_disk)
    assert main([*ARGS, "-o", str(report), "--mode", "serial"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("nspsim: error: -o ") and err.count("\n") == 1
    assert "x.results.parquet (No space left on device); the earlier files are unchanged" in err
    assert [f.read_bytes() for f in files] == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.config.json", "x.html", "x.results.parquet"]
