"""``nspsim plot``: a constructed sweep directory is drawn to ``DIR/report.html`` (or ``-o``, with the
sweep's config beside it), and every bad input is one line and exit status 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nspsim.cli.commands.plot import write_report
from nspsim.cli.main import main

pytest.importorskip("plotly")
from test_sweep_report import frames  # noqa: E402


def sweep_dir(tmp_path: Path, summary_csv: bool = False) -> Path:
    """A directory laid out as ``nspsim sweep -o DIR`` writes it, from the constructed frames."""
    results, summary, config = frames()
    out = tmp_path / "sw"
    out.mkdir()
    results.to_parquet(out / "results.parquet")
    if summary_csv:
        summary.to_csv(out / "summary.csv", index=False)
    else:
        summary.to_parquet(out / "summary.parquet")
    (out / "sweep.config.json").write_text(json.dumps(config))
    return out


def error_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("nspsim: error: "), err
    return err[0]


def test_plot_writes_dir_report_and_reports_counts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = sweep_dir(tmp_path)
    assert main(["plot", str(out), "--json"]) == 0
    printed, err = capsys.readouterr()
    data = json.loads(printed)
    assert err.splitlines() == [f"nspsim: wrote {out / 'report.html'}"]
    assert data["report_path"] == str(out / "report.html") and (out / "report.html").read_text().startswith("<!DOC")
    assert (data["points"], data["rows"], data["batches"], data["failed"]) == (2, 14, 7, 0)
    assert not (out / "report.config.json").exists()  # the sweep's own config is beside it


def test_plot_of_the_parquet_file_elsewhere_writes_the_config_beside(tmp_path: Path) -> None:
    out = sweep_dir(tmp_path, summary_csv=True)
    target = tmp_path / "elsewhere" / "r.html"
    assert main(["plot", str(out / "results.parquet"), "-o", str(target)]) == 0
    assert target.is_file()
    config = json.loads(target.with_suffix(".config.json").read_text())
    assert config["axes"] == {"gpus": [16, 64]} and config["results_path"] == str(out / "results.parquet")


def test_write_report_is_what_sweep_calls(tmp_path: Path) -> None:
    out = sweep_dir(tmp_path)
    assert write_report(out) == out / "report.html" and (out / "report.html").stat().st_size > 1_000_000


@pytest.mark.parametrize(
    "case, message",
    [
        ("missing", "does not exist; give a sweep directory"),
        ("empty-dir", "is not a sweep directory: it has no results.parquet"),
        ("corrupt", "is not a readable Parquet file"),
        ("no-config", "is not a sweep directory: it has no sweep.config.json"),
        ("bad-config", "sweep.config.json line 1: invalid JSON"),
        ("no-summary", "it has neither summary.parquet nor summary.csv"),
        ("columns", "is not a sweep's results: it lacks the column(s) normalized"),
        ("not-html", "must end with .html"),
    ],
)
def test_bad_input_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str, message: str) -> None:
    out = sweep_dir(tmp_path)
    args = ["plot", str(out)]
    if case == "missing":
        args = ["plot", str(tmp_path / "nope")]
    elif case == "empty-dir":
        (tmp_path / "empty").mkdir()
        args = ["plot", str(tmp_path / "empty")]
    elif case == "corrupt":
        (out / "results.parquet").write_bytes(b"PAR1 this is not parquet")
    elif case == "no-config":
        (out / "sweep.config.json").unlink()
    elif case == "bad-config":
        (out / "sweep.config.json").write_text("{not json")
    elif case == "no-summary":
        (out / "summary.parquet").unlink()
    elif case == "columns":
        import pandas as pd

        pd.read_parquet(out / "results.parquet").drop(columns=["normalized"]).to_parquet(out / "results.parquet")
    elif case == "not-html":
        args += ["-o", str(tmp_path / "report.txt")]
    assert main(args) == 2
    assert message in error_line(capsys)
    assert not (out / "report.html").exists()
