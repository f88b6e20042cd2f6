"""Model, cluster, training and memory specs: published figures, derived budgets, validation."""

from __future__ import annotations

import pytest

from helpers import toy_cluster, toy_model
from nspsim.specs.clusters import CLUSTER_PRESETS, get_cluster
from nspsim.specs.memory import memory_model, state_bytes_per_gpu
from nspsim.specs.model import MODEL_PRESETS, ModelSpec, MoESpec, get_model
from nspsim.specs.training import TrainingSpec, training_preset


@pytest.mark.parametrize(
    "name, total, active, spmax",
    [("qwen3-30b-a3b", 30.5e9, 3.3e9, 32), ("qwen3-235b-a22b", 235e9, 22e9, 64)],
)
def test_qwen3_parameter_counts_match_published(name: str, total: float, active: float, spmax: int) -> None:
    model = get_model(name)
    assert model.total_params == pytest.approx(total, rel=0.03)
    assert model.active_params == pytest.approx(active, rel=0.03)
    assert model.max_ulysses_degree == spmax


def test_toy_parameter_count_by_hand() -> None:
    m = toy_model()
    # attention 64*(64+128) + 64*64, FFN 3*64*128, norms 2*64; embeddings 2*10*64 + final norm 64.
    assert m.params_per_layer == 16_384 + 24_576 + 128
    assert m.total_params == m.params_per_layer + 1_280 + 64
    assert m.dense_flops_per_token_layer == 2 * (16_384 + 24_576)


def test_every_preset_builds() -> None:
    for name in MODEL_PRESETS:
        assert get_model(name).name == name
    for name in CLUSTER_PRESETS:
        spec = get_cluster(name, 16)
        assert spec.num_nodes == 2 and spec.label == f"{name}x16"
    assert get_cluster("h100", 4).gpus_per_node == 4


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: get_model("gpt5"), "unknown model preset 'gpt5'"),
        (lambda: get_cluster("tpu"), "unknown cluster preset 'tpu'"),
        (lambda: get_cluster("h100", 12), "not a whole number of 8-GPU hosts"),
        (
            lambda: ModelSpec(
                name="x", num_layers=1, hidden=8, num_heads=3, num_kv_heads=2, head_dim=2, vocab=4, dense_ffn=4
            ),
            "multiple of num_kv_heads",
        ),
        (
            lambda: ModelSpec(name="x", num_layers=1, hidden=8, num_heads=2, num_kv_heads=2, head_dim=2, vocab=4),
            "exactly one of",
        ),
        (lambda: MoESpec(num_experts=2, top_k=4, expert_ffn=8), "top_k"),
        (lambda: TrainingSpec(expert_parallel=3), "power of two"),
        (lambda: TrainingSpec(backend="mesh"), "unknown SP backend"),
    ],
)
def test_invalid_specs_raise_actionable_errors(call: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call()  # type: ignore[operator]


def test_cluster_fingerprint_changes_with_any_field() -> None:
    assert get_cluster("h100", 64).fingerprint() == get_cluster("h100", 64).fingerprint()
    assert get_cluster("h100", 64).fingerprint() != get_cluster("h200", 64).fingerprint()
    assert get_cluster("h100", 64).fingerprint() != get_cluster("h100", 32).fingerprint()


def test_state_bytes_by_hand() -> None:
    m = toy_model()
    assert state_bytes_per_gpu(m, TrainingSpec(), 8) == m.total_params * 16 / 8
    assert state_bytes_per_gpu(m, TrainingSpec(optimizer_offload=True), 8) == m.total_params * 4 / 8


def test_token_budget_by_hand() -> None:
    training = TrainingSpec(reserved_bytes=0, hbm_usable_fraction=1.0, fsdp_prefetch_layers=0)
    mem = memory_model(toy_model(), toy_cluster(), training)
    m = toy_model()
    keep = 2 * 64 * 2
    working = 2 * (6 * 64 + 64 + 2 * 64 + 3 * 128) * 2
    states = m.total_params * 16 / 8
    buffers = m.params_per_layer * 4 + m.embedding_params * 2
    assert mem.keep_bytes_per_token == keep and mem.working_bytes_per_token == working
    assert mem.token_budget == int((1e9 - states - buffers) // (keep + working))
    # Attention bytes per token: Q, K, V, O in bf16 plus fp32 LSE per head; KV replication past 4 heads.
    assert mem.attention_bytes_per_token(4) == (2 * 64 + 2 * 64) * 2 + 4 * 4
    assert mem.attention_bytes_per_token(8) == mem.attention_bytes_per_token(4) + 4 * 2 * 16 * 2


def test_token_budget_override_and_impossible_budget() -> None:
    assert (
        memory_model(toy_model(), toy_cluster(), TrainingSpec(token_budget=1234, reserved_bytes=0)).token_budget == 1234
    )
    with pytest.raises(ValueError, match="impossible memory budget"):
        memory_model(get_model("qwen3-235b-a22b"), get_cluster("h100", 8), TrainingSpec())


def test_paper_regimes() -> None:
    """Qwen3-30B fits 2M tokens on 64 H100s with room to spare; 235B is memory-bound even on H200."""
    small = memory_model(get_model("qwen3-30b-a3b"), get_cluster("h100", 64), training_preset("fsdp"))
    big = memory_model(get_model("qwen3-235b-a22b"), get_cluster("h200", 64), training_preset("paper-235b"))
    per_gpu = 2 * 1024**2 / 64
    assert small.token_budget > 2 * per_gpu
    assert big.token_budget > per_gpu
    saved = big.activation_capacity / (
        big.keep_bytes_per_token + big.working_bytes_per_token + big.attention_bytes_per_token(8)
    )
    assert saved < per_gpu  # keeping every attention output does not fit: recomputation is needed
