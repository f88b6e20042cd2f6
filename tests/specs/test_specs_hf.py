"""Model specs from transformers config files: published Qwen3 configs, named tiny configs, one-line errors,
and ``nspsim compare --model config.json``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nspsim.specs.hf import HF_CONFIGS, hf_config, load_hf_config, resolve_model, spec_from_hf_config
from nspsim.specs.model import get_model, ulysses_admits
from nspsim.workload import WorkloadConfig, build_workload

FIXTURES = Path(__file__).parents[1] / "fixtures" / "hf"  # sources named in fixtures/hf/README.md


@pytest.mark.parametrize(
    ("file", "preset", "total", "active"),
    [
        ("Qwen3-30B-A3B.config.json", "qwen3-30b-a3b", 30.5e9, 3.3e9),
        ("Qwen3-235B-A22B.config.json", "qwen3-235b-a22b", 235e9, 22e9),
    ],
)
def test_published_qwen3_configs_give_the_presets_parameter_counts(
    file: str, preset: str, total: float, active: float
) -> None:
    spec, want = load_hf_config(FIXTURES / file), get_model(preset)
    assert spec.total_params == pytest.approx(want.total_params, rel=0.01)
    assert spec.active_params == pytest.approx(want.active_params, rel=0.01)
    assert spec.total_params == pytest.approx(total, rel=0.01)
    assert spec.active_params == pytest.approx(active, rel=0.03)  # the card's 3.3B / 22B are rounded
    same = (
        "num_layers",
        "hidden",
        "num_heads",
        "num_kv_heads",
        "head_dim",
        "vocab",
        "moe",
        "tie_embeddings",
        "qk_norm",
    )
    assert all(getattr(spec, f) == getattr(want, f) for f in same)


def test_named_tiny_configs_have_the_builtin_tiny_shapes() -> None:
    dense, moe = resolve_model("hf-qwen3-tiny"), resolve_model("hf-qwen3-moe-tiny")
    assert dense.total_params == get_model("tiny").total_params
    assert moe.total_params == get_model("tiny-moe").total_params
    assert moe.moe is not None and (moe.moe.num_experts, moe.moe.top_k) == (4, 2)
    assert set(HF_CONFIGS) == {"hf-qwen3-tiny", "hf-qwen3-moe-tiny"}
    assert hf_config("hf-qwen3-tiny") is not hf_config("hf-qwen3-tiny")  # a fresh copy each time


def test_defaults_head_dim_kv_heads_and_dense_ffn() -> None:
    spec = spec_from_hf_config(
        {
            "model_type": "llama",
            "hidden_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "intermediate_size": 128,
            "vocab_size": 10,
        },
        name="toy",
    )
    assert (spec.head_dim, spec.num_kv_heads, spec.dense_ffn, spec.qk_norm, spec.tie_embeddings) == (
        16,
        4,
        128,
        False,
        False,
    )


def test_omitted_fields_take_transformers_defaults() -> None:
    """A Qwen3 config without head_dim is built by transformers with Qwen3Config's 128, not hidden / heads
    (0.6B shapes: hidden 1024, 16 heads); Llama's default is hidden / heads; Qwen2's KV heads default
    to 32 when omitted, to the head count when null."""
    small = {"hidden_size": 1024, "num_hidden_layers": 28, "num_attention_heads": 16, "intermediate_size": 3072}
    qwen3 = spec_from_hf_config({"model_type": "qwen3", **small, "num_key_value_heads": 8}, name="q3")
    assert (qwen3.head_dim, qwen3.num_kv_heads, qwen3.vocab) == (128, 8, 151936)
    llama = spec_from_hf_config({"model_type": "llama", **small}, name="l")
    assert (llama.head_dim, llama.num_kv_heads, llama.vocab) == (64, 16, 32000)
    with pytest.raises(ValueError, match="multiple of num_kv_heads"):  # 16 heads cannot share 32 KV heads
        spec_from_hf_config({"model_type": "qwen2", **small}, name="q2")
    null_kv = spec_from_hf_config({"model_type": "qwen2", **small, "num_key_value_heads": None}, name="q2")
    assert null_kv.num_kv_heads == 16


def _write(tmp_path: Path, text: str, name: str = "config.json") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"model_type": "gpt2"}, "model_type 'gpt2' is not supported"),
        ({"hidden_size": 0}, "'hidden_size' must be a positive integer"),
        ({"use_sliding_window": True, "sliding_window": 0}, "sliding_window must be a token count from 1"),
        ({"attention_chunk_size": 8192}, "chunked attention .attention_chunk_size. is not modelled"),
        ({"attention_dropout": 0.1}, "attention dropout .0.1. is not modelled"),
        ({"attn_logit_softcapping": 30.0}, "soft-capping"),
        ({"tie_word_embeddings": "false"}, "'tie_word_embeddings' must be true or false, got 'false'"),
        ({"attention_dropout": "0.1"}, "'attention_dropout' must be a number in"),
        ({"attention_dropout": -0.1}, "'attention_dropout' must be a number in"),
        ({"is_causal": "false"}, "'is_causal' must be true or false"),
        ({"layer_types": ["full_attention"]}, "'layer_types' has 1 entries for 48 layers"),
        ({"layer_types": "full_attention"}, "'layer_types' must be a list of"),
        ({"layer_types": [["full_attention"]] * 48}, "'layer_types' must be a list of"),
        ({"max_window_layers": "1"}, "'max_window_layers' must be a non-negative integer"),
        ({"max_position_embeddings": "1024"}, "'max_position_embeddings' must be a non-negative integer"),
        ({"num_attention_heads": "32"}, "must be a positive integer"),
        ({"num_key_value_heads": 5}, "multiple of num_kv_heads"),
        ({"mlp_only_layers": [0]}, "mixing dense and MoE"),
        ({"decoder_sparse_step": 2}, "mixing dense and MoE"),
        ({"num_experts_per_tok": 200}, "top_k"),
    ],
)
def test_a_bad_config_is_a_one_line_error(tmp_path: Path, change: dict, message: str) -> None:
    config = {**json.loads((FIXTURES / "Qwen3-30B-A3B.config.json").read_text()), **change}
    config = {k: v for k, v in config.items() if v is not None}
    path = _write(tmp_path, json.dumps(config))
    with pytest.raises(ValueError, match=message) as err:
        load_hf_config(path)
    assert "\n" not in str(err.value) and path in str(err.value)


def test_unreadable_files_and_unknown_names_are_one_line_errors(tmp_path: Path) -> None:
    for path, message in [
        (_write(tmp_path, "{not json", "a.json"), "invalid JSON"),
        (_write(tmp_path, "[1, 2]", "b.json"), "not a transformers config"),
        (str(tmp_path / "missing.json"), "cannot read transformers config"),
    ]:
        with pytest.raises(ValueError, match=message) as err:
            resolve_model(path)
        assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match="unknown model preset 'gpt5'.*config.json"):
        resolve_model("gpt5")


def test_a_workload_resolves_a_config_path() -> None:
    path = str(FIXTURES / "Qwen3-30B-A3B.config.json")
    wl = build_workload(WorkloadConfig(model=path, cluster="h100", gpus=8, tokens_per_batch=64_000, max_context=32_000))
    assert wl.model.name == path and wl.model.total_params == get_model("qwen3-30b-a3b").total_params


def test_compare_runs_on_a_config_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from nspsim.cli.main import main

    config = str(FIXTURES / "Qwen3-30B-A3B.config.json")
    args = ["compare", "--gpus", "8", "--tokens-per-batch", "64k", "--max-context", "32k", "--iters", "1", "--quiet"]
    assert main([*args, "--model", config, "--planners", "static,nsp"]) == 0
    out = capsys.readouterr().out
    assert "nsp" in out and config in out
    bad = _write(tmp_path, "{}")
    assert main([*args, "--model", bad]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and bad in err and "model_type" in err, err


@pytest.mark.parametrize(
    ("heads", "kv_heads", "spmax"),
    [(28, 4, 4), (6, 6, 2), (48, 6, 2), (32, 4, 32), (64, 4, 64)],
)
def test_ulysses_degrees_are_the_ones_the_runtime_can_split(
    tmp_path: Path, heads: int, kv_heads: int, spmax: int
) -> None:
    """Every degree of the SP tree divides the heads (and the KV heads, unless fewer than the degree),
    as nspsim_runtime/backends/ulysses.py requires: 28 heads stop at SP4, not SP16."""
    config = {
        "model_type": "qwen3",
        "hidden_size": heads * 64,
        "num_hidden_layers": 2,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": 64,
        "intermediate_size": 256,
        "vocab_size": 100,
    }
    path = _write(tmp_path, json.dumps(config))
    workload = build_workload(WorkloadConfig(model=path, cluster="h100", gpus=64))
    assert workload.tree.spmax == spmax
    assert all(ulysses_admits(heads, kv_heads, d) for d in workload.tree.degrees)
    ring = build_workload(WorkloadConfig(model=path, cluster="h100", gpus=64, backend="ring"))
    assert ring.tree.spmax == 64  # ring splits the sequence, not the heads


def test_a_size_beyond_any_model_is_one_line() -> None:
    with pytest.raises(ValueError, match="hidden is a 401-digit number; a model dimension is at most 16,777,216"):
        spec_from_hf_config({"model_type": "qwen3", "hidden_size": 10**400}, name="x")


def test_a_context_beyond_the_models_positions_is_warned(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from nspsim.cli.main import main

    config = {
        "model_type": "qwen3",
        "hidden_size": 256,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "head_dim": 64,
        "intermediate_size": 512,
        "vocab_size": 1000,
        "max_position_embeddings": 8192,
    }
    path = _write(tmp_path, json.dumps(config))
    sizes = ["--cluster", "cpu", "--gpus", "2", "--tokens-per-batch", "64k", "--planner", "static"]
    assert main(["plan", "--model", path, *sizes, "--max-context", "32k", "-o", str(tmp_path / "p.json")]) == 0
    assert "--max-context 32K is beyond" in capsys.readouterr().err
    assert main(["plan", "--model", path, *sizes, "--max-context", "8k", "-o", str(tmp_path / "q.json")]) == 0
    assert "max_position_embeddings" not in capsys.readouterr().err
