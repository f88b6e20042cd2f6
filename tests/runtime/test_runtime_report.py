"""nspsim_runtime.report and nspsim_runtime.calibrate's command lines: one-line errors for bad, edited and
endless record files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from nspsim.records import BREAKDOWN_CATEGORIES


def _record(step: int, version: int = 3) -> dict:
    """A minimal step record as ``nspsim_runtime.report`` reads it (v2: without the dropped counts)."""
    rec = {
        "step": step,
        "planner_spec": "nsp",
        "planner": "nsp",
        "backend": "ulysses",
        "loss": 1.0,
        "step_time_s": 1.0 + step,
        "simulated_step_time_s": 0.5,
        "breakdown_s": dict.fromkeys(BREAKDOWN_CATEGORIES, (1.0 + step) / len(BREAKDOWN_CATEGORIES)),
        "schema_version": version,
    }
    return rec if version < 3 else {**rec, "dropped_samples": 1, "dropped_tokens": 600}


def test_report_skip_must_leave_a_step(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from nspsim_runtime.report import main as report

    two, one = tmp_path / "two.jsonl", tmp_path / "one.jsonl"
    two.write_text("".join(json.dumps(_record(s)) + "\n" for s in range(2)))
    one.write_text(json.dumps(_record(0, version=2)) + "\n")  # an old (v2) record still reads
    for argv, message in (
        (["--skip", "2", str(two)], f"{two} holds 2 step records: --skip 2 would leave none; use --skip 0..1"),
        (["--skip", "5", str(one)], f"{one} holds 1 step record: --skip 5 would leave none; use --skip 0..0"),
        (["--skip", "-1", str(two)], "argument --skip: must be >= 0"),
    ):
        with pytest.raises(SystemExit) as exit_info:
            report(argv)
        err = capsys.readouterr().err.splitlines()
        assert (
            exit_info.value.code == 2
            and len(err) == 1
            and err[0].startswith(f"nspsim_runtime.report: error: {message}")
        )
    report([str(two), str(one)])  # default: the warm-up step left out, none of a one-step file
    rows = [line.split() for line in capsys.readouterr().out.splitlines()[1:]]
    assert [(r[0], r[2], r[3]) for r in rows] == [("two", "1", "2.000"), ("one", "1", "1.000")]
    report(["--skip", "0", str(two)])
    assert capsys.readouterr().out.splitlines()[1].split()[2:4] == ["2", "1.500"]


def test_calibrate_has_a_command_line(capsys: pytest.CaptureFixture[str]) -> None:
    """``--help`` and bad flags end at once (they used to run the whole calibration)."""
    from nspsim_runtime.calibrate import main as calibrate

    with pytest.raises(SystemExit) as exit_info:
        calibrate(["--help"])
    assert exit_info.value.code == 0 and capsys.readouterr().out.startswith("usage: nspsim_runtime.calibrate")
    for argv in (["--bogus"], ["extra"]):
        with pytest.raises(SystemExit) as exit_info:
            calibrate(argv)
        err = capsys.readouterr().err.splitlines()
        assert exit_info.value.code == 2 and err == [
            f"nspsim_runtime.calibrate: error: unrecognized arguments: {argv[0]}"
        ]


def test_report_bad_input_ends_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from nspsim_runtime.report import main as report

    (tmp_path / "run.plans.jsonl").write_text('{"schema": "nspsim-plan", "planner": "nsp"}\n')
    (tmp_path / "other.jsonl").write_text('{"schema": "nspsim-plan", "planner": "nsp"}\n')
    (tmp_path / "empty.jsonl").write_text("\n")
    (tmp_path / "deep.jsonl").write_text("[" * 100_000 + "]" * 100_000 + "\n")
    (tmp_path / "binary.jsonl").write_bytes(b"\x00\xff\xfe")
    cases = {
        "x": ["--skip", "x", "a.jsonl"],
        "missing.jsonl": [str(tmp_path / "missing.jsonl")],
        "records line 1 is not a record (JSON nested too deeply)": [str(tmp_path / "deep.jsonl")],
        "binary.jsonl is not a text (JSONL) records file": [str(tmp_path / "binary.jsonl")],
        "only plans files given": [str(tmp_path / "run.plans.jsonl")],
        "not a nspsim_runtime.train step record (no 'step_time_s')": [str(tmp_path / "other.jsonl")],
        "holds no step records": [str(tmp_path / "empty.jsonl")],
    }
    for message, argv in cases.items():
        with pytest.raises(SystemExit) as exit_info:
            report(argv)
        err = capsys.readouterr().err.splitlines()
        assert exit_info.value.code == 2 and len(err) == 1 and err[0].startswith("nspsim_runtime.report: error:"), err
        assert message in err[0], err


def test_report_refuses_edited_figures(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A record whose times are not finite numbers >= 0 ends with one line naming the file, the record
    and the field (a string time was a traceback; a negative or NaN one a silently wrong mean), and a
    planner name from the file is printed escaped."""
    from nspsim_runtime.report import main as report

    good = _record(0)
    cases = {
        "step_time_s '3' is not a time in seconds": {**good, "step_time_s": "3"},
        "step_time_s -1.0 is not a time": {**good, "step_time_s": -1.0},
        "step_time_s nan is not a time": {**good, "step_time_s": float("nan")},
        "step_time_s True is not a time": {**good, "step_time_s": True},
        "simulated_step_time_s inf is not": {**good, "simulated_step_time_s": float("inf")},
        "breakdown_s.attn_fwd 'x' is not a time": {**good, "breakdown_s": {**good["breakdown_s"], "attn_fwd": "x"}},
        "breakdown_s is list": {**good, "breakdown_s": []},
        "planner is not a string": {**good, "planner": 5},
    }
    for message, rec in cases.items():
        path = tmp_path / "edited.jsonl"
        path.write_text(json.dumps(good) + "\n" + json.dumps(rec) + "\n")
        with pytest.raises(SystemExit) as exit_info:
            report(["--skip", "0", str(path)])
        err = capsys.readouterr().err.splitlines()
        assert exit_info.value.code == 2 and len(err) == 1, err
        assert err[0].startswith(f"nspsim_runtime.report: error: {path} record 2: {message}"), err
    path = tmp_path / "evil.jsonl"
    path.write_text(json.dumps({**good, "planner_spec": "nsp\x1b[2J"}) + "\n")
    report(["--skip", "0", str(path)])
    out = capsys.readouterr().out
    assert "\x1b" not in out and "nsp\\x1b[2J" in out


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_report_refuses_files_that_never_end(tmp_path: Path) -> None:
    """A FIFO nothing writes to, a character device and a directory end with one line at once (the
    report used to block forever on the first two)."""
    fifo = tmp_path / "run.jsonl"
    os.mkfifo(fifo)
    (tmp_path / "dir.jsonl").mkdir()
    cases = {
        str(fifo): "is a pipe with nothing written to it",
        "/dev/zero": "is not a regular file or a pipe",
        str(tmp_path / "dir.jsonl"): "is a directory",
    }
    for path, message in cases.items():
        done = subprocess.run(
            [sys.executable, "-m", "nspsim_runtime.report", path], capture_output=True, text=True, timeout=60
        )
        err = done.stderr.splitlines()
        assert done.returncode == 2 and len(err) == 1 and err[0].startswith("nspsim_runtime.report: error:"), err
        assert message in err[0], err


def test_a_record_older_than_the_expert_all_to_all_category_reads_with_it_as_zero(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Records written before ``ep_exposed_comm`` existed filed the expert all-to-all under ``other``:
    the report reads them with the new category at 0 and every other category as written."""
    from nspsim_runtime.report import load_step_records

    old = _record(0)
    old["breakdown_s"] = {k: v for k, v in old["breakdown_s"].items() if k != "ep_exposed_comm"}
    path = tmp_path / "old.jsonl"
    path.write_text(json.dumps(old) + "\n")
    (read,) = load_step_records(str(path))
    assert tuple(read["breakdown_s"]) == BREAKDOWN_CATEGORIES and read["breakdown_s"]["ep_exposed_comm"] == 0.0
    assert {k: v for k, v in read["breakdown_s"].items() if k != "ep_exposed_comm"} == old["breakdown_s"]
    del old["breakdown_s"]["comm_wait"]  # any other missing category is still an error
    path.write_text(json.dumps(old) + "\n")
    with pytest.raises(ValueError, match="breakdown_s.comm_wait None is not a time"):
        load_step_records(str(path))
