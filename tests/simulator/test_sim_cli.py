"""``nspsim simulate``: text and JSON results, the timeline file, and one-line errors; plan logs,
recorded profiles, the out-of-memory exit status, escaped file strings and output paths (issue 15)."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import pytest

from nspsim.cli.main import main
from nspsim.plan import Plan, make_plan
from nspsim.planners import get_planner
from nspsim.records import BREAKDOWN_CATEGORIES
from nspsim.simulator import SimOptions, Simulator
from nspsim.sp_tree import Node
from nspsim.workload import Workload, WorkloadConfig, build_workload


@pytest.fixture(scope="module")
def plan_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A nested plan for Qwen3-30B on 16 H100s: long samples on the two SP8 roots, the rest on leaves."""
    wl = build_workload(WorkloadConfig(gpus=16, tokens_per_batch=256 * 1024, max_context=64 * 1024))
    batch = wl.sampler.batch(0)
    order = sorted(range(batch.num_samples), key=lambda j: -batch.lengths[j])
    nodes = [Node(1, 0)] * batch.num_samples
    tokens = [0.0] * 16
    for rank, j in enumerate(order):
        if rank < 4:
            nodes[j] = Node(8, rank % 2)
            continue
        g = min(range(16), key=lambda i: tokens[i])
        nodes[j], tokens[g] = Node(1, g), tokens[g] + batch.lengths[j]
    plan = make_plan(
        planner="manual",
        cluster=wl.cluster,
        model=wl.model,
        batch=batch,
        spmax=wl.tree.spmax,
        token_budget=wl.token_budget,
        nodes=nodes,
    )
    path = tmp_path_factory.mktemp("plans") / "plan.json"
    plan.save(path)
    return path


def test_simulate_json_has_the_contract_keys(plan_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", str(plan_file), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert list(data["breakdown_s"]) == list(BREAKDOWN_CATEGORIES)
    assert sum(data["breakdown_s"].values()) == pytest.approx(data["step_time_s"], rel=1e-9)
    assert len(data["peak_memory_bytes"]) == 16 and data["oom"] is False and data["sim_wall_time_s"] > 0
    assert data["config"]["model"] == "qwen3-30b-a3b" and data["config"]["gpus"] == 16
    assert data["extrapolated"] == (data["layers_simulated"] < 48)


def test_simulate_text_and_timeline(plan_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "trace.json"
    assert main(["simulate", str(plan_file), "--timeline", str(out), "--prepare", "all"]) == 0
    text, err = capsys.readouterr()
    assert "step time" in text and "breakdown" in text and "48 layers" in text
    assert err.splitlines() == [f"nspsim: wrote {out}, {tmp_path / 'trace.config.json'}"]  # says what it wrote
    trace = json.loads(out.read_text())
    config = trace["otherData"]["config"]
    assert config["tree_recompute"] is True and config["prepare"] == "all" and config["preparation"] == "all"
    assert {e["pid"] for e in trace["traceEvents"]} == set(range(16))
    assert json.loads((tmp_path / "trace.config.json").read_text())["plan_hash"]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["simulate", "missing.json"], "cannot read plan missing.json"),
        (["simulate", "PLAN", "--mode", "fast"], "invalid choice: 'fast'"),
        (["simulate", "PLAN", "--jitter", "2"], "jitter must be in [0, 1)"),
        (["simulate", "PLAN", "--sim-layers", "3"], "sim_layers must be an integer >= 6"),
        (["simulate", "PLAN", "--jitter", "nan"], "argument --jitter: must be a finite number"),
        (["simulate", "PLAN", "--jitter", "inf"], "argument --jitter: must be a finite number"),
        (["simulate", "PLAN", "--seed", "-1"], "argument --seed: must be >= 0"),
        (["simulate", "PLAN", "--timeline", "PLAN"], "would overwrite the input file"),
        (["simulate", "PLAN", "--timeline", ""], "--timeline: the output path is empty"),
        (["simulate", "PLAN", "--timeline", "."], "is a directory; give a file name"),
        (["simulate", "PLAN", "--timeline", "PLAN/t.json"], "is a file, not a directory"),  # a missing folder is made
    ],
)
def test_simulate_bad_input_is_one_line(
    argv: list[str], message: str, plan_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = plan_file.read_bytes()
    assert main([a.replace("PLAN", str(plan_file)) for a in argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("nspsim: error: ") and message in err and err.count("\n") == 1
    assert plan_file.read_bytes() == before


def test_simulate_refuses_a_plan_for_an_unknown_cluster(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from helpers import make_batch, toy_cluster, toy_model

    plan = make_plan(
        planner="manual",
        cluster=toy_cluster(),
        model=toy_model(),
        batch=make_batch([100]),
        spmax=4,
        token_budget=1000,
        nodes=[Node(1, 0)],
    )
    plan.save(tmp_path / "toy.json")
    assert main(["simulate", str(tmp_path / "toy.json")]) == 2
    assert "unknown model preset 'toy'" in capsys.readouterr().err


def test_simulate_timeline_never_overwrites_the_plans_sidecar(
    plan_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sidecar = plan_file.with_suffix(".config.json")
    sidecar.write_text('{"planner_options": {}}')
    timeline = plan_file.with_suffix(".html")  # its own sidecar would be the plan's
    assert main(["simulate", str(plan_file), "--timeline", str(timeline)]) == 2
    assert "would overwrite the input file" in capsys.readouterr().err
    assert sidecar.read_text() == '{"planner_options": {}}' and not timeline.exists()


# ---- plan logs, recorded profiles, out-of-memory status, escaped strings, output paths (issue 15) -------------

TINY = ["--model", "tiny", "--cluster", "cpu", "--gpus", "2", "--tokens-per-batch", "16k", "--max-context", "4k"]


def _tiny_workload(profile: str | None = None) -> Workload:
    """The workload ``nspsim_runtime.train --model tiny --tokens-per-batch 16k --max-context 4k --token-budget 5k``
    plans against with 2 CPU ranks."""
    config = WorkloadConfig(
        model="tiny", cluster="cpu", gpus=2, tokens_per_batch=16 * 1024, max_context=4096, token_budget=5120
    )
    return build_workload(replace(config, profile=profile))


def _step_time(workload: Workload, plan: Plan) -> float | None:
    return Simulator.for_workload(workload, SimOptions()).simulate(plan).step_time_s


def test_simulate_replays_a_plan_log(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    wl = _tiny_workload()
    plans = [get_planner("nsp").plan(wl.sampler.batch(i), wl) for i in range(3)]
    log = tmp_path / "run.plans.jsonl"
    log.write_text("".join(p.to_json() + "\n" for p in plans))  # routed plans, in the plan-log format
    times = [_step_time(wl, p) for p in plans]
    assert main(["simulate", "--prepare", "none", str(log)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("3 plan(s) of ") and "tiny on cpux2" in lines[0]
    for i, (plan, line) in enumerate(zip(plans, lines[2:5])):
        assert line.split() == [str(i), str(i), "nsp", plan.content_hash, f"{times[i]:.4f}", "s", "no"]
    assert main(["simulate", "--prepare", "none", str(log), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [d["index"] for d in data] == [0, 1, 2] and [d["step_time_s"] for d in data] == times
    assert [d["config"]["plan_index"] for d in data] == [0, 1, 2]
    assert main(["simulate", "--prepare", "none", str(log), "--index", "1", "--json"]) == 0
    one = json.loads(capsys.readouterr().out)
    assert one["plan_hash"] == plans[1].content_hash and one["step_time_s"] == times[1]
    out = tmp_path / "t.json"
    assert (
        main(["simulate", "--prepare", "none", str(log), "--index", "2", "--timeline", str(out)]) == 0 and out.exists()
    )
    capsys.readouterr()
    for argv, message in [
        (["--index", "3"], "--index 3: " + str(log) + " holds 3 plan(s), numbered 0..2"),
        (["--timeline", str(tmp_path / "u.json")], "pick one with --index N (0..2)"),
    ]:
        assert main(["simulate", str(log), *argv]) == 2
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1
    assert not (tmp_path / "u.json").exists()
    assert main(["inspect", str(log), "--index", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["plan_hash"] == plans[1].content_hash
    assert main(["inspect", str(log)]) == 2
    assert "is a plan log of 3 plans: pick one with --index N (0..2)" in capsys.readouterr().err


def _write_profile(path: Path, nonattn_flops: float) -> Path:
    body = {"format": "nspsim-profile", "version": 1, "name": "lab", "nonattn_flops": nonattn_flops}
    path.write_text(json.dumps(body))
    return path


def test_simulate_uses_the_profile_the_plan_was_made_with(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    profile = _write_profile(tmp_path / "lab.json", 5e9)  # non-attention work ~6x slower than the cpu preset's
    plan_path = tmp_path / "p.json"
    assert main(["plan", *TINY, "--token-budget", "5k", "--profile", str(profile), "-o", str(plan_path)]) == 0
    capsys.readouterr()
    plan = Plan.load(plan_path)
    assert plan.profile is not None and plan.profile.source == str(profile) and plan.profile.name == "lab"
    with_profile = _step_time(_tiny_workload(str(profile)), plan)
    assert with_profile != _step_time(_tiny_workload(), plan)
    assert main(["simulate", str(plan_path), "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["step_time_s"] == with_profile and "profile" not in captured.err
    assert main(["inspect", str(plan_path)]) == 0
    assert f"costs: profile lab ({profile}) (fingerprint {plan.profile.fingerprint})" in capsys.readouterr().out

    other = _write_profile(tmp_path / "other.json", 8e9)
    assert main(["simulate", str(plan_path), "--profile", str(other), "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["step_time_s"] == _step_time(_tiny_workload(str(other)), plan)
    assert captured.err.startswith(f"nspsim: warning: --profile {other} (fingerprint ")
    profile_lines = [line for line in captured.err.splitlines() if "--max-context dropped" not in line]  # 4k drops
    assert "overrides the cost profile lab" in captured.err and len(profile_lines) == 1

    _write_profile(profile, 6e9)  # edited after planning
    assert main(["simulate", str(plan_path)]) == 2
    assert "has changed since (fingerprint now" in capsys.readouterr().err
    profile.unlink()
    assert main(["simulate", str(plan_path)]) == 2
    err = capsys.readouterr().err
    assert "the plan was made with cost profile lab" in err and "cannot be loaded" in err and "--profile PATH" in err


def test_simulate_warns_when_a_profile_overrides_analytic_costs(
    plan_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    profile = _write_profile(tmp_path / "lab.json", 1e14)
    assert main(["simulate", str(plan_file), "--profile", str(profile)]) == 0
    assert "overrides the analytic costs the plan was made with" in capsys.readouterr().err


@pytest.fixture(scope="module")
def oom_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Qwen3-30B on 16 H100s with all 256K tokens on GPU 0 (B_tok ~101K): valid, but out of memory."""
    wl = build_workload(WorkloadConfig(gpus=16, tokens_per_batch=256 * 1024, max_context=64 * 1024))
    batch = wl.sampler.batch(0)
    plan = make_plan(
        planner="manual",
        cluster=wl.cluster,
        model=wl.model,
        batch=batch,
        spmax=wl.tree.spmax,
        token_budget=10**7,
        nodes=[Node(1, 0)] * batch.num_samples,
    )
    path = tmp_path_factory.mktemp("oom") / "oom.json"
    plan.save(path)
    return path


@pytest.mark.parametrize("extra", [[], ["--json"], ["--timeline", "TIMELINE"]])
def test_an_out_of_memory_plan_exits_1_with_or_without_a_timeline(
    extra: list[str], oom_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    timeline = tmp_path / "t.json"
    assert main(["simulate", str(oom_file), *[str(timeline) if a == "TIMELINE" else a for a in extra]]) == 1
    out, err = capsys.readouterr()
    assert (json.loads(out)["oom"] is True) if "--json" in extra else ("OUT OF MEMORY" in out)
    assert err.startswith("nspsim: the simulated step ran out of memory") and err.count("\n") == 1
    assert ("no timeline written" in err) == ("--timeline" in extra)
    assert not timeline.exists() and not timeline.with_suffix(".config.json").exists()


def test_the_exit_status_is_documented(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["simulate", "--help"])
    assert "1 when one runs out of memory" in " ".join(capsys.readouterr().out.split())


EVIL = "evil\x1b[31m\nstep time  0.0001 s (critical GPU 0)\u202e"


def test_strings_from_a_plan_file_are_printed_escaped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    wl = _tiny_workload()
    plan = replace(get_planner("static").plan(wl.sampler.batch(0), wl), planner=EVIL)
    path = tmp_path / "evil.json"
    plan.save(path)
    log = tmp_path / "evil.plans.jsonl"
    log.write_text(plan.to_json() + "\n")
    for argv in (["simulate", str(path)], ["simulate", str(log)], ["inspect", str(path)]):
        assert main(argv) == 0
        out = capsys.readouterr().out
        assert out.isascii() and "\x1b" not in out and "evil\\x1b[31m\\x0astep time" in out and "\\u202e" in out
        assert not any(line.startswith("step time  0.0001") for line in out.splitlines())
    for argv in (["simulate", str(path), "--json"], ["inspect", str(path), "--json"]):
        assert main(argv) == 0
        out = capsys.readouterr().out
        assert "\x1b" not in out and json.loads(out)["planner"] == EVIL  # JSON escapes it, and keeps it exact


@pytest.mark.parametrize(
    "target, message",
    [
        ("-", "--timeline -: writing to standard output is not supported"),
        ("OUT/", "names a directory (it ends with '/')"),
        ("FIFO", "is not a regular file"),
        pytest.param(
            "/proc/nspsim-test.json",
            "--timeline /proc/nspsim-test.json: ",
            marks=pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="no /proc"),
        ),
    ],
)
@pytest.mark.timeout(120)  # an nspsim that opened the FIFO would block here forever
def test_simulate_refuses_an_unusable_timeline_path_before_simulating(
    target: str, message: str, plan_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    os.mkfifo(tmp_path / "fifo")  # opening it for writing would block: it must be refused unopened
    target = target.replace("OUT", str(tmp_path / "out")).replace("FIFO", str(tmp_path / "fifo"))
    assert main(["simulate", str(plan_file), "--timeline", target]) == 2
    out, err = capsys.readouterr()
    assert err.startswith("nspsim: error: ") and message in err and err.count("\n") == 1 and out == ""
    assert not Path("-").exists() and not (tmp_path / "out.config.json").exists()


def test_a_timeline_to_the_null_device_writes_no_sibling(plan_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sibling = Path(os.devnull).with_suffix(".config.json")
    if sibling.is_file():  # left by an older nspsim
        sibling.unlink()
    assert main(["simulate", str(plan_file), "--timeline", os.devnull]) == 0
    assert not sibling.exists()


def test_a_plan_log_mixing_models_gets_one_mean_per_workload(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sizes = ["--cluster", "cpu", "--gpus", "2", "--tokens-per-batch", "64k", "--max-context", "32k"]
    lines = []
    for model in ("tiny", "tiny-moe"):
        out = tmp_path / f"{model}.json"
        assert main(["plan", "--model", model, *sizes, "--planner", "static", "-o", str(out)]) == 0
        lines.append(Plan.from_json(out.read_text()).to_json())
    log = tmp_path / "mixed.plans.jsonl"
    log.write_text("\n".join(lines) + "\n")
    capsys.readouterr()
    assert main(["simulate", str(log)]) == 0
    text = capsys.readouterr().out
    assert "2 plan(s) of" in text and "2 workloads" in text
    assert "over the 1 plan(s) of tiny on cpux2" in text and "over the 1 plan(s) of tiny-moe on cpux2" in text
    assert "over the 2 plan(s)" not in text


def test_simulate_reports_the_batch_settings_of_its_plan(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plan = tmp_path / "p.json"
    sizes = ["--cluster", "cpu", "--gpus", "2", "--tokens-per-batch", "64k", "--max-context", "32k", "--trace", "code"]
    assert main(["plan", "--model", "tiny", *sizes, "--planner", "static", "-o", str(plan)]) == 0
    capsys.readouterr()
    assert main(["simulate", str(plan), "--json"]) == 0  # no batch flags: the defaults are 2M and 192K
    config = json.loads(capsys.readouterr().out)["config"]
    assert (config["tokens_per_batch"], config["max_context"], config["trace"]) == (65536, 32768, "code")
