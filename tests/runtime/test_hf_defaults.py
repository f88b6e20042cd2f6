"""nspsim reads a config.json as transformers builds it (nspsim.specs.hf_defaults), checked against the
installed transformers: the defaults table, and on random configs with fields omitted or null, the
head dimension, KV heads, parameters and sliding windows of the model transformers builds on the meta
device."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest
import torch

from nspsim.specs.hf import spec_from_hf_config
from nspsim.specs.hf_defaults import HF_DEFAULTS, QK_NORM, attention_window, normalised, unmodelled_attention
from nspsim_runtime.model import layer_window

transformers = pytest.importorskip("transformers")
huggingface_hub = pytest.importorskip("huggingface_hub")

READ = {  # every config field nspsim reads
    "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim", "vocab_size",
    "intermediate_size", "tie_word_embeddings", "num_experts", "num_local_experts", "num_experts_per_tok",
    "moe_intermediate_size", "shared_expert_intermediate_size", "decoder_sparse_step", "mlp_only_layers",
    "sliding_window", "use_sliding_window", "max_window_layers", "layer_types", "attention_dropout",
    "max_position_embeddings",
}  # fmt: skip


@pytest.mark.parametrize("model_type", sorted(QK_NORM))
def test_the_defaults_table_is_transformers_own(model_type: str) -> None:
    cls = transformers.CONFIG_MAPPING[model_type]
    fields = {f.name: f.default for f in dataclasses.fields(cls) if f.name in READ}
    assert dict(HF_DEFAULTS[model_type]) == fields


def random_config(model_type: str, rng: np.random.Generator) -> dict[str, Any]:
    """Small shapes; head_dim, KV heads and the window fields omitted, null or set at random."""
    heads = int(rng.choice([2, 4, 8]))
    config: dict[str, Any] = {
        "model_type": model_type,
        "hidden_size": heads * int(rng.choice([8, 16])),
        "num_hidden_layers": int(rng.integers(2, 5)),
        "num_attention_heads": heads,
        "intermediate_size": 64,
        "vocab_size": 128,
    }
    if "num_experts" in HF_DEFAULTS[model_type] or "num_local_experts" in HF_DEFAULTS[model_type]:
        key = "num_local_experts" if model_type == "mixtral" else "num_experts"
        config |= {key: 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32}
        if model_type == "qwen2_moe":
            config["shared_expert_intermediate_size"] = 32
    for key, choices in {
        "head_dim": [None, 8, 16],
        "num_key_value_heads": [None, heads, heads // 2],
        "use_sliding_window": [False, True],
        "sliding_window": [None, 0, 64],
        "max_window_layers": [0, 1, 8],
    }.items():
        pick = int(rng.integers(0, len(choices) + 1))  # one more: omit the field
        if pick < len(choices):
            config[key] = choices[pick]
    return config


def built_windows(model: Any, config: Any) -> list[int | None]:
    """The window each attention module of the built model attends within, read as it reads it: its
    own ``sliding_window`` where it keeps one (Qwen), else the config's (Mistral, Mixtral)."""
    windows = []
    for layer in model.model.layers:
        attn = layer.self_attn
        if hasattr(attn, "sliding_window"):
            windows.append(attn.sliding_window)
        else:
            windows.append(config.sliding_window if config.model_type in ("mistral", "mixtral") else None)
    return windows


@pytest.mark.parametrize("model_type", sorted(QK_NORM))
def test_random_configs_read_as_transformers_builds_them(model_type: str) -> None:
    rng = np.random.default_rng(sorted(QK_NORM).index(model_type))
    for _ in range(16):
        raw = random_config(model_type, rng)
        try:
            config = transformers.AutoConfig.for_model(**raw)
            with torch.device("meta"):
                model = transformers.AutoModelForCausalLM.from_config(config)
        except (TypeError, ValueError, huggingface_hub.errors.StrictDataclassFieldValidationError):
            with pytest.raises(ValueError):  # what transformers cannot build, nspsim refuses
                spec_from_hf_config(raw, name="random")
            continue
        attn = model.model.layers[0].self_attn
        head_dim = attn.q_proj.out_features // config.num_attention_heads
        kv_heads = attn.k_proj.out_features // head_dim
        ours = normalised(model_type, raw)
        assert (ours["head_dim"], ours["num_key_value_heads"]) == (head_dim, kv_heads), raw
        windows = built_windows(model, config)
        assert unmodelled_attention(ours) is None and unmodelled_attention(config.to_dict()) is None, raw
        assert attention_window(model_type, config.to_dict()) == attention_window(model_type, ours), raw
        if 0 in windows or config.num_attention_heads % kv_heads:  # a window of 0, or heads KV heads cannot share
            with pytest.raises(ValueError):
                spec_from_hf_config(raw, name="random")
            continue
        spec = spec_from_hf_config(raw, name="random")
        assert [layer_window(spec, i) for i in range(spec.num_layers)] == windows, raw
        built = sum(p.numel() for p in model.parameters())
        uncounted = sum(  # attention biases and Qwen2-MoE's scalar shared-expert gate (nspsim.specs.hf)
            p.numel() for n, p in model.named_parameters() if n.endswith("_proj.bias") or "shared_expert_gate" in n
        )
        assert spec.total_params == built - uncounted, raw
