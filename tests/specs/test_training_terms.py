"""The model terms issue 22 added, by hand on the toy specs (tests/support/helpers.py: hidden 64, four heads
of 16, four KV heads, gated FFN 128, vocabulary 10, HBM 1e11 B/s at stream efficiency 1): activation
checkpointing's recompute FLOPs and kept bytes, element-wise HBM traffic, the all-to-all peer latency,
training presets and their flags."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from helpers import TOY_GPU, make_batch, toy_cluster, toy_model
from nspsim.cost.analytic import AnalyticCostModel
from nspsim.cost.elementwise import elementwise_traffic
from nspsim.execution.activation import RecomputePolicy, plan_activations
from nspsim.plan import make_plan
from nspsim.sp_tree import Node
from nspsim.specs.memory import kept_elements_per_token_layer, memory_model
from nspsim.specs.training import Checkpointing, TrainingSpec, parse_training_label, training_label, training_preset
from nspsim.sweep.spec import parse_spec
from nspsim.workload import WorkloadConfig, build_workload

GEMM = 2e12  # the toy GPU's matmul rate


def cost(checkpointing: str = "selective", fused: bool = True, elementwise: bool = True) -> AnalyticCostModel:
    training = TrainingSpec(checkpointing=checkpointing, fused_elementwise=fused)  # type: ignore[arg-type]
    return AnalyticCostModel(
        model=toy_model(), cluster=toy_cluster(), training=training, dense_gemm_efficiency=1.0, elementwise=elementwise
    )


def test_forward_matmuls_sum_to_the_dense_flops() -> None:
    # q, k, v, o: 2*64*64 each; gate, up, down: 2*64*128 each
    flops = [f for f, _ in toy_model().forward_matmuls()]
    assert flops == [8192.0] * 4 + [16384.0] * 3
    assert sum(flops) == toy_model().dense_flops_per_token_layer == 81_920


@pytest.mark.parametrize(
    ("mode", "recomputed"),
    [("none", 0.0), ("selective", 49_152.0), ("op", 8192.0 + 8192.0 + 16384.0), ("full", 81_920.0)],
)
def test_backward_reruns_what_checkpointing_dropped(mode: str, recomputed: float) -> None:
    c = cost(mode, elementwise=False)
    assert c.recompute_flops_per_token() == recomputed  # op: wk, wo and the up projection (every second)
    na = c.non_attention(1000)
    assert na.fwd_compute == pytest.approx(1000 * 81_920 / GEMM)
    assert na.bwd_compute == pytest.approx(1000 * (2 * 81_920 + recomputed) / GEMM)


@pytest.mark.parametrize(("mode", "kept"), [("full", 64), ("selective", 128), ("op", 384), ("none", 1024)])
def test_kept_activations_per_checkpointing(mode: str, kept: int) -> None:
    # op keeps the input and the 1st, 3rd, 5th and 7th matmul outputs: q 64, v 64, gate 128, down 64.
    # none keeps 4h (norm inputs and outputs), Q, K, V before and after RoPE (2q + 3kv), the FFN's
    # gate, up and down outputs (320) and the activation output (128).
    assert kept_elements_per_token_layer(toy_model(), Checkpointing(mode)) == kept
    memory = memory_model(toy_model(), toy_cluster(), TrainingSpec(checkpointing=mode, reserved_bytes=0))  # type: ignore[arg-type]
    assert memory.keep_bytes_per_token == kept * 2
    assert memory.keeps_attention == (mode != "full")


def test_full_checkpointing_reruns_every_samples_attention() -> None:
    cluster = toy_cluster(2, 2)
    plan = make_plan(
        planner="manual",
        cluster=cluster,
        model=toy_model(),
        batch=make_batch([100, 50]),
        spmax=2,
        token_budget=10**6,
        nodes=[Node(1, 0), Node(1, 1)],
        recompute=[False, False],
    )
    for mode, policy, remat in (("full", RecomputePolicy.FULL_RECOMPUTE, [True, True]),
                                ("selective", RecomputePolicy.TREE_MARKS, [False, False])):  # fmt: skip
        memory = memory_model(toy_model(), cluster, TrainingSpec(checkpointing=mode, reserved_bytes=0))  # type: ignore[arg-type]
        act = plan_activations(plan, memory)
        assert act.policy is policy and act.remat.tolist() == remat


def test_elementwise_traffic_by_hand() -> None:
    fused = elementwise_traffic(toy_model(), fused=True)
    # two add+norm (4h each), RoPE on q and k (2(q + kv)), SwiGLU (3f)
    assert fused.fwd == 2 * 4 * 64 + 2 * (64 + 64) + 3 * 128 == 1152
    assert fused.ffn_fwd == 4 * 64 + 3 * 128 and fused.bwd == 2 * 1152 and fused.loss == (10.0, 20.0)
    eager = elementwise_traffic(toy_model(), fused=False)
    # add 3h + fp32 norm 18h twice, RoPE 8(q + kv), silu and multiply 5f
    assert eager.fwd == 2 * 21 * 64 + 8 * 128 + 5 * 128 == 4352 and eager.loss == (70.0, 70.0)
    plain = elementwise_traffic(replace(toy_model(), ffn_gated=False), fused=True)
    assert plain.fwd == 1152 - 3 * 128 + 2 * 128  # GELU reads and writes f once


@pytest.mark.parametrize(
    ("mode", "rerun"), [("none", 0), ("selective", 4 * 64 + 3 * 128), ("op", 1152), ("full", 1152)]
)
def test_elementwise_time_is_bytes_over_the_streaming_bandwidth(mode: str, rerun: int) -> None:
    with_ew, without = cost(mode), cost(mode, elementwise=False)
    fwd, bwd = with_ew.elementwise_seconds_per_token()
    assert fwd == pytest.approx(1152 * 2 / 1e11) and bwd == pytest.approx((2304 + rerun) * 2 / 1e11)
    a, b = with_ew.non_attention(1000), without.non_attention(1000)
    assert a.fwd_compute - b.fwd_compute == pytest.approx(1000 * fwd)
    assert with_ew.head(1000)[1] - without.head(1000)[1] == pytest.approx(1000 * 20 * 2 / 1e11)
    half = replace(TOY_GPU, hbm_stream_efficiency=0.5)
    slower = replace(with_ew, cluster=replace(toy_cluster(), gpu=half))
    assert slower.elementwise_seconds_per_token()[0] == pytest.approx(2 * fwd)


def test_alltoall_latency_adds_one_peer_latency_per_peer() -> None:
    cluster = replace(toy_cluster(8, 2), alltoall_peer_latency_s=1e-6)
    c = replace(cost(), cluster=cluster)
    assert c.alltoall_latency(2) == pytest.approx(1e-5 + 1e-6)  # inside a host: 10 us + 1 peer
    assert c.alltoall_latency(8) == pytest.approx(1e-4 + 7e-6)  # across hosts: 100 us + 7 peers
    assert c.alltoall_time(0.0, 8) == pytest.approx(1e-4 + 7e-6)
    assert c.latency(8) == pytest.approx(1e-4)  # point-to-point and ring collectives: no peer term
    assert c.node_overhead(2)[0] == pytest.approx(2 * (1e-5 + 1e-6))  # Ulysses: two all-to-alls


def test_training_presets_and_overrides() -> None:
    paper = training_preset("paper-235b")
    assert paper.expert_parallel == 8 and paper.optimizer_offload
    assert training_preset("fsdp", checkpointing="full").checkpointing is Checkpointing.FULL
    label = training_label(training_preset("paper-235b", checkpointing="op"))
    assert TrainingSpec(**parse_training_label(label)) == training_preset("paper-235b", checkpointing="op")
    with pytest.raises(ValueError, match="not a training-settings label"):
        parse_training_label("checkpointing=full speed=3")
    with pytest.raises(ValueError, match="unknown training preset 'x'"):
        training_preset("x")
    with pytest.raises(ValueError, match="unknown checkpointing mode 'most'"):
        TrainingSpec(checkpointing="most")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown attention kernel"):
        WorkloadConfig(attention_kernel="fa9")  # type: ignore[arg-type]
    # the model name no longer chooses the training setup
    assert build_workload(WorkloadConfig(model="qwen3-235b-a22b", cluster="h200")).training.expert_parallel == 1
    wl = build_workload(WorkloadConfig(model="qwen3-235b-a22b", cluster="h200", training="paper-235b"))
    assert wl.training.expert_parallel == 8 and wl.training.optimizer_offload


def test_attention_kernel_choice_prices_attention() -> None:
    fa2 = build_workload(WorkloadConfig(attention_kernel="fa2")).cost  # type: ignore[arg-type]
    fa3 = build_workload(WorkloadConfig(attention_kernel="fa3")).cost  # type: ignore[arg-type]
    L = np.array([16384])
    assert fa3.attention(L, 1).fwd.compute < fa2.attention(L, 1).fwd.compute
    with pytest.raises(ValueError, match="'fa3' has no published curve for a100"):
        build_workload(WorkloadConfig(cluster="a100", attention_kernel="fa3"))  # type: ignore[arg-type]


def test_sweep_specs_take_training_settings() -> None:
    spec = parse_spec(
        {"workload": {"training": "paper-235b", "optimizer_offload": False}, "axes": {"checkpointing": ["op", "full"]}}
    )
    points = spec.points()
    assert [p.checkpointing for p in points] == ["op", "full"] and not points[0].training_spec().optimizer_offload
    with pytest.raises(ValueError, match=r"\[workload\] optimizer_offload: true or false"):
        parse_spec({"workload": {"optimizer_offload": "yes"}})


def test_ring_steps_pay_their_fp32_merge() -> None:
    # Degree 2, one 1000-token sample: 500 tokens per GPU; forward merge 10 bytes per query-width element
    # plus 12 per head, backward the same over dQ, dK and dV; links fast enough that compute bounds each step.
    fast = replace(toy_cluster(), nvlink_bw=1e15, intra_latency_s=0.0)
    training = TrainingSpec(backend="ring")  # type: ignore[arg-type]
    plain = AnalyticCostModel(model=toy_model(), cluster=fast, training=training, attn_half_length=0.0,
                              elementwise=False)  # fmt: skip
    merged = replace(plain, elementwise=True)
    L = np.array([1000])
    fwd_merge = 500 * (10 * 64 + 12 * 4) / 1e11
    bwd_merge = 500 * (10 * (64 + 2 * 64) + 12 * 4) / 1e11
    a, b = merged.attention(L, 2), plain.attention(L, 2)
    assert a.fwd.compute - b.fwd.compute == pytest.approx(fwd_merge)  # step 2 merges into step 1's result
    assert a.bwd.compute - b.bwd.compute == pytest.approx(bwd_merge)


def test_settings_that_cannot_apply_are_refused() -> None:
    with pytest.raises(ValueError, match="expert_parallel 8 needs an MoE model; tiny is dense"):
        build_workload(WorkloadConfig(model="tiny", gpus=8, expert_parallel=8))
    with pytest.raises(ValueError, match="expert_parallel 16 exceeds the 8 GPUs"):
        WorkloadConfig(model="tiny-moe", gpus=8, expert_parallel=16)
    with pytest.raises(ValueError, match="fsdp_prefetch_layers 5 exceeds tiny's 2 layers"):
        build_workload(WorkloadConfig(model="tiny", gpus=8, fsdp_prefetch_layers=5))
    with pytest.raises(ValueError, match="'fa3' has no published curve for a100"):
        WorkloadConfig(cluster="a100", attention_kernel="fa3")  # type: ignore[arg-type]  # at config time


def test_plans_record_their_training_settings_and_simulate_uses_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    from nspsim.cli.main import main

    plan = tmp_path / "p.json"
    common = ["--model", "tiny-moe", "--gpus", "8", "--tokens-per-batch", "64k", "--max-context", "16k"]
    assert main(["plan", *common, "--checkpointing", "full", "--expert-parallel", "2", "-o", str(plan)]) == 0
    capsys.readouterr()
    assert main(["simulate", str(plan), "--json"]) == 0  # the plan's own settings, no warning
    out = capsys.readouterr()
    config = json.loads(out.out)["config"]
    assert out.err == "" and (config["checkpointing"], config["expert_parallel"]) == ("full", 2)
    assert main(["simulate", str(plan), "--json", "--checkpointing", "none"]) == 0  # a flag overrides, with a warning
    out = capsys.readouterr()
    assert json.loads(out.out)["config"]["checkpointing"] == "none"
    assert "made with training settings 'checkpointing=full" in out.err and "'checkpointing=none" in out.err


def test_a_sweep_can_vary_training_settings(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import pandas as pd

    from nspsim.cli.main import main

    spec = tmp_path / "s.toml"
    spec.write_text(
        '[workload]\nmodel = "tiny-moe"\ngpus = 8\ntokens_per_batch = "64k"\nmax_context = "16k"\n'
        '[axes]\ncheckpointing = ["none", "full"]\n[run]\nplanners = ["static"]\niters = 1\n'
    )
    assert main(["sweep", str(spec), "-o", str(tmp_path / "out"), "--jobs", "1"]) == 0
    assert "checkpointing=full" in capsys.readouterr().out
    rows = pd.read_parquet(tmp_path / "out" / "results.parquet")
    assert sorted(rows["checkpointing"]) == ["full", "none"]
