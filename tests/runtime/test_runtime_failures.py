"""Failures end every rank with a clear error within a bounded time, never a hang."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import rt_workers

from helpers import make_batch
from nspsim.plan import make_plan
from nspsim.sp_tree import Node
from nspsim.specs.clusters import get_cluster
from nspsim.specs.model import get_model
from nspsim_runtime.launch import spawn_ranks
from nspsim_runtime.records import read_records

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]
COMM_TIMEOUT_S = 20.0
ROOT = Path(__file__).resolve().parents[2]
TRAIN = ["--trace", "longtail-paper", "--model", "tiny", "--tokens-per-batch", "1k", "--max-context", "512"]


def _plan(lengths: list[int], nodes: list[Node], world: int):
    return make_plan(
        planner="hand",
        cluster=get_cluster("cpu", world),
        model=get_model("tiny"),
        batch=make_batch(lengths),
        spmax=world,
        token_budget=10**6,
        nodes=nodes,
    )


def test_a_plan_hash_mismatch_stops_every_rank_before_any_sp_collective() -> None:
    a = _plan([30, 7, 12, 5], [Node(4, 0), Node(1, 1), Node(2, 1), Node(1, 0)], 4)
    b = _plan([30, 7, 12, 5], [Node(2, 0), Node(1, 1), Node(2, 1), Node(1, 0)], 4)
    outcomes = spawn_ranks(
        rt_workers.mismatched_plans,
        4,
        [a.to_json(), b.to_json(), a.to_json(), a.to_json()],
        timeout_s=90,
        comm_timeout_s=COMM_TIMEOUT_S,
    )
    for o in outcomes:
        assert o.status == "error", o
        first = o.error.splitlines()[0]
        # the rank is the entry point's to add ("nspsim_runtime.train: rank R: error: ..."), not the message's
        assert first.startswith("PlanMismatchError: ranks hold different plans") and "ranks [1] hold" in first, first
        assert b.content_hash in first and a.content_hash in first
        assert o.elapsed_s < COMM_TIMEOUT_S


def test_a_rank_dying_mid_step_makes_every_other_rank_fail_fast() -> None:
    plan = _plan([40, 9, 17, 6, 3], [Node(4, 0), Node(2, 0), Node(2, 1), Node(1, 1), Node(1, 3)], 4)
    outcomes = spawn_ranks(
        rt_workers.dies_mid_step,
        4,
        (plan.to_json(), 2),
        timeout_s=90,
        comm_timeout_s=COMM_TIMEOUT_S,
        grace_s=COMM_TIMEOUT_S + 15,
    )
    assert outcomes[2].status == "died" and outcomes[2].exitcode == 17
    for o in outcomes[:2] + outcomes[3:]:
        assert o.status == "error", o
        assert o.elapsed_s < COMM_TIMEOUT_S + 10, o
        first = o.error.splitlines()[0]
        assert first.startswith("PeerFailure: the step failed at") and "a peer rank died or stalled" in first, first
        assert any(w in first for w in ("Connection closed", "Connection reset")), first


def test_a_stuck_rank_is_ended_by_its_watchdog_and_its_peers_by_the_group_timeout() -> None:
    plan = _plan([40, 9, 17, 6, 3], [Node(4, 0), Node(2, 0), Node(2, 1), Node(1, 1), Node(1, 3)], 4)
    comm_timeout, watchdog = 4.0, 8.0
    outcomes = spawn_ranks(
        rt_workers.stalls_mid_step,
        4,
        (plan.to_json(), 1, watchdog),
        timeout_s=90,
        comm_timeout_s=comm_timeout,
        grace_s=watchdog + 10,
    )
    assert outcomes[1].status == "died" and outcomes[1].exitcode == 3  # nspsim_runtime.watchdog.EXIT_CODE
    for o in outcomes[:1] + outcomes[2:]:
        assert o.status == "error", o
        assert comm_timeout * 0.5 < o.elapsed_s < comm_timeout + 10, o
        first = o.error.splitlines()[0]
        # A peer that reaches the collective late may see the stuck rank's exit before its own timeout.
        assert first.startswith("PeerFailure: the step failed at") and any(
            w in first for w in ("Timed out", "Connection closed", "Connection reset")
        ), first


def test_a_rank_0_failing_while_planning_ends_its_peers_with_one_line_naming_it() -> None:
    """Rank 0 cannot plan batch 0 (a sample too long for degree 1 at this budget); rank 1, waiting
    for the plan in the broadcast, says that rank 0 ended, not gloo's "Connection reset by peer"."""
    argv = ["--planner", "static:degree=1", *TRAIN, "--token-budget", "100", "--steps", "1"]
    outcomes = spawn_ranks(rt_workers.train_runs, 2, [argv], timeout_s=90, comm_timeout_s=COMM_TIMEOUT_S)
    assert outcomes[0].status == "error" and "fits no admissible SP group" in outcomes[0].error.splitlines()[0]
    first = outcomes[1].error.splitlines()[0]
    assert outcomes[1].status == "error" and first.startswith(
        "PeerFailure: rank 0 ended during the exchange of the plan"
    )
    assert "failed while planning" in first and not any(w in first for w in ("Connection", "gloo", "pair.cc")), first
    assert outcomes[1].elapsed_s < COMM_TIMEOUT_S  # the peer's exit, not the timeout, ended it


def _torchrun(args: list[str], **kw: object) -> subprocess.Popen[str]:
    """``python -m nspsim_runtime.run --standalone --nproc-per-node 2 -m nspsim_runtime.train ARGS`` (torchrun, as the
    README launches it) in its own session (as a terminal starts it: Ctrl-C reaches torchrun, which
    forwards it to its ranks)."""
    cmd = [sys.executable, "-m", "nspsim_runtime.run", "--standalone", "--nproc-per-node", "2"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.Popen(
        [*cmd, "-m", "nspsim_runtime.train", *args], cwd=ROOT, env=env, text=True, start_new_session=True, **kw
    )  # type: ignore[call-overload]


def _finish(proc: subprocess.Popen[str], timeout: float) -> None:
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        pytest.fail(f"torchrun did not end within {timeout} s")


@pytest.mark.timeout(240)
def test_ctrl_c_ends_every_rank_with_one_line_and_keeps_the_finished_steps(tmp_path: Path) -> None:
    records, err = tmp_path / "run.jsonl", tmp_path / "stderr.txt"
    args = ["--planner", "nsp", *TRAIN, "--steps", "500", "--records", str(records)]
    with err.open("w") as stderr:
        proc = _torchrun(args, stdout=subprocess.PIPE, stderr=stderr)
    try:
        assert proc.stdout is not None
        for line in proc.stdout:  # wait until two steps are recorded
            if line.startswith("step 1 "):
                break
        else:
            pytest.fail(f"the run ended before its second step:\n{err.read_text()[-3000:]}")
        proc.send_signal(signal.SIGINT)  # what a terminal's Ctrl-C delivers to torchrun
        proc.stdout.close()
    finally:
        _finish(proc, timeout=60)
    lines = [line for line in err.read_text().splitlines() if not line.startswith("nspsim_runtime.train: warning: ")]
    ranks = sorted(line for line in lines if line.startswith(("nspsim_runtime.train", "[rank")))
    assert ranks == ["nspsim_runtime.train: rank 0: interrupted", "nspsim_runtime.train: rank 1: interrupted"], lines
    assert len(lines) == 3 and lines[-1] == "nspsim_runtime.run: stopped by SIGINT; every rank was stopped", lines
    assert proc.returncode == 130
    assert not records.exists()  # an interrupted run replaces nothing ...
    partial = read_records(Path(f"{records}.partial").read_text())  # ... and keeps its finished steps
    assert [r["step"] for r in partial[:2]] == [0, 1]


ORPHAN = """
import ctypes, os, subprocess, sys, time
ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER: orphans come here
rank = (
    "import time; from nspsim_runtime.watchdog import Watchdog; "
    "Watchdog(rank=1, prog='nspsim_runtime.train', watch_parent=True); print(flush=True); time.sleep(20)"
)
agent = subprocess.Popen(
    [sys.executable, "-c", f"import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', {rank!r}]); "
     "time.sleep(60)"],
    stdout=subprocess.PIPE,
)
agent.stdout.readline()  # the rank's watchdog runs
agent.kill()
agent.wait()
start = time.monotonic()
pid, status = os.wait()  # the orphaned rank, re-parented to this process
print(os.waitstatus_to_exitcode(status), round(time.monotonic() - start, 2))
"""


@pytest.mark.skipif(sys.platform != "linux", reason="re-parenting to a subreaper is Linux-only")
def test_a_rank_whose_launcher_is_killed_ends_itself() -> None:
    """A harness kills a rank's parent (its stand-in torchrun agent) with SIGKILL: the rank's
    watchdog sees it re-parented and ends the rank at once with one line."""
    proc = subprocess.run([sys.executable, "-c", ORPHAN], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert proc.returncode == 0, proc.stderr[-3000:]
    code, elapsed = proc.stdout.split()
    assert int(code) == 3 and float(elapsed) < 5, proc.stdout  # nspsim_runtime.watchdog.EXIT_CODE, within a few polls
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("nspsim_runtime.train: rank 1: error: its launcher"), lines
    assert "is gone; ending this rank" in lines[0]
