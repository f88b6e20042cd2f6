"""The window study (``nspsim_studies.windows_study``) end to end at a tiny size (the ``tiny`` model on 4
``cpu`` GPUs, 64K-token batches of ``code``, W in {1, 2}, 4 batches): it writes its table, figure, JSON
and resolved config; per-step NSP is 1 against itself; every ratio is the window rows' own quotient; the
floor is below per-step NSP's estimate; no window is slower than its per-step assignment; and its
command line rejects bad values in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

pytest.importorskip("plotly")
from nspsim_studies import windows_study  # noqa: E402

SPEC = """
[workload]
model = "tiny"
cluster = "cpu"
gpus = 4
tokens_per_batch = 65536
max_context = 32768
trace = "code"

[axes]
window = [1, 2]

[run]
planners = ["static-best", "nsp"]
iters = 4
"""


@pytest.fixture(scope="module")
def study(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("windows-study")
    (root / "spec.toml").write_text(SPEC)
    assert windows_study.main(["--spec", str(root / "spec.toml"), "-o", str(root / "out")]) == 0
    return root / "out"


def test_the_study_writes_its_table_figure_and_config(study: Path) -> None:
    for name in ("windows_study.md", "windows_study.html", "windows_study.json", "windows_study.config.json"):
        assert (study / name).stat().st_size > 0
    assert (study / "windows.parquet").exists() and (study / "results.parquet").exists()
    config = json.loads((study / "windows_study.config.json").read_text())
    assert config["iters"] == 4 and config["planners"] == ["static-best", "nsp"]
    assert "| tiny | 32K | code | 2 | nsp |" in (study / "windows_study.md").read_text()


def test_ratios_are_the_window_rows_quotients(study: Path) -> None:
    data = json.loads((study / "windows_study.json").read_text())
    windows = pd.DataFrame(data["windows"])
    summary = pd.DataFrame(data["summary"])
    nsp = summary[summary["planner"] == "nsp"].set_index("W")
    assert nsp.loc[1, "vs_nsp"] == 1.0 and nsp.loc[1, "vs_own"] == 1.0
    assert nsp.loc[2, "vs_nsp"] == nsp.loc[2, "vs_own"]  # per-step NSP is NSP's own per-step assignment
    rows = pd.read_parquet(study / "windows.parquet")
    for _, w in windows[windows["W"] == 2].iterrows():
        mine = rows[(rows["planner"] == w["planner"]) & (rows["first_batch"] == w["first_batch"])]
        nsp_row = rows[(rows["planner"] == "nsp") & (rows["first_batch"] == w["first_batch"])]
        assert w["vs_nsp"] == float(mine["window_time_s"].iloc[0]) / float(nsp_row["per_step_time_s"].iloc[0])
    assert (windows["floor_vs_nsp_estimate"] <= 1.0).all()
    assert data["slower_than_per_step"] == []  # window planning is never slower than per-step planning


def test_bad_command_lines_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "spec.toml").write_text(SPEC)
    for argv, message in (
        (["--iters", "3"], "--iters must be a positive multiple of every window [1, 2], got 3"),
        (["--jobs", "0"], "--jobs must be at least 1"),
        (["--max-context", "100k"], "--max-context 100k: the spec sweeps max contexts none"),
    ):
        with pytest.raises(SystemExit) as exit_info:
            windows_study.main(["--spec", str(tmp_path / "spec.toml"), *argv])
        assert exit_info.value.code == 2
        err = capsys.readouterr().err.strip()
        assert message in err and "\n" not in err


def test_tables_only_reanalyses_the_written_tables_to_the_same_figures(study: Path) -> None:
    before = (study / "windows_study.json").read_text()
    spec = study.parent / "spec.toml"
    assert windows_study.main(["--spec", str(spec), "-o", str(study), "--tables-only"]) == 0
    assert (study / "windows_study.json").read_text() == before
