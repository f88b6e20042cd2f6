"""The training entry point: same loss curve for every planner, records joinable with the simulator,
outputs written next to the resolved config, clear errors for bad arguments."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import rt_workers

from nspsim.plan import Plan
from nspsim.planners import PLANNER_NAMES
from nspsim.records import BREAKDOWN_CATEGORIES
from nspsim.specs.clusters import get_cluster
from nspsim.specs.model import get_model
from nspsim.workload import build_workload
from nspsim_runtime.launch import run_ranks
from nspsim_runtime.records import read_records
from nspsim_runtime.train import PROG as train_prog
from nspsim_runtime.training.args import PROG, RUNTIME_WORKLOAD, parse_args
from nspsim_runtime.training.outputs import output_paths
from nspsim_runtime.training.trainer import check_planner, device_mismatch

ROOT = Path(__file__).resolve().parents[2]
BASE = [
    "--trace",
    "longtail-paper",
    "--model",
    "tiny",
    "--steps",
    "3",
    "--tokens-per-batch",
    "1k",
    "--max-context",
    "512",
    "--seed",
    "1",
    "--token-budget",
    "650",
    "--comm-timeout",
    "60",
]
pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict]]:
    out = tmp_path_factory.mktemp("train")
    argvs = [["--planner", name, *BASE, "--records", str(out / f"{name}.jsonl")] for name in PLANNER_NAMES]
    argvs[0] += ["--no-simulate"]  # one run without the simulator
    argvs[-1] += ["--plan-on", "all"]  # one run where every rank plans (the hash check proves they agree)
    extra = {
        "static:degree=2": ["--planner", "static:degree=2", "--recompute", "all", "--lookahead", "0"],
        "allreduce": ["--planner", "nsp", "--grad-sync", "allreduce"],
    }
    argvs += [
        [*argv, *BASE, "--steps", "2", "--records", str(out / f"extra{i}.jsonl")]
        for i, argv in enumerate(extra.values())
    ]
    results = run_ranks(rt_workers.train_runs, 2, argvs, timeout_s=240, comm_timeout_s=60)
    assert all(r == [] for rank in results[1:] for r in rank)  # only rank 0 records
    names = [*PLANNER_NAMES, *extra]
    return {"dir": out, **{name: [json.loads(line) for line in lines] for name, lines in zip(names, results[0])}}


def test_the_loss_curve_does_not_depend_on_the_planner(runs: dict) -> None:
    curves = {name: [r["loss"] for r in runs[name]] for name in PLANNER_NAMES}
    reference = curves["static"]
    assert len(reference) == 3 and reference[-1] < reference[0]  # it trains
    curves["static:degree=2"] = [r["loss"] for r in runs["static:degree=2"]][:2]
    for name, curve in curves.items():
        assert curve == pytest.approx(reference[: len(curve)], rel=1e-6, abs=0), name
    # The comparison means something only if the planners executed different plans.
    hashes = {name: tuple(r["plan_hash"] for r in runs[name]) for name in curves}
    assert len(set(hashes.values())) >= 3, hashes
    assert hashes["static:degree=2"][:2] != hashes["static"][:2]
    mixes = {tuple(sorted(r["samples_per_degree"])) for name in curves for r in runs[name]}
    assert ("2",) in mixes and len(mixes) >= 2, mixes  # all-degree-2 plans and plans using degree 1


def test_records_carry_the_join_key_and_a_breakdown_that_sums_to_the_step_time(runs: dict) -> None:
    for name in PLANNER_NAMES:
        for step, rec in enumerate(runs[name]):
            assert rec["step"] == step and rec["batch_index"] == step and rec["planner"] == name
            assert rec["planner_spec"] == name and rec["schema_version"] == 3
            assert rec["dropped_samples"] >= 0 and rec["dropped_tokens"] > 512 * rec["dropped_samples"] - 1
            assert tuple(rec["breakdown_s"]) == BREAKDOWN_CATEGORIES
            assert sum(rec["breakdown_s"].values()) == pytest.approx(rec["step_time_s"], rel=1e-6)
            assert set(rec["per_gpu_breakdown_s"]) == set(BREAKDOWN_CATEGORIES)
            assert all(len(v) == 2 for v in rec["per_gpu_breakdown_s"].values())
            assert rec["num_gpus"] == 2 and rec["cluster"] == "cpux2" and rec["source"] == "measured"
            assert rec["breakdown_s"]["attn_fwd"] > 0 and rec["breakdown_s"]["attn_bwd"] > 0
            assert (rec["simulated_step_time_s"] is None) == (name == "static")
            assert rec["simulated_mode"] == (None if name == "static" else "stream")


def test_the_breakdown_is_the_critical_ranks_and_every_rank_is_kept(runs: dict) -> None:
    for name in PLANNER_NAMES:
        for rec in runs[name]:
            crit, per_gpu = rec["critical_gpu"], rec["per_gpu_breakdown_s"]
            assert rec["breakdown_s"] == {k: per_gpu[k][crit] for k in BREAKDOWN_CATEGORIES}
            assert rec["step_time_s"] == rec["per_gpu_step_time_s"][crit]
            busy = [
                sum(per_gpu[k][r] for k in ("attn_fwd", "attn_bwd", "attn_remat", "sp_exposed_comm")) for r in range(2)
            ]
            assert busy[crit] == pytest.approx(max(busy))  # the rank the others waited for
            for r in range(2):
                assert sum(per_gpu[k][r] for k in BREAKDOWN_CATEGORIES) == pytest.approx(
                    rec["per_gpu_step_time_s"][r], rel=1e-6
                )


def test_records_predict_the_executed_configuration(runs: dict) -> None:
    for rec in runs["static:degree=2"]:  # --recompute all --lookahead 0
        assert rec["planner_spec"] == "static:degree=2" and rec["planner"] == "static"
        assert rec["samples_per_degree"] == {"2": rec["num_samples"]}
        assert rec["simulated_mode"] == "no-stream" and rec["simulated_step_time_s"] > 0
        assert rec["recompute_policy"] == "tree-marks" and rec["remat_share"] == 1.0
        assert rec["breakdown_s"]["attn_remat"] > 0  # every sample's attention was recomputed
    for rec in runs["allreduce"]:
        assert rec["simulated_mode"] is None and rec["simulated_step_time_s"] is None
        assert "--grad-sync allreduce" in rec["simulated_note"]
    assert [r["loss"] for r in runs["allreduce"]] == pytest.approx([r["loss"] for r in runs["static"][:2]], rel=1e-6)
    assert [r["loss"] for r in runs["static:degree=2"]] == pytest.approx(
        [r["loss"] for r in runs["static"][:2]], rel=1e-6
    )


def test_outputs_sit_next_to_the_resolved_config_and_replay(runs: dict) -> None:
    records, config, plans = output_paths(str(runs["dir"] / "nsp.jsonl"))
    assert read_records(records.read_text()) == runs["nsp"]
    resolved = json.loads(config.read_text())
    assert resolved["workload"]["cluster"] == "cpu" and resolved["workload"]["gpus"] == 2
    assert resolved["runtime"]["planner"] == "nsp" and resolved["world"] == 2
    assert resolved["runtime"]["cluster"] is None and "workload" not in resolved["runtime"]  # written once, resolved
    executed = [Plan.from_json(line) for line in plans.read_text().splitlines()]
    assert [p.content_hash for p in executed] == [r["plan_hash"] for r in runs["nsp"]]
    assert all(p.cluster.label == "cpux2" for p in executed)


def test_the_plan_log_replays_with_nspsim_simulate(runs: dict, capsys: pytest.CaptureFixture[str]) -> None:
    """``nspsim simulate <records>.plans.jsonl`` simulates every executed plan against what the run planned
    for (cluster ``cpu`` x 2, model ``tiny``) and gives the records' predictions, step by step; with
    ``--mode no-stream`` for a ``--lookahead 0`` run (here with ``--recompute all`` marks)."""
    from nspsim.cli.main import main

    cases = [("nsp.jsonl", "nsp", []), ("extra0.jsonl", "static:degree=2", ["--mode", "no-stream"])]
    for name, key, mode in cases:
        plans = output_paths(str(runs["dir"] / name))[2]
        assert main(["simulate", str(plans), "--json", *mode]) == 0
        replayed = json.loads(capsys.readouterr().out)
        assert [d["plan_hash"] for d in replayed] == [r["plan_hash"] for r in runs[key]]
        assert [d["step_time_s"] for d in replayed] == pytest.approx([r["simulated_step_time_s"] for r in runs[key]])
        assert {d["config"]["cluster"] for d in replayed} == {"cpu"} and {d["config"]["gpus"] for d in replayed} == {2}


BAD_ARGUMENTS = (
    (["--planner", "nope"], "unknown planner 'nope'"),
    (["--planner", "nsp", "--steps", "0"], "--steps must be positive"),
    (["--planner", "nsp", "--planner-option", "beam_width"], "must look like KEY=VALUE"),
    (["--planner", "static:degree"], "must look like KEY=VALUE"),
    (["--planner", "static:degree=2", "--planner-option", "degree=4"], "'degree' is given twice"),
    (["--planner", "nsp", "--prepare", "all", "--recompute", "all"], "cannot be combined with --recompute all"),
    (["--planner", "nsp", "--tree-recompute"], "--tree-recompute was replaced by --prepare"),
    (["--planner", "nsp", "--prepare", "most"], "argument --prepare: invalid choice: 'most'"),
    (["--planner", "nsp", "--lookahead", "some"], "--lookahead takes 'all' or an integer"),
    (["--planner", "nsp", "--lr", "inf"], "argument --lr: must be a finite number"),
    (["--planner", "nsp", "--comm-timeout", "inf"], "argument --comm-timeout: must be a finite number"),
    (["--planner", "nsp", "--comm-timeout", "1e300"], "argument --comm-timeout: at most 1000000 seconds"),
    (["--planner", "nsp", "--step-timeout", "0"], "argument --step-timeout: must be positive"),
    (["--planner", "nsp", "--records", ""], "--records: the output path is empty"),
    (["--planner", "nsp", "--records", "."], "--records . is a directory"),
    (["--planner", "nsp", "--records", "/proc/no/such/r.jsonl"], "cannot create the directory /proc/no"),
    (["--planner", "nsp", "--seed", "-1"], "argument --seed: must be >= 0"),
    (["--planner", "nsp", "--seed", str(2**64)], "argument --seed: must be at most 2**63 - 1"),  # torch overflowed
    (["--planner", "nsp", "--gpus", "4"], "unrecognized arguments: --gpus"),  # the world size decides it
    (["--planner", "nsp", "--bogus"], "unrecognized arguments: --bogus"),
    (["--steps", "2"], "the following arguments are required: --planner"),
)


@pytest.mark.parametrize("argv, message", BAD_ARGUMENTS, ids=[m for _, m in BAD_ARGUMENTS])
def test_bad_arguments_raise_a_one_line_value_error(argv: list[str], message: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_args(argv)
    assert message in str(info.value) and "\n" not in str(info.value)


# docs/runtime.md's one-process example asked for degree 2 of a world of one
ONE_RANK = (
    ["--planner", "static:degree=2", "--steps", "2"],
    "start 2 with python -m nspsim_runtime.run --standalone --nproc-per-node 2",
)


@pytest.mark.parametrize(
    "argv, message", [BAD_ARGUMENTS[1], BAD_ARGUMENTS[-2], ONE_RANK], ids=["validation", "argparse", "one-rank"]
)
def test_the_entry_point_prints_exactly_one_line_and_exits_2(argv: list[str], message: str) -> None:
    proc = _train(argv, timeout=120)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("nspsim_runtime.train: error:") and message in lines[0], proc.stderr


def _train(argv: list[str], timeout: float = 180) -> subprocess.CompletedProcess[str]:
    """``python -m nspsim_runtime.train ARGV`` as one process (a world of one), outside any torchrun."""
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    return subprocess.run(
        [sys.executable, "-m", "nspsim_runtime.train", *argv],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**env, "OMP_NUM_THREADS": "1"},
        timeout=timeout,
    )


SMALL = [*BASE[:4], "--tokens-per-batch", "1k", "--max-context", "512", "--seed", "1"]


def test_a_failed_run_leaves_the_earlier_runs_files_as_they_were(tmp_path: Path) -> None:
    records = tmp_path / "v.jsonl"
    first = _train(["--planner", "nsp", *SMALL, "--steps", "1", "--records", str(records)])
    assert first.returncode == 0, first.stderr[-2000:]
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if not p.name.startswith(".nspsim-")}  # not locks
    assert sorted(before) == ["v.config.json", "v.jsonl", "v.plans.jsonl"] and all(before.values())
    # Fails while planning step 0, after its outputs were opened: batch 0 holds samples over 100 tokens.
    failed = _train(["--planner", "static:degree=1", *SMALL, "--token-budget", "100", "--records", str(records)])
    assert failed.returncode == 2 and "fits no admissible SP group" in failed.stderr, failed.stderr[-2000:]
    after = {p.name: p.read_bytes() for p in tmp_path.iterdir() if not p.name.startswith(".nspsim-")}
    assert after == before  # untouched, no partial files left
    again = _train(["--planner", "static", *SMALL, "--steps", "2", "--records", str(records)])
    assert again.returncode == 0, again.stderr[-2000:]
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".nspsim-")) == sorted(before)
    assert [r["planner_spec"] for r in read_records(records.read_text())] == ["static", "static"]
    assert len(output_paths(str(records))[2].read_text().splitlines()) == 2


def test_a_gpu_cluster_preset_on_the_cpu_is_warned_about_once(tmp_path: Path) -> None:
    proc = _train(["--planner", "nsp", *SMALL, "--steps", "1", "--cluster", "h100"])
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stderr.splitlines()
    assert all(line.startswith("nspsim_runtime.train: warning: ") for line in lines), lines
    cluster = [line for line in lines if "the cluster preset 'h100'" in line]
    assert len(cluster) == 1 and "executes on the CPU" in cluster[0] and "omit --cluster" in cluster[0]
    assert len(lines) == 2 and "max_context" in lines[1]  # the small batches also drop over 10% of their tokens


def test_the_cluster_preset_must_describe_the_device() -> None:
    assert device_mismatch(get_cluster("cpu", 2), "cpu") is None
    assert device_mismatch(get_cluster("h100", 8), "cuda") is None
    on_cpu = device_mismatch(get_cluster("h200", 2), "cpu")
    assert on_cpu is not None and "'h200' describes" in on_cpu and "on the CPU" in on_cpu
    on_cuda = device_mismatch(get_cluster("cpu", 2), "cuda")
    assert on_cuda is not None and "on CUDA" in on_cuda and "h100" in on_cuda


def test_a_degree_above_the_world_size_says_how_many_ranks_to_start() -> None:
    def check(argv: list[str], world: int) -> str:
        args = parse_args(["--planner", *argv])
        with pytest.raises(ValueError) as info:
            check_planner(args, build_workload(args.workload_on(world=world, device_type="cpu")), "cpu")
        return str(info.value)

    assert "start 4 with python -m nspsim_runtime.run --standalone --nproc-per-node 4" in check(["static:degree=4"], 1)
    assert "this run has 2 ranks (one per process): start 8 with" in check(["static:degree=8"], 2)
    assert "flexsp option min_group=4" in check(["flexsp:min_group=4"], 2)
    # No world helps: the model's heads or --spmax bound the degree, so the message is the planner's.
    assert "nspsim_runtime.run" not in check(["static:degree=2", "--spmax", "1"], 2)
    assert "nspsim_runtime.run" not in check([f"static:degree={2 * get_model('tiny').num_heads}"], 1)
    args = parse_args(["--planner", "static:degree=2"])
    check_planner(args, build_workload(args.workload_on(world=2, device_type="cpu")), "cpu")  # fits: no error
    assert train_prog == PROG


def test_a_single_process_bf16_run_on_cpu(tmp_path: Path) -> None:
    """bf16 autocast with the CPU flash kernel: q, k (after q_norm/k_norm) and v share one dtype."""
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "nspsim_runtime.train",
            "--planner",
            "nsp",
            *BASE[:4],
            "--steps",
            "1",
            "--tokens-per-batch",
            "1k",
            "--max-context",
            "512",
            "--dtype",
            "bf16",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**env, "OMP_NUM_THREADS": "1"},
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "step 0 batch 0 planner nsp loss" in proc.stdout


def test_parse_args_resolves_token_counts() -> None:
    args = parse_args(["--planner", "nsp", "--tokens-per-batch", "8k", "--max-context", "2k"])
    assert (args.workload.tokens_per_batch, args.workload.max_context) == (8192, 2048)


def test_the_workload_flags_are_nspsims_with_the_runtimes_defaults() -> None:
    args = parse_args(["--planner", "nsp"])
    assert args.workload == RUNTIME_WORKLOAD and args.cluster is None
    assert args.workload_on(world=4, device_type="cpu") == replace(RUNTIME_WORKLOAD, gpus=4)
    assert args.workload_on(world=8, device_type="cuda").cluster == "h100"  # no --cluster: the device decides
    given = parse_args(["--planner", "nsp", "--cluster", "h200", "--seed", "3", "--backend", "ring"])
    on = given.workload_on(world=8, device_type="cuda")
    assert (on.cluster, on.gpus, on.seed, on.backend) == ("h200", 8, 3, "ring")


def _run_group(cmd: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    """Run ``cmd`` in its own session; on timeout kill the whole group (torchrun's workers too)."""
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"{cmd[:6]} did not finish in {timeout} s:\n{err[-2000:]}")
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def test_torchrun_entry_point(tmp_path: Path) -> None:
    records = tmp_path / "run.jsonl"
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        "2",
        "-m",
        "nspsim_runtime.train",
        "--planner",
        "nsp",
        *BASE[:4],
        "--steps",
        "2",
        "--tokens-per-batch",
        "1k",
        "--max-context",
        "512",
        "--records",
        str(records),
    ]
    proc = _run_group(cmd, timeout=150)
    assert proc.returncode == 0, proc.stderr[-2000:]
    recs = read_records(records.read_text())
    assert [r["step"] for r in recs] == [0, 1] and all(r["num_gpus"] == 2 for r in recs)
    assert "step 1 batch 1 planner nsp loss" in proc.stdout


def test_report_summarises_records(runs: dict, capsys: pytest.CaptureFixture[str]) -> None:
    from nspsim_runtime.report import main as report

    files = [str(runs["dir"] / f"{name}.jsonl") for name in ("static", "nsp")]
    report([*files, "--skip", "1"])
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:6] == ["run", "planner", "steps", "meas", "s", "sim"]
    static, nsp = out[1].split(), out[2].split()
    assert static[:3] == ["static", "static", "2"] and static[4] == "-"  # no simulation in that run
    assert nsp[:3] == ["nsp", "nsp", "2"] and float(nsp[4]) > 0


def test_train_warns_when_max_context_drops_over_a_tenth_of_the_tokens() -> None:
    """As nspsim plan and compare do; the README's example (16k max context) drops nothing."""
    from nspsim_runtime.training.trainer import dropped_warning

    def warning(argv: list[str]) -> str | None:
        args = parse_args(["--planner", "nsp", "--trace", "wikipedia", "--tokens-per-batch", "16k", *argv])
        return dropped_warning(build_workload(args.workload_on(world=4, device_type="cpu")), args)

    text = warning(["--max-context", "4k", "--steps", "20"])
    assert text is not None and text.startswith("20 batch(es): ") and "31.6% of the drawn tokens" in text
    assert warning(["--max-context", "16k", "--steps", "20"]) is None


def test_a_long_run_checks_only_its_first_batches_for_drops() -> None:
    from nspsim_runtime.training.trainer import DROP_CHECK_BATCHES, dropped_warning

    args = parse_args(["--planner", "nsp", "--trace", "wikipedia", "--max-context", "4k", "--steps", "100000"])
    text = dropped_warning(build_workload(args.workload_on(world=4, device_type="cpu")), args)
    assert text is not None and text.startswith(f"the first {DROP_CHECK_BATCHES} of 100000 batches: ")
