"""Profile format version 2: parsing, what the analytic cost model takes from it, and refusals."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from nspsim.cost.profile import Profile, load_profile, parse_profile
from nspsim.cost.profile.tables import AffineFit, TimeTable
from nspsim.plan.refs import profile_fingerprint
from nspsim.workload import WorkloadConfig, build_workload


def v2(**extra: Any) -> dict[str, Any]:
    """A small version-2 profile of the tiny model on the cpu preset."""
    data: dict[str, Any] = {
        "format": "nspsim-profile",
        "version": 2,
        "name": "t",
        "cluster": "cpu",
        "model": "tiny",
        "element_bytes": 4,
        "attn_fwd_flops_by_heads": {"8": [[256, 2e9], [4096, 8e9]], "4": [[256, 1e9], [4096, 4e9]]},
        "attn_bwd_flops_by_heads": {"8": [[256, 1e9], [4096, 5e9]], "4": [[256, 1e9], [4096, 5e9]]},
        "nonattn_fwd_s_by_tokens": [[100, 0.002], [1100, 0.012]],
        "nonattn_bwd_s_by_tokens": [[100, 0.004], [1100, 0.024]],
        "head_fwd_s_by_tokens": [[100, 0.001], [1100, 0.006]],
        "head_bwd_s_by_tokens": [[100, 0.002], [1100, 0.012]],
        "micro_batch_s": 0.003,
        "optimizer_s": 0.02,
        "step_s": 0.005,
        "ranks": 2,
        "collectives": {
            "alltoall": {"2": [4e-4, 1e9]},
            "p2p": {"2": [2e-4, 2e9]},
            "allgather": {"2": [3e-4, 5e8]},
            "reduce_scatter": {"2": [6e-4, 2.5e8]},
        },
        "overlap_slowdown": 1.2,
        "provenance": {"host": "h", "ranks": 2},
    }
    data.update(extra)
    return data


def _write(tmp_path: Path, data: object) -> str:
    path = tmp_path / "p.json"
    path.write_text(json.dumps(data))
    return str(path)


def test_affine_fit_recovers_a_line_exactly() -> None:
    fit = AffineFit.of(TimeTable(tokens=(100.0, 1100.0, 5100.0), seconds=(0.002, 0.012, 0.052)))
    assert fit.intercept == pytest.approx(0.001) and fit.slope == pytest.approx(1e-5)
    assert fit.max_rel_error == pytest.approx(0.0, abs=1e-9)


def test_time_table_extends_with_end_slopes() -> None:
    table = TimeTable(tokens=(100.0, 200.0, 400.0), seconds=(1.0, 2.0, 6.0))
    assert table(150.0) == pytest.approx(1.5)
    assert table(600.0) == pytest.approx(10.0)  # last slope 2/100
    assert table(50.0) == pytest.approx(0.5) and table(0.0) == 0.0


def test_cost_model_uses_every_v2_coefficient(tmp_path: Path) -> None:
    w = build_workload(WorkloadConfig(model="tiny", cluster="cpu", gpus=2, profile=_write(tmp_path, v2())))
    cost = w.cost
    assert w.training.act_bytes == 4 and w.training.param_bytes == 4  # the measured runtime's precision
    na = cost.non_attention(600.0)  # affine fit of two points is exact: 0.001 + 1e-5 * t
    assert na.fwd_compute == pytest.approx(0.007) and na.bwd_compute == pytest.approx(0.014)
    assert cost.head(600.0) == pytest.approx((0.0035, 0.007))
    assert cost.micro_batch_overhead() == 0.003
    assert cost.optimizer_time() == 0.02 and cost.step_overhead() == 0.005
    assert cost.latency(2) == 4e-4 and cost.alltoall_time(1e6, 2) == pytest.approx(4e-4 + 1e-3)
    assert cost.p2p_seconds_per_byte(2) == pytest.approx(1 / 2e9)
    fsdp = cost.fsdp()
    assert fsdp.allgather > 3e-4 and fsdp.reduce_scatter > fsdp.allgather  # lower bandwidth, same bytes x4/4
    # attention: 8 heads at degree 1, 4 heads per rank at Ulysses degree 2 (throughput read at 4096)
    flops = w.model.attention_flops(1.0) * 4096.0**2
    assert cost.attention(np.array([4096]), 1).fwd.compute == pytest.approx(flops / 8e9)
    assert cost.attention(np.array([4096]), 2).fwd.compute == pytest.approx(flops / 2 / 4e9)


@pytest.mark.parametrize(
    "edit, message",
    [
        ({"version": 3}, "not an nspsim profile"),
        ({"collectives": {"broadcast": {}}}, "unknown collective"),
        ({"collectives": {"alltoall": {"2": [1e-4]}}}, r"\[latency seconds, bandwidth bytes/s\]"),
        ({"collectives": {"alltoall": {"2": [1e-4, 119.5]}}}, "outside the plausible range"),
        ({"overlap_slowdown": 0.5}, "overlap_slowdown = 0.5 x is outside"),
        ({"model": None}, "model must be a non-empty string"),
        ({"element_bytes": 3}, "element_bytes must be 1, 2, 4 or 8"),
        ({"element_bytes": "2"}, "element_bytes must be 1, 2, 4 or 8 bytes per element, got '2'$"),  # not "got -1"
        ({"element_bytes": 2.0}, "element_bytes must be 1, 2, 4 or 8 bytes per element, got 2.0$"),
        ({"element_bytes": True}, "got True$"),
        ({"element_bytes": None}, "element_bytes must be a positive integer, got None$"),
        ({"ranks": "2"}, "ranks must be a positive integer <= 1,048,576, got '2'$"),
        ({"ranks": [2]}, r"ranks must be a positive integer <= 1,048,576, got \[2\]$"),
        ({"nonattn_fwd_s_by_tokens": [[100, -1]]}, "non-negative number"),
    ],
)
def test_bad_v2_profiles_fail_with_one_line(tmp_path: Path, edit: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message) as info:
        load_profile(_write(tmp_path, v2(**edit)))
    assert "\n" not in str(info.value)


def test_model_bound_tables_need_a_model() -> None:
    data = v2()
    del data["model"]
    with pytest.raises(ValueError, match="must name it"):
        parse_profile(data)


def test_v2_keys_in_a_version_1_file_say_which_version() -> None:
    with pytest.raises(ValueError, match='need "version": 2'):
        parse_profile({"format": "nspsim-profile", "version": 1, "micro_batch_s": 0.1})


@pytest.mark.parametrize(
    "config, message",
    [
        ({"cluster": "h100", "gpus": 8}, "measured on the cluster preset 'cpu', but the workload uses 'h100'"),
        ({"model": "tiny-moe"}, "measured for the model 'tiny', but the workload trains 'tiny-moe'"),
        ({"gpus": 4}, "measured with 2 ranks sharing the machine, but the workload has 4"),
    ],
)
def test_profile_for_another_machine_or_model_is_refused(tmp_path: Path, config: dict[str, Any], message: str) -> None:
    base = {"model": "tiny", "cluster": "cpu", "gpus": 2, "profile": _write(tmp_path, v2())}
    with pytest.raises(ValueError, match=message):
        build_workload(WorkloadConfig(**{**base, **config}))


def test_version_1_fingerprints_are_unchanged() -> None:
    # digests computed with the version-1 module (before version 2 existed)
    assert profile_fingerprint(load_profile("flexsp-a100")) == "1c96188213d91e44"
    assert profile_fingerprint(Profile()) == "ae62ea0c2350f897"


def test_provenance_does_not_enter_the_fingerprint() -> None:
    a, b = parse_profile(v2()), parse_profile(v2(provenance={"host": "other"}))
    assert profile_fingerprint(a) == profile_fingerprint(b)
    assert profile_fingerprint(a) != profile_fingerprint(parse_profile(v2(micro_batch_s=0.004)))


def test_a_time_table_that_falls_is_refused_and_never_extrapolates_down() -> None:
    from nspsim.cost.profile.tables import TimeTable

    with pytest.raises(ValueError, match="falls from 0.02 s at 4096 tokens to 0.01 s at 8192 tokens"):
        TimeTable(tokens=(1024.0, 4096.0, 8192.0), seconds=(0.005, 0.02, 0.01))
    noisy = TimeTable(tokens=(1024.0, 4096.0, 8192.0), seconds=(0.005, 0.02, 0.019))  # 5% noise is kept
    assert noisy(8192.0) == pytest.approx(0.019) and noisy(65536.0) == pytest.approx(0.019)  # flat, not toward 0
    rising = TimeTable(tokens=(1024.0, 2048.0), seconds=(0.01, 0.02))
    assert rising(4096.0) == pytest.approx(0.04)


def test_a_wait_longer_than_the_work_before_it_is_refused() -> None:
    from nspsim.cost.profile.tables import WaitTable

    with pytest.raises(ValueError, match="waits 900 s after 0.03 s of work"):
        WaitTable(work_s=(0.03, 0.36), wait_s=(900.0, 0.016))
    assert WaitTable(work_s=(0.03, 0.36), wait_s=(0.002, 0.016))(0.36) == pytest.approx(0.016)
