"""Model specs from Hugging Face transformers configs (``config.json``), without importing transformers.

A transformers model is described by its config: a flat JSON object (``hidden_size``,
``num_hidden_layers``, ``num_attention_heads``, ...). :func:`spec_from_hf_config` reads the fields a
:class:`~nspsim.specs.model.ModelSpec` needs from such a mapping, so the planners and the simulator see
the shapes of a user's model: hidden size, layers, attention and KV heads, head dimension,
vocabulary, tied embeddings, the dense
FFN width (``intermediate_size``) or, for MoE models, experts, top-k, expert and shared-expert widths.
A field the config omits takes transformers' own default for its architecture. A causal sliding
window (``sliding_window``, on the layers the architecture applies it to) becomes the spec's window;
attention features nspsim does not model (chunked attention, soft-capping, attention dropout,
non-causal attention) are refused with the runtime's phrase (:mod:`nspsim.specs.hf_defaults`).
QK-norm follows the architecture (``model_type``): Qwen3 has it, Llama, Mistral, Qwen2 and Mixtral do
not. :func:`resolve_model` is how a workload names its model: a preset name, one of the
:data:`HF_PRESETS` (the tiny transformers models the runtime trains, whose configs are written here
so that nspsim and the runtime build from the same values), or the path of a ``config.json``.

Trade-off: the spec is a uniform decoder (every layer the same), so configs that mix dense and MoE layers
(``decoder_sparse_step`` > 1, ``mlp_only_layers``, ``first_k_dense_replace``), or that the spec cannot
describe, are refused with a one-line ``ValueError`` rather than approximated; attention biases, Qwen2-MoE's
scalar shared-expert gate and other small per-architecture extras are not counted (under 0.1% of the
parameters of the published Qwen3 configs). A spec read from a file is named by the path as given, so a plan
made for it resolves the same file again.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nspsim.jsonfile import read_json
from nspsim.specs.hf_defaults import EXPERT_KEYS, QK_NORM, attention_window, normalised, unmodelled_attention
from nspsim.specs.model import MODEL_PRESETS, ModelSpec, MoESpec, get_model

QK_NORM_ARCHITECTURES = QK_NORM
"""The ``model_type`` values read, and whether the architecture normalises Q and K per head."""


def _qwen3_tiny() -> dict[str, Any]:
    """A dense Qwen3 config with the built-in ``tiny`` model's shapes (2 layers, hidden 64)."""
    return {
        "model_type": "qwen3",
        "vocab_size": 256,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "head_dim": 8,
        "tie_word_embeddings": True,
        "rope_theta": 1_000_000.0,
        "rms_norm_eps": 1e-6,
        "max_position_embeddings": 32_768,
    }


def _qwen3_moe_tiny() -> dict[str, Any]:
    """A Qwen3-MoE config with the built-in ``tiny-moe`` model's shapes (4 experts, top-2)."""
    config = _qwen3_tiny()
    config.update(
        model_type="qwen3_moe",
        num_experts=4,
        num_experts_per_tok=2,
        moe_intermediate_size=32,
        norm_topk_prob=True,
        decoder_sparse_step=1,
        mlp_only_layers=[],
    )
    return config


HF_CONFIGS: Mapping[str, Any] = {"hf-qwen3-tiny": _qwen3_tiny, "hf-qwen3-moe-tiny": _qwen3_moe_tiny}
"""Named transformers configs (functions returning a fresh ``config.json`` mapping)."""


def hf_config(name: str) -> dict[str, Any]:
    """A fresh copy of the named transformers config (:data:`HF_CONFIGS`)."""
    try:
        return dict(HF_CONFIGS[name]())
    except KeyError:
        raise ValueError(f"unknown transformers model {name!r} (known: {', '.join(HF_CONFIGS)})") from None


def _int(config: Mapping[str, Any], key: str, where: str, default: int | None = None) -> int:
    value = config.get(key, default)
    if value is None:
        raise ValueError(f"{where}: the config has no {key!r}; a transformers decoder config needs it")
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{where}: {key!r} must be a positive integer, got {value!r}")
    return value


def _moe(model_type: str, config: Mapping[str, Any], where: str) -> MoESpec | None:
    """The MoE part of a config, or None for a dense model; uniform MoE layers only."""
    if model_type not in EXPERT_KEYS:
        return None
    experts_key, ffn_key = EXPERT_KEYS[model_type]
    if (
        config.get("decoder_sparse_step", 1) not in (1, None)
        or config.get("mlp_only_layers")
        or config.get("first_k_dense_replace")
    ):
        raise ValueError(
            f"{where}: layers mixing dense and MoE FFNs (decoder_sparse_step, mlp_only_layers, "
            "first_k_dense_replace) are not supported; the spec describes one uniform layer"
        )
    shared = config.get("shared_expert_intermediate_size") or 0
    sizes = {
        "num_experts": _int(config, experts_key, where),
        "top_k": _int(config, "num_experts_per_tok", where),
        "expert_ffn": _int(config, ffn_key, where),
        "shared_expert_ffn": _int(config, "shared_expert_intermediate_size", where) if shared else 0,
    }
    try:
        return MoESpec(**sizes)
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None


def spec_from_hf_config(config: Mapping[str, Any], *, name: str) -> ModelSpec:
    """The :class:`ModelSpec` of a transformers decoder config (see the module docstring); ``name`` names
    the spec and prefixes every one-line ``ValueError``."""
    if not isinstance(config, Mapping):
        raise ValueError(f"{name}: not a transformers config (a JSON object), got {type(config).__name__}")
    model_type = config.get("model_type")
    if not isinstance(model_type, str) or model_type not in QK_NORM_ARCHITECTURES:
        raise ValueError(
            f"{name}: model_type {model_type!r} is not supported (supported: {', '.join(QK_NORM_ARCHITECTURES)})"
        )
    try:
        config = normalised(model_type, config)  # transformers' defaults and rules (nspsim.specs.hf_defaults)
    except ValueError as exc:
        raise ValueError(f"{name}: {exc}") from None
    feature = unmodelled_attention(config)
    if feature is not None:
        raise ValueError(
            f"{name}: {feature} is not modelled (nspsim simulates causal attention, full or within a sliding "
            f"window; the NSP runtime refuses it too: 'the NSP attention bridge does not support {feature}')"
        )
    window, window_layers = attention_window(model_type, config)
    heads = _int(config, "num_attention_heads", name)
    hidden = _int(config, "hidden_size", name)
    moe = _moe(model_type, config, name)
    try:
        return ModelSpec(
            name=name,
            num_layers=_int(config, "num_hidden_layers", name),
            hidden=hidden,
            num_heads=heads,
            num_kv_heads=_int(config, "num_key_value_heads", name),
            head_dim=_int(config, "head_dim", name),
            vocab=_int(config, "vocab_size", name),
            dense_ffn=0 if moe is not None else _int(config, "intermediate_size", name),
            moe=moe,
            tie_embeddings=config["tie_word_embeddings"],
            qk_norm=QK_NORM_ARCHITECTURES[model_type],
            sliding_window=window,
            window_layers=window_layers,
        )
    except ValueError as exc:
        text = str(exc).replace(f"model {name!r}: ", "")  # ModelSpec names itself; the file name says it
        raise ValueError(text if text.startswith(f"{name}:") else f"{name}: {text}") from None


def max_position(name: str) -> int | None:
    """The ``max_position_embeddings`` (transformers' default where omitted) of the transformers config
    a model name resolves to, or ``None`` for a preset or a config that does not say."""
    if name in MODEL_PRESETS:
        return None
    try:
        config = hf_config(name) if name in HF_CONFIGS else read_json(name, "transformers config")
    except ValueError:
        return None
    model_type = config.get("model_type") if isinstance(config, dict) else None
    if not isinstance(model_type, str) or model_type not in QK_NORM:
        return None
    value = normalised(model_type, config).get("max_position_embeddings")
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def load_hf_config(path: str | Path) -> ModelSpec:
    """The spec of the transformers ``config.json`` at ``path`` (named by the path as given); a one-line
    ``ValueError`` for a file that cannot be read or is not a supported decoder config."""
    return spec_from_hf_config(read_json(path, "transformers config"), name=str(path))


def is_config_path(name: str) -> bool:
    """Whether a model name is the path of a config file rather than a preset name."""
    return name.endswith(".json") or "/" in name or Path(name).is_file()


def resolve_model(name: str) -> ModelSpec:
    """A model by name: a preset (:data:`~nspsim.specs.model.MODEL_PRESETS`), a named transformers config
    (:data:`HF_CONFIGS`) or the path of a transformers ``config.json``; a one-line ``ValueError`` otherwise."""
    if name in MODEL_PRESETS:
        return get_model(name)
    if name in HF_CONFIGS:
        return spec_from_hf_config(hf_config(name), name=name)
    if is_config_path(name):
        return load_hf_config(name)
    known = ", ".join([*MODEL_PRESETS, *HF_CONFIGS])
    raise ValueError(f"unknown model preset {name!r} (known: {known}; or the path of a transformers config.json)")
