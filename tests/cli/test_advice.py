"""Error advice names real flags and only what can help on the workload at hand (issue 15, item 19):
optimizer offload only when it is off (``--optimizer-offload``), no "a larger spmax" when spmax is at
its limit."""

from __future__ import annotations

import pytest

from nspsim.planners import get_planner
from nspsim.specs.clusters import get_cluster
from nspsim.specs.memory import memory_model
from nspsim.specs.model import get_model
from nspsim.specs.training import training_preset
from nspsim.workload import WorkloadConfig, build_workload


def _memory_error(model: str, cluster: str, gpus: int) -> str:
    spec = get_model(model)
    with pytest.raises(ValueError, match="impossible memory budget") as error:
        preset = "paper-235b" if spec.name == "qwen3-235b-a22b" else "fsdp"
        memory_model(spec, get_cluster(cluster, gpus), training_preset(preset))
    return str(error.value)


def test_memory_advice_names_flags_that_help() -> None:
    text = _memory_error("qwen3-235b-a22b", "h100", 8)
    assert "offload" not in text  # the paper's 235B setup offloads already
    assert "more GPUs (--gpus" in text and "--cluster h100-96g or h20 or h200" in text and "--model" in text
    on_h200 = _memory_error("qwen3-235b-a22b", "h200", 1)
    assert "--gpus" in on_h200 and "--cluster" not in on_h200  # no preset has more memory per GPU than H200
    buffers_alone = _memory_error("qwen3-30b-a3b", "cpu", 2)  # the per-layer buffers alone overflow a CPU rank
    assert "--gpus" not in buffers_alone and "--cluster a100 or a100-40g or h100" in buffers_alone
    assert "offload" not in buffers_alone  # the per-layer buffers are not optimizer states
    on_fsdp = str(
        pytest.raises(
            ValueError, memory_model, get_model("qwen3-235b-a22b"), get_cluster("h100", 8), training_preset("fsdp")
        ).value
    )
    assert "--optimizer-offload" in on_fsdp


def _infeasible(**config: object) -> str:
    workload = build_workload(WorkloadConfig(**config))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="fits no admissible SP group") as error:
        get_planner("static").plan(workload.sampler.batch(0), workload)
    return str(error.value)


def test_feasibility_advice_suggests_a_larger_spmax_only_below_its_limit() -> None:
    at_limit = _infeasible(token_budget=100)  # Qwen3-30B, Ulysses: spmax 32 = its attention heads
    assert "spmax" not in at_limit.split(";")[-1] and "larger spmax" not in at_limit
    assert "use --backend ring (degrees up to 64)" in at_limit and "lower --max-context (now 192K)" in at_limit
    assert "raise --token-budget (the memory model fits" in at_limit  # the override is below what fits
    below = _infeasible(token_budget=100, spmax=4)
    assert "raise --spmax (up to 32)" in below and "--backend" not in below
    ring = _infeasible(token_budget=100, backend="ring")  # ring at 64 GPUs: only more GPUs raise spmax
    assert "use more GPUs (--gpus) for a larger spmax" in ring and "--backend" not in ring


def test_feasibility_advice_without_an_override_does_not_suggest_one() -> None:
    text = _infeasible(gpus=8, tokens_per_batch=2 * 1024**2, max_context=2 * 1024**2, trace="code")
    assert "--token-budget" not in text and "lower --max-context" in text
