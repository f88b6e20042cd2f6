"""How a sweep fails: grid points that cannot be built, a worker killed mid-sweep, the driver killed,
cache records that cannot be trusted, result files that are not what they claim."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

import sweep_workers
from nspsim.cli.main import main
from nspsim.sweep import Cache, load_spec, plan_sweep
from nspsim.sweep.cache import record_problem
from nspsim.sweep.engine import WORKER_DIED, _pool

SPEC = (
    "[workload]\nmodel = 'tiny'\ncluster = 'cpu'\ntrace = 'code'\ntokens_per_batch = '64k'\n"
    "max_context = '32k'\n[axes]\ngpus = [2, 4]\n[run]\nplanners = ['static', 'nsp']\niters = 2\n"
)


def write_spec(tmp_path: Path, text: str = SPEC) -> Path:
    path = tmp_path / "s.toml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("cluster", ["cpu", "FILE"])
def test_a_point_that_cannot_be_built_fails_the_sweep(
    cluster: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """12 ranks are no whole number of 8-rank hosts: that point fails, the other is written (a cluster
    file's point used to end the whole sweep, from computing its cache key)."""
    hosts = tmp_path / "hosts-of-8.toml"
    hosts.write_text('extends = "cpu"\nname = "eight"\n')
    text = SPEC.replace("gpus = [2, 4]", "gpus = [8, 12]").replace(
        "'cpu'", repr(str(hosts) if cluster == "FILE" else "cpu")
    )
    spec = write_spec(tmp_path, text)
    assert main(["sweep", str(spec), "-o", str(tmp_path / "o"), "--jobs", "1", "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["failed_points"] == 1 and Path(data["results_path"]).is_file()  # the rest still written


def test_a_killed_worker_fails_its_units_and_the_sweep_keeps_the_rest(tmp_path: Path) -> None:
    plan = plan_sweep(load_spec(str(write_spec(tmp_path))), Cache(tmp_path / "cache"))
    outcomes = {o.sim_key: o for o in _pool(plan.tasks, 2, sweep_workers.killed_on_batch_1)}
    assert set(outcomes) == {t.sim_key for t in plan.tasks}
    for task in plan.tasks:  # only the units that kill their own worker fail; every other one ran
        outcome = outcomes[task.sim_key]
        assert (outcome.error == WORKER_DIED) == (task.batch_index == 1)
        assert (outcome.record is None) == (task.batch_index == 1)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="parent-death signal is Linux's (prctl)")
def test_killing_the_driver_leaves_no_worker_holding_its_pipes(tmp_path: Path) -> None:
    long = SPEC.replace("iters = 2", "iters = 1000").replace("['static', 'nsp']", "['flexsp', 'nsp', 'basp']")
    proc = subprocess.Popen(
        [sys.executable, "-m", "nspsim", "sweep", str(write_spec(tmp_path, long)), "-o", str(tmp_path / "o")]
        + ["--jobs", "2", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    time.sleep(5)  # the forkserver and both workers are running units by now (the sweep takes minutes)
    assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
    os.kill(proc.pid, signal.SIGKILL)
    started = time.monotonic()
    proc.communicate(timeout=60)  # returns once every holder of the pipes (each worker) has gone
    assert time.monotonic() - started < 15


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"oom": "no"}, "'oom' is 'no'"),
        ({"step_time_s": "3.2"}, "'step_time_s' is '3.2', not a finite number"),
        ({"step_time_s": -1.0}, "not a finite number >= 0"),
        ({"planning_time_s": float("nan")}, "'planning_time_s' is nan"),
        ({"breakdown_s": {"attn_fwd": float("inf")}}, "breakdown_s"),
        ({"num_micro_batches": 1.5}, "not a count"),
        ({"plan_hash": None}, "must be text"),
        ({"oom": True}, "out of memory means no step time"),
        ({"step_time_s": 0.0}, "out of memory means no step time"),
        ({"step_time_s": None}, "out of memory means no step time"),
    ],
)
def test_a_cache_record_that_cannot_be_trusted_is_recomputed_and_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], change: dict, problem: str
) -> None:
    spec, out = write_spec(tmp_path), tmp_path / "o"
    assert main(["sweep", str(spec), "-o", str(out), "--jobs", "1", "--json"]) == 0
    first = json.loads(capsys.readouterr().out)
    victim = sorted((out / "cache" / "sims").rglob("*.json"))[0]
    data = json.loads(victim.read_text())
    assert record_problem(data["record"]) is None
    data["record"] = {**data["record"], **change}
    assert problem in str(record_problem(data["record"]))
    victim.write_text(json.dumps(data))
    assert main(["sweep", str(spec), "-o", str(out), "--jobs", "1", "--json"]) == 0
    captured = capsys.readouterr()
    again = json.loads(captured.out)
    assert again["computed"] == 1 and again["cached"] == first["units"] - 1
    assert "1 cache record(s) could not be used and were recomputed" in captured.err and victim.name in captured.err
    assert record_problem(json.loads(victim.read_text())["record"]) is None  # rewritten whole


def test_plot_refuses_results_whose_numbers_are_text(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec, out = write_spec(tmp_path), tmp_path / "o"
    assert main(["sweep", str(spec), "-o", str(out), "--jobs", "1", "--json"]) == 0
    capsys.readouterr()
    rows = pd.read_parquet(out / "results.parquet")
    rows["step_time_s"] = rows["step_time_s"].astype(str)
    rows.to_parquet(out / "results.parquet")
    assert main(["plot", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "column 'step_time_s' holds" in err[0] and "values, not numbers" in err[0]


@pytest.mark.parametrize(
    ("setup", "argv", "message"),
    [
        ("empty", [], "empty; a spec names at least one of the tables"),
        ("fifo", [], "is a pipe with nothing written to it"),
        ("spec", ["--jobs", "100000"], "--jobs 100000: at most"),
        ("other-folder", [], "holds other files and no sweep"),
        ("cache-only", [], "holds other files and no sweep"),
    ],
)
def test_low_findings_are_one_line_and_write_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], setup: str, argv: list[str], message: str
) -> None:
    spec, out = tmp_path / "s.toml", tmp_path / "o"
    if setup == "empty":
        spec.write_text("")
    elif setup == "fifo":
        os.mkfifo(spec)
    else:
        spec.write_text(SPEC)
    if setup in ("other-folder", "cache-only"):
        out.mkdir()
        (out / "notes.txt").write_text("mine")
        if setup == "cache-only":  # a folder of the user's own that happens to have a cache/ (not a sweep's)
            (out / "cache" / "pip").mkdir(parents=True)
    assert main(["sweep", str(spec), "-o", str(out), "--jobs", "1", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]
    assert not out.exists() or sorted(p.name for p in out.iterdir()) in (["notes.txt"], ["cache", "notes.txt"])


def test_plot_does_not_overwrite_an_unrelated_config_beside_its_page(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec, out = write_spec(tmp_path), tmp_path / "o"
    assert main(["sweep", str(spec), "-o", str(out), "--jobs", "1", "--json"]) == 0
    mine = tmp_path / "page.config.json"
    mine.write_text('{"mine": 1}')
    assert main(["plot", str(out), "-o", str(tmp_path / "page.html")]) == 2
    assert "is not the config of an earlier plot" in capsys.readouterr().err and mine.read_text() == '{"mine": 1}'
    mine.unlink()
    assert main(["plot", str(out), "-o", str(tmp_path / "page.html")]) == 0
    assert main(["plot", str(out), "-o", str(tmp_path / "page.html")]) == 0  # its own config: rewritten


def test_a_cache_file_nested_too_deep_is_recomputed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec, out = write_spec(tmp_path), tmp_path / "o"
    assert main(["sweep", str(spec), "-o", str(out), "--jobs", "1", "--json"]) == 0
    capsys.readouterr()
    victim = sorted((out / "cache" / "sims").rglob("*.json"))[0]
    victim.write_text("[" * 100_000 + "]" * 100_000)
    assert main(["sweep", str(spec), "-o", str(out), "--jobs", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["computed"] == 1 and json.loads(victim.read_text())["record"]


def test_plot_refuses_duplicated_rows_and_negative_times(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec, out = write_spec(tmp_path), tmp_path / "o"
    assert main(["sweep", str(spec), "-o", str(out), "--jobs", "1", "--json"]) == 0
    capsys.readouterr()
    rows = pd.read_parquet(out / "results.parquet")
    pd.concat([rows, rows.iloc[:1]]).to_parquet(out / "results.parquet")
    assert main(["plot", str(out)]) == 2
    assert "appears twice" in capsys.readouterr().err
    rows.assign(step_time_s=-rows["step_time_s"]).to_parquet(out / "results.parquet")
    assert main(["plot", str(out)]) == 2
    assert "negative or infinite values" in capsys.readouterr().err
    rows.assign(bd_attn_fwd=-5.0).to_parquet(out / "results.parquet")
    assert main(["plot", str(out)]) == 2
    assert "'bd_attn_fwd' holds negative or infinite values" in capsys.readouterr().err
    rows.assign(step_time_s=float("nan")).to_parquet(out / "results.parquet")
    assert main(["plot", str(out)]) == 2
    assert "no step time, no out-of-memory and no error" in capsys.readouterr().err


def test_spec_values_are_printed_escaped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A trace path holding an escape sequence is shown as ``\\x1b`` in the summary's axes column and in the
    warning of a point that cannot be built; raw, it coloured the terminal (issue 25, low)."""
    found = tmp_path / "a\x1b[31mred.txt"
    found.write_text("\n".join(["4096"] * 32))
    traces = [str(found), str(tmp_path / "b\x1b[2Jgone.txt")]
    axis = f"trace = {json.dumps(traces)}"  # TOML basic strings: \u001b is the escape character
    spec = write_spec(tmp_path, SPEC.replace("trace = 'code'", "gpus = 2").replace("gpus = [2, 4]", axis))
    assert main(["sweep", str(spec), "-o", str(tmp_path / "o"), "--jobs", "1"]) == 1  # the missing trace's point
    out, err = capsys.readouterr()
    assert "\x1b" not in out + err
    assert "a\\x1b[31mred.txt" in out and "point 1 (trace=" in err and "b\\x1b[2Jgone.txt" in err
