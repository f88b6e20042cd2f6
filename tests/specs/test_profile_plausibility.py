"""Cost profiles are checked for plausibility, and no NaN or infinity is ever written as JSON (issue 15,
item 3): a unit slip in a profile is one line naming the key and its unit, not a 197,019,447 s step."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from helpers import make_batch, toy_model
from nspsim.cli.main import main
from nspsim.cost.profile import Profile, load_profile
from nspsim.plan import make_plan
from nspsim.sp_tree import Node
from nspsim.specs.clusters import get_cluster

TINY = ["--gpus", "8", "--tokens-per-batch", "64k", "--max-context", "16k"]


def _profile(tmp_path: Path, **coefficients: Any) -> Path:
    path = tmp_path / "p.json"
    path.write_text(json.dumps({"format": "nspsim-profile", "version": 1, **coefficients}))
    return path


@pytest.mark.parametrize(
    "coefficients, message",
    [
        ({"alltoall_bw_by_degree": {"2": 119.5}}, "alltoall_bw_by_degree[2] = 119.5 B/s is outside the plausible"),
        ({"nonattn_flops": 150}, "nonattn_flops = 150 FLOP/s is outside the plausible range 1e6..1e17 FLOP/s"),
        ({"nonattn_flops": 1e-300}, "nonattn_flops = 1e-300 FLOP/s"),
        ({"nonattn_flops": 1e18}, "nonattn_flops = 1e18 FLOP/s"),
        ({"allgather_bw": 2e13}, "allgather_bw = 2e13 B/s is outside the plausible range 1e6..1e13 B/s"),
        ({"p2p_bw_by_degree": {"2": 150e9, "16": 20}}, "p2p_bw_by_degree[16] = 20 B/s"),
        ({"latency_s_by_degree": {"2": 10}}, "latency_s_by_degree[2] = 10 s is outside the plausible range 1e-8..1 s"),
        ({"latency_s_by_degree": {"2": 1e-9}}, "latency_s_by_degree[2] = 1e-9 s"),
        ({"attn_fwd_flops_by_length": [[1024, 1e14], [4096, 3e20]]}, "throughput at length 4096 = 3e20 FLOP/s"),
        ({"attn_bwd_flops_by_length": [[0.5, 1e14]]}, "attn_bwd_flops_by_length: length = 0.5 tokens"),
    ],
)
def test_a_value_outside_its_plausible_range_names_the_key_and_its_unit(
    tmp_path: Path, coefficients: dict[str, Any], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _profile(tmp_path, **coefficients)
    with pytest.raises(ValueError, match="p.json: ") as info:
        load_profile(path)
    assert message in str(info.value) and "\n" not in str(info.value)
    assert main(["plan", *TINY, "--profile", str(path)]) == 2  # used to plan (and simulate) with rc 0
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and message in err


def test_the_message_says_how_to_write_the_unit(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"give bytes per second, e\.g\. 119\.5e9 for 119\.5 GB/s"):
        load_profile(_profile(tmp_path, alltoall_bw_by_degree={"2": 119.5}))
    with pytest.raises(ValueError, match=r"give FLOP per second, e\.g\. 1\.5e14 for 150 TFLOP/s"):
        load_profile(_profile(tmp_path, nonattn_flops=150))


def test_values_at_the_edges_of_the_ranges_and_the_shipped_profiles_are_accepted(tmp_path: Path) -> None:
    edges = {
        "nonattn_flops": 1e6,
        "allgather_bw": 1e13,
        "alltoall_bw_by_degree": {"2": 1e6, "8": 1e13},
        "latency_s_by_degree": {"2": 1e-8, "16": 1.0},
        "attn_fwd_flops_by_length": [[1, 1e6], [2**36, 1e17]],
    }
    assert load_profile(_profile(tmp_path, **edges)).nonattn_flops == 1e6
    assert load_profile("flexsp-a100").alltoall_bw_by_degree[2] == 119.5e9
    studies = Path(__file__).resolve().parents[2] / "nspsim_studies" / "profiles" / "hierarchical-fsdp.json"
    assert load_profile(studies).allgather_bw == 2e11


def test_profiles_built_in_code_are_checked_too() -> None:
    with pytest.raises(ValueError, match="nonattn_flops = 150 FLOP/s"):
        Profile(nonattn_flops=150.0)
    with pytest.raises(ValueError, match=r"alltoall_bw_by_degree\[4\] = 96\.5 B/s"):
        Profile(alltoall_bw_by_degree={4: 96.5})


@pytest.mark.parametrize(
    "text, message",
    [
        ('{"format": "nspsim-profile", "version": 1, "nonattn_flops": 1' + "0" * 400 + "}", "must be a positive"),
        ('{"format": "nspsim-profile", "version": 1, "p2p_bw_by_degree": {"' + "9" * 5000 + '": 1e9}}', "degree"),
        ('{"format": "nspsim-profile", "version": 1, "p2p_bw_by_degree": {"\u00b2": 1e9}}', "degree"),
    ],
)
def test_numbers_too_large_for_a_float_are_one_line_errors(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "p.json"
    path.write_text(text)
    with pytest.raises(ValueError, match=message) as info:  # an OverflowError traceback before
        load_profile(path)
    assert len(str(info.value)) < 300


def test_a_plan_with_a_non_finite_number_is_not_written_as_invalid_json() -> None:
    plan = make_plan(
        planner="manual",
        cluster=get_cluster("h100", 8),
        model=toy_model(),
        batch=make_batch([5000]),
        spmax=4,
        token_budget=10_000,
        nodes=[Node(1, 0)],
        metadata={"load_s": math.nan, "ratio": math.inf},
    )
    with pytest.raises(ValueError, match=r"cannot write the plan as JSON: metadata\.load_s = nan is not a finite"):
        plan.to_json()  # used to write `NaN`, which no JSON parser reads


def test_every_json_writer_refuses_nan() -> None:
    from nspsim.jsonfile import dumps_json

    assert json.loads(dumps_json({"a": [1, 2.5]}, what="config")) == {"a": [1, 2.5]}
    with pytest.raises(ValueError, match=r"cannot write the config as JSON: a\.b\.1 = inf is not a finite number"):
        dumps_json({"a": {"b": [1.0, math.inf]}}, what="config")
    with pytest.raises(ValueError, match=r"--json output as JSON: the value = nan"):
        dumps_json(math.nan, what="--json output")


def _tiny_v2(nonattn_s_at_16k: float) -> dict[str, Any]:
    """A version-2 profile of ``tiny`` on the cpu cluster: the attention tables and the non-attention
    time at 16K tokens of a real 2-rank calibration (1.8e9 and 1.5e9 FLOP/s)."""
    return {
        "format": "nspsim-profile",
        "version": 2,
        "name": "cpu-2ranks-tiny",
        "cluster": "cpu",
        "model": "tiny",
        "attn_fwd_flops_by_heads": {"4": [[1024, 1.2e9], [16384, 1.84e9]]},
        "nonattn_fwd_s_by_tokens": [[1024, nonattn_s_at_16k / 16], [16384, nonattn_s_at_16k]],
    }


@pytest.mark.parametrize(("seconds", "word"), [(742.4, "below"), (742.4e-6, "above")])
def test_a_time_table_off_by_a_thousand_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], seconds: float, word: str
) -> None:
    path = tmp_path / "p.json"
    path.write_text(json.dumps(_tiny_v2(seconds)))
    argv = ["compare", "--cluster", "cpu", "--model", "tiny", "--gpus", "2", "--profile", str(path), "--quiet"]
    assert main([*argv, "--iters", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"x {word} the same profile's attention kernels" in err[0]
    assert "milliseconds written as seconds" in err[0] or word == "above"


def test_the_measured_rates_pass(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "p.json"
    path.write_text(json.dumps(_tiny_v2(0.7424)))  # the calibration's own 742 ms at 16K tokens
    argv = ["compare", "--cluster", "cpu", "--model", "tiny", "--gpus", "2", "--profile", str(path), "--quiet"]
    assert (
        main([*argv, "--iters", "1", "--tokens-per-batch", "16K", "--max-context", "8K", "--planners", "static"]) == 0
    )
