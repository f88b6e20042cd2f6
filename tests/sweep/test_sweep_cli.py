"""nspsim sweep's command line: the files it writes next to the resolved config, a warm rerun from the
cache, and one-line errors."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.parquet as pq
import pytest

from nspsim.cli.main import main
from nspsim.sweep.results import ROW_COLUMNS, SUMMARY_SCHEMA


def test_cli_writes_the_files_and_reruns_from_cache(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "s.toml"
    spec.write_text(
        "[workload]\nmodel = 'tiny'\ncluster = 'cpu'\ntrace = 'code'\ntokens_per_batch = '64k'\n"
        "max_context = '32k'\n[axes]\ngpus = [2, 4]\n[run]\nplanners = ['static-best', 'nsp']\niters = 2\n"
    )
    out = tmp_path / "out"
    assert main(["sweep", str(spec), "-o", str(out), "--jobs", "1", "--json"]) == 0
    printed, err = capsys.readouterr()
    data = json.loads(printed)
    tables = ", ".join(str(out / name) for name in ("results.parquet", "summary.parquet", "summary.csv"))
    wrote = [line for line in err.splitlines() if line.startswith("nspsim: wrote")]
    assert wrote == [f"nspsim: wrote {tables}, {out / 'sweep.config.json'}", f"nspsim: wrote {out / 'report.html'}"]
    assert (data["points"], data["rows"], data["failed"], data["cached"]) == (2, 8, 0, 0)
    assert (
        data["computed"] == data["units"] == (2 + 2 * 2) + (2 + 3 * 2)
    )  # nsp and SP2, SP1 / SP4, SP2, SP1 on 2 batches
    results = pq.read_table(data["results_path"])
    assert tuple(results.column_names) == ROW_COLUMNS and results.num_rows == 8
    assert str(results.schema.field("profile").type) == "string" and str(results.schema.field("spmax").type) == "int64"
    summary = pd.read_parquet(data["summary_path"])
    assert list(summary.columns) == SUMMARY_SCHEMA.names and len(summary) == 4
    assert len(pd.read_csv(out / "summary.csv")) == 4
    config = json.loads(Path(data["config_path"]).read_text())
    assert config["axes"] == {"gpus": [2, 4]} and [p["static_best_degree"] for p in config["points"]] == [2, 4]
    assert main(["sweep", str(spec), "-o", str(out), "--json"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert (again["computed"], again["cached"]) == (0, data["units"])
    assert main(["sweep", str(spec), "-o", str(out), "--jobs", "1"]) == 0
    text = capsys.readouterr().out
    assert "2 point(s), 8 rows; units: 0 computed, 14 cached, 0 failed" in text


def test_cli_bad_input_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: Any) -> None:
    spec = tmp_path / "s.toml"
    spec.write_text("[workload]\nmodel = 'tiny'\n[axes]\ngpus = []\n")
    cases = [
        (["sweep", str(tmp_path / "none.toml")], "No such file or directory"),
        (["sweep", str(spec)], "[axes] gpus: an axis needs at least one value"),
        (["sweep", str(spec), "--jobs", "0"], "--jobs: must be positive"),
        (["sweep", str(spec), "--engine", "dask"], "invalid choice: 'dask'"),
    ]
    spec_ok = tmp_path / "ok.toml"
    spec_ok.write_text("[workload]\nmodel = 'tiny'\ncluster = 'cpu'\n")
    (tmp_path / "file").write_text("")
    cases.append((["sweep", str(spec_ok), "-o", str(tmp_path / "file")], "exists and is not a folder"))
    for argv, message in cases:
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith("nspsim: error: ") and message in err and err.count("\n") == 1, err
    monkeypatch.setitem(sys.modules, "ray", None)  # as if the distributed extra were not installed
    assert main(["sweep", str(spec_ok), "--engine", "ray", "-o", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "pip install 'nspsim[distributed]'" in err and err.count("\n") == 1
