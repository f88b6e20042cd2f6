"""nspsim_runtime.calibrate and nspsim_runtime.validate at a tiny size: the profile written loads and carries its
provenance, predictions use it, the validation's JSON has its schema, bad input is one line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from nspsim.cost.profile import load_profile
from nspsim.plan.refs import profile_fingerprint
from nspsim.workload import WorkloadConfig, build_workload
from nspsim_runtime.calibration.reference import REF_TOKENS

ROOT = Path(__file__).resolve().parents[2]


def _run(*argv: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *argv], cwd=ROOT, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def profile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("cal") / "profile.json"
    done = _run("nspsim_runtime.calibrate", "--quick", "--ranks", "2", "-o", str(out))
    assert done.returncode == 0, done.stderr[-2000:]
    assert "alltoall" in done.stderr and "lockstep wait" in done.stderr and "wrote" in done.stderr  # the summary
    return out


def test_calibration_writes_a_profile_with_provenance(profile: Path) -> None:
    data = json.loads(profile.read_text())
    assert data["version"] == 2 and data["cluster"] == "cpu" and data["model"] == "tiny"
    prov = data["provenance"]
    assert prov["ranks"] == 2 and prov["threads"] == 1 and prov["torch"] and prov["date"] and prov["host"]
    assert "nspsim_runtime.calibrate" in prov["command"]
    ref = prov["speed_reference"]  # issue 28: how fast the machine was while calibrated
    assert len(ref["samples"]) == 6 and ref["median_s"] > 0 and ref["drift"] >= 0 and ref["tokens"] == REF_TOKENS
    assert prov["machine"]["during"]["samples"] == 6 and "load1" in prov["machine"]["before"]
    assert set(data["collectives"]) == {"alltoall", "p2p", "allgather", "reduce_scatter"}
    assert set(data["attn_fwd_flops_by_heads"]) == {"8", "4"}  # heads per rank at degrees 1 and 2
    assert [p[0] for p in data["attn_full_bwd_flops_by_length"]] == [64, 256]  # full blocks (ring), quick lengths
    assert set(data["lockstep_wait_by_size"]) == {"2"}
    prof = load_profile(profile)
    cost = build_workload(WorkloadConfig(model="tiny", cluster="cpu", gpus=2, profile=str(profile))).cost
    assert cost.latency(2) == prof.collectives["alltoall"][2].latency_s


def test_validation_runs_a_case_and_reports_its_error(profile: Path, tmp_path: Path) -> None:
    cases = tmp_path / "cases.json"
    spec = {"ranks": 2, "steps": 3, "tokens_per_batch": "2k", "max_context": "1k", "trace": "code"}
    cases.write_text(json.dumps([{**spec, "planner": "static:degree=2"}, {**spec, "planner": "static:degree=1"}]))
    out = tmp_path / "v"
    done = _run("nspsim_runtime.validate", "--cases", str(cases), "--profile", str(profile), "-o", str(out), "--json",
                "--seed", "7")  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout)
    _check_drift_fields(result, out)
    for key in ("cases", "mape", "max_abs_error", "geomean_abs_error", "pairs_resolved", "pairs_agree",
                "kendall_tau", "profile"):  # fmt: skip
        assert key in result
    assert len(result["cases"]) == 2
    for case in result["cases"]:
        for key in ("label", "ranks", "planner", "measured_step_s", "measured_std_s", "predicted_step_s", "error",
                    "breakdown_error"):  # fmt: skip
            assert key in case
        assert case["error"] == pytest.approx(
            (case["predicted_step_s"] - case["measured_step_s"]) / case["measured_step_s"]
        )
    assert result["mape"] == pytest.approx(sum(abs(c["error"]) for c in result["cases"]) / 2)
    for name in ("validation.json", "validation.config.json", "report.html", "profile-2ranks.json"):
        assert (out / name).exists(), name
    records = [p for p in out.glob("*.jsonl") if not p.name.endswith(".plans.jsonl")]
    assert len(records) == 2 and len(list(out.glob("*.plans.jsonl"))) == 2  # every case's records stay
    first = json.loads(records[0].read_text().splitlines()[0])
    assert first["profile"] == f"cpu-2ranks-tiny ({profile})"  # name (source)
    assert first["profile_fingerprint"] == profile_fingerprint(load_profile(profile))
    again = _run("nspsim_runtime.validate", "--records", *map(str, sorted(records)), "-o", str(out / "r"), "--json")
    assert again.returncode == 0, again.stderr[-2000:]
    replay = json.loads(again.stdout)  # existing records give the same statistics without running anything
    assert sorted(c["measured_step_s"] for c in replay["cases"]) == pytest.approx(
        sorted(c["measured_step_s"] for c in result["cases"])
    )
    assert replay["mape"] == pytest.approx(result["mape"])
    bad = _bad_records(tmp_path, records[0])
    mixed = _run(
        "nspsim_runtime.validate", "--records", str(records[0]), *map(str, bad), "-o", str(out / "m"), "--json"
    )
    assert mixed.returncode == 3, mixed.stderr[-2000:]  # some records failed: reported, and the status says so
    failed = json.loads(mixed.stdout)["failed"]
    assert len(failed) == len(bad) and "Traceback" not in mixed.stderr
    assert "not a nspsim_runtime.train resolved config" in failed[str(bad[0])]
    assert "has no 'num_gpus'" in failed[str(bad[1])] and "invalid JSON" in failed[str(bad[2])]
    one = tmp_path / "one.json"
    one.write_text(json.dumps([{**spec, "planner": "static:degree=2"}]))
    limit = _run("nspsim_runtime.validate", "--cases", str(one), "--profile", str(profile), "-o", str(out / "w"),
                 "--max-mape", "1e-9")  # fmt: skip
    assert limit.returncode in (1, 4) and "above --max-mape" in limit.stderr  # 4: this busy machine moved
    cause = "the model is wrong" if limit.returncode == 1 else "the machine moved"
    assert cause in limit.stderr and limit.stdout.startswith(f"verdict: {cause}")  # the cause comes first


def _check_drift_fields(result: dict, out: Path) -> None:
    """Issue 28: the verdict first, raw and speed-corrected side by side, the rounds and the machine."""
    assert next(iter(result)) == "verdict" and result["verdict"]["line"].startswith("verdict: ")
    assert result["verdict"]["status"] in ("machine", "steady") and result["seed"] == 7
    assert json.loads((out / "validation.config.json").read_text())["seed"] == 7
    for case in result["cases"]:
        assert case["speed_factor"] > 0 and len(case["speed_factors"]) == case["steps"]
        assert case["corrected_predicted_step_s"] == pytest.approx(
            sum(p * f for p, f in zip(case["predicted_steps_s"], case["speed_factors"], strict=True)) / case["steps"]
        )
        assert case["corrected_error"] == pytest.approx(
            (case["corrected_predicted_step_s"] - case["measured_step_s"]) / case["measured_step_s"]
        )
        assert case["reference_drift"] >= 0 and isinstance(case["drift_flagged"], bool)
    assert result["corrected_mape"] == pytest.approx(sum(abs(c["corrected_error"]) for c in result["cases"]) / 2)
    drift = result["drift"]
    blocks = drift["rounds"]["2"]
    assert sorted((b["case"], b["first"]) for b in blocks) == [(c, s) for c in (0, 1) for s in (0, 1, 2)]
    assert [b["round"] for b in blocks] == [0, 0, 1, 1, 2, 2]  # interleaved: one block of each case per round
    assert len(drift["references"]["2"]) == len(blocks) + 1  # one before the first block, one after each
    assert drift["calibration"]["2"]["reference_s"] > 0 and drift["machine"]["during"]["samples"] >= len(blocks)
    assert set(drift["machine"]["before"]) >= {"load1", "cpu_steal", "mhz"}
    page = (out / "report.html").read_text()
    assert "verdict: " in page and "speed factor" in page and "corrected error" in page and "foreign load" in page


def _bad_records(tmp_path: Path, good: Path) -> list[Path]:
    """Copies of a good records file beside a list-valued config, with num_gpus removed from its
    records, and beside a config that is not JSON."""
    config = good.with_name(good.stem + ".config.json").read_text()
    out = []
    for name, records, conf in [
        ("list", good.read_text(), "[1, 2]"),
        ("nogpus", "\n".join(json.dumps({k: v for k, v in json.loads(line).items() if k != "num_gpus"})
                             for line in good.read_text().splitlines()), config),
        ("notjson", good.read_text(), "{"),
    ]:  # fmt: skip
        path = tmp_path / f"{name}.jsonl"
        path.write_text(records)
        path.with_name(f"{name}.config.json").write_text(conf)
        out.append(path)
    return out


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ({"planner": "nope"}, "case nope @2: unknown planner 'nope'"),
        ({"planner": "static:degree=2", "trace": "nope"}, "trace"),
        ({"planner": "static:degree=4"}, "degree"),
        ({"planner": "static:degree=2", "trace": 5}, "a case's trace must be text, got 5"),
    ],
)
def test_a_case_runtime_train_would_refuse_fails_before_anything_runs(tmp_path: Path, case: dict, message: str) -> None:
    cases = tmp_path / "cases.json"
    spec = {"ranks": 2, "steps": 3, "tokens_per_batch": "2k", "max_context": "1k", "trace": "code"}
    cases.write_text(json.dumps([{**spec, "planner": "static:degree=1"}, {**spec, **case}]))
    done = _run("nspsim_runtime.validate", "--cases", str(cases), "--profile", "analytic", "-o", str(tmp_path / "v"))
    assert done.returncode == 2 and message in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and not (tmp_path / "v").exists()


@pytest.mark.parametrize(
    "argv, message",
    [
        (["nspsim_runtime.validate", "--ranks", "3"], "--ranks takes powers of two"),
        (["nspsim_runtime.validate", "--profile", "nope.json"], "cannot read profile nope.json"),
        (["nspsim_runtime.validate", "--max-mape", "-1"], "argument --max-mape: must be a positive finite number"),
        (["nspsim_runtime.validate", "--max-mape", "inf"], "argument --max-mape: must be a positive finite number"),
        (["nspsim_runtime.validate", "-o", ""], "-o: the output folder is empty"),
        (["nspsim_runtime.validate", "--block-steps", "0"], "--block-steps must be at least 1"),
        (["nspsim_runtime.validate", "--seed", "-1"], "--seed must be an integer from 0 to 2**32 - 1"),
        (
            ["nspsim_runtime.run", "--nproc-per-node", "0", "-m", "nspsim_runtime.train"],
            "--nproc-per-node must be at least 1",
        ),
        (
            ["nspsim_runtime.run", "--bogus", "1", "-m", "nspsim_runtime.train"],
            "nspsim_runtime.run: error: unrecognized arguments",
        ),
        (["nspsim_runtime.calibrate", "--ranks", "3"], "--ranks must be a power of two"),
        (["nspsim_runtime.calibrate", "--kernel", "nope"], "unknown attention kernel 'nope'"),
        (["nspsim_runtime.validate", "--case-timeout", "0"], "--case-timeout must be a positive number of seconds"),
        (["nspsim_runtime.calibrate", "--model", "qwen3-30b-a3b"], "give tiny or tiny-moe"),
    ],
)
def test_bad_input_is_one_line(argv: list[str], message: str) -> None:
    done = _run(*argv, timeout=60)
    assert done.returncode == 2 and message in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr


def test_listing_the_cases_into_a_closed_pipe_ends_quietly() -> None:
    """`nspsim_runtime.validate --list | head`: the reader leaves; no traceback and no error line (exit 141,
    like SIGPIPE), where a BrokenPipeError traceback ended it (issue 25, low)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "nspsim_runtime.validate", "--list"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    proc.stdout.close()  # before the child writes anything
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 141 and err == "", err
