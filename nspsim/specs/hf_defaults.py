"""What transformers makes of a ``config.json``: its defaults for the fields a config omits, and the
rules its config classes and attention modules apply, for the architectures nspsim reads.

nspsim reads the JSON without importing transformers, but a model is what transformers builds from
it, so every fact is taken as transformers takes it:

* :data:`HF_DEFAULTS` - the dataclass field defaults of transformers 5.24.0's ``Qwen3Config``,
  ``Qwen3MoeConfig``, ``Qwen2Config``, ``Qwen2MoeConfig``, ``LlamaConfig``, ``MistralConfig`` and
  ``MixtralConfig`` (``src/transformers/models/<type>/configuration_<type>.py``) for the fields read
  here; a field the JSON omits takes this value. A Qwen3 config without ``head_dim`` is thus built
  with 128, not hidden / heads.
* :func:`normalised` - the rules applied after the defaults: ``num_key_value_heads`` null means one KV
  head per query head; ``head_dim`` null or absent where the class has no such field (Qwen2,
  Qwen2-MoE, Qwen3-MoE) means hidden / heads, as their attention modules read it; the sliding window
  is kept only when ``use_sliding_window`` is true (Qwen2/Qwen3/Qwen3-MoE keep null otherwise,
  Qwen2-MoE 0), and Qwen2/Qwen3/Qwen2-MoE derive ``layer_types`` from it as their classes do.
* :func:`unmodelled_attention` - the attention features nspsim does not model and the NSP runtime
  does not run (chunked attention, logit soft-capping, attention dropout, non-causal attention), as
  the phrase the runtime's one-line error uses (``nspsim_runtime/hf/bridge.py`` calls it on
  transformers' own config, nspsim on :func:`normalised`);
* :func:`attention_window` - the causal sliding window both model and run, read per layer as the
  attention modules read it: from ``layer_types`` where the class has them, else ``sliding_window``
  itself on every layer (Mistral, Mixtral, Qwen3-MoE).

``tests/runtime/test_hf_defaults.py`` checks the table and the rules against the installed
transformers (the configs it builds and the parameters of the models it builds on the meta device).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

_QWEN_DENSE = {
    "hidden_size": 4096,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 32,
    "vocab_size": 151936,
    "intermediate_size": 22016,
    "tie_word_embeddings": False,
    "sliding_window": 4096,
    "use_sliding_window": False,
    "max_window_layers": 28,
    "layer_types": None,
    "attention_dropout": 0.0,
    "max_position_embeddings": 32768,
}
_MISTRAL = {
    "hidden_size": 4096,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": None,
    "vocab_size": 32000,
    "intermediate_size": 14336,
    "tie_word_embeddings": False,
    "attention_dropout": 0.0,
    "max_position_embeddings": 131072,
}
HF_DEFAULTS: Mapping[str, Mapping[str, Any]] = {
    "qwen3": {**_QWEN_DENSE, "head_dim": 128},
    "qwen2": _QWEN_DENSE,
    "qwen3_moe": {
        "hidden_size": 2048,
        "num_hidden_layers": 24,
        "num_attention_heads": 32,
        "num_key_value_heads": 4,
        "vocab_size": 151936,
        "intermediate_size": 6144,
        "tie_word_embeddings": False,
        "num_experts": 128,
        "num_experts_per_tok": 8,
        "moe_intermediate_size": 768,
        "decoder_sparse_step": 1,
        "mlp_only_layers": None,
        "sliding_window": 4096,
        "use_sliding_window": False,
        "attention_dropout": 0.0,
        "max_position_embeddings": 32768,
    },
    "qwen2_moe": {  # Qwen2's dense fields at MoE sizes, plus the MoE fields
        **_QWEN_DENSE,
        "hidden_size": 2048,
        "num_hidden_layers": 24,
        "num_attention_heads": 16,
        "num_key_value_heads": 16,
        "intermediate_size": 5632,
        "num_experts": 60,
        "num_experts_per_tok": 4,
        "moe_intermediate_size": 1408,
        "shared_expert_intermediate_size": 5632,
        "decoder_sparse_step": 1,
        "mlp_only_layers": None,
    },
    "llama": {
        "hidden_size": 4096,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": None,
        "head_dim": None,
        "vocab_size": 32000,
        "intermediate_size": 11008,
        "tie_word_embeddings": False,
        "attention_dropout": 0.0,
        "max_position_embeddings": 2048,
    },
    "mistral": {**_MISTRAL, "sliding_window": 4096},
    "mixtral": {**_MISTRAL, "num_local_experts": 8, "num_experts_per_tok": 2, "sliding_window": None},
}
"""Per ``model_type``, transformers' default of every field read here that its config class has."""

NULLABLE: Mapping[str, frozenset[str]] = {
    "qwen3": frozenset({"num_key_value_heads"}),
    "qwen2": frozenset({"num_key_value_heads"}),
    "qwen2_moe": frozenset(),
    "qwen3_moe": frozenset(),
    "llama": frozenset({"num_key_value_heads", "head_dim"}),
    "mistral": frozenset({"head_dim"}),
    "mixtral": frozenset({"head_dim"}),
}
"""Of ``num_key_value_heads`` and ``head_dim``, the ones a config may set to null: their field is
``int | None`` in the config class and the class replaces null (one KV head per query head, hidden /
heads). transformers refuses null for an ``int`` field; Qwen2-MoE's KV heads, and the ``head_dim`` of
Qwen2, Qwen2-MoE and Qwen3-MoE (which have no such field), reach the attention module as null, which
cannot build with it."""

EXPERT_KEYS: Mapping[str, tuple[str, str]] = {
    "qwen3_moe": ("num_experts", "moe_intermediate_size"),
    "qwen2_moe": ("num_experts", "moe_intermediate_size"),
    "mixtral": ("num_local_experts", "intermediate_size"),
}
"""The MoE architectures: the fields holding their expert count and each expert's FFN width (Mixtral's
experts are ``intermediate_size`` wide; a ``moe_intermediate_size`` in its config is ignored, as
transformers ignores it)."""

QK_NORM: Mapping[str, bool] = {
    "qwen3": True,
    "qwen3_moe": True,
    "qwen2": False,
    "qwen2_moe": False,
    "llama": False,
    "mistral": False,
    "mixtral": False,
}
"""The architectures read, and whether each normalises Q and K per head."""


WINDOW_BY_LAYER_TYPE = frozenset({"qwen2", "qwen3", "qwen2_moe"})
"""Architectures whose attention modules take the window only on layers ``layer_types`` marks
sliding (their ``sliding_window`` alone, e.g. Qwen2-MoE's 0, is not a window, nor is a sliding layer
whose window is null)."""
NO_WINDOW = frozenset({"llama"})
"""Architectures whose attention never reads ``sliding_window`` (a value in the config is ignored).
Any other architecture (Mistral, Mixtral, Qwen3-MoE, and models the runtime wraps that are not
listed here) attends within ``sliding_window`` on every layer when it is set."""


def normalised(model_type: str, config: Mapping[str, Any]) -> dict[str, Any]:
    """``config`` (a ``config.json`` of a :data:`QK_NORM` architecture) as transformers holds it:
    defaults filled in and the rules of the module doc applied; ``ValueError`` for a null that
    transformers refuses (:data:`NULLABLE`)."""
    for key in ("num_key_value_heads", "head_dim"):
        if key in config and config[key] is None and key not in NULLABLE[model_type]:
            raise ValueError(f"{key!r} is null, which transformers cannot build a {model_type} model with")
    out = {**HF_DEFAULTS[model_type], **config}
    _check_kinds(out)
    heads, hidden = out.get("num_attention_heads"), out.get("hidden_size")
    if out.get("num_key_value_heads") is None:
        out["num_key_value_heads"] = heads
    if out.get("head_dim") is None and isinstance(hidden, int) and isinstance(heads, int) and heads > 0:
        out["head_dim"] = hidden // heads
    use = bool(out.get("use_sliding_window", False))
    if model_type in ("qwen2", "qwen3", "qwen3_moe"):
        out["sliding_window"] = out.get("sliding_window") if use else None
    elif model_type == "qwen2_moe":
        out["sliding_window"] = out.get("sliding_window") if use else 0
    layers = out.get("num_hidden_layers")
    if out.get("layer_types") is None and isinstance(layers, int) and 0 < layers <= 1_000_000:
        window, top = out.get("sliding_window"), out.get("max_window_layers", 0)
        if model_type in ("qwen2", "qwen3"):
            out["layer_types"] = [_kind(window is not None and i >= top) for i in range(layers)]
        elif model_type == "qwen2_moe":
            out["layer_types"] = [_kind(bool((i + 1) % 2) and i < top and use) for i in range(layers)]
    return out


_FLAGS = ("tie_word_embeddings", "use_sliding_window", "is_causal")
_LAYER_KINDS = frozenset({"full_attention", "sliding_attention", "chunked_attention"})


def _check_kinds(config: Mapping[str, Any]) -> None:
    """``ValueError`` for a value transformers' typed config would refuse or misread: a flag that is
    not true/false (``"false"`` is not false), a negative or non-numeric attention dropout, a window
    that is not a token count, ``layer_types`` that are not one known kind per layer."""
    for key in _FLAGS:
        if key in config and not isinstance(config[key], bool):
            raise ValueError(f"{key!r} must be true or false, got {config[key]!r}")
    dropout = config.get("attention_dropout", 0.0)
    if isinstance(dropout, bool) or not isinstance(dropout, (int, float)) or not 0 <= dropout < 1:
        raise ValueError(f"'attention_dropout' must be a number in [0, 1), got {dropout!r}")
    window = config.get("sliding_window")
    if window is not None and (isinstance(window, bool) or not isinstance(window, int) or window < 0):
        raise ValueError(f"'sliding_window' must be a token count or null, got {window!r}")
    for key in ("max_window_layers", "max_position_embeddings"):
        value = config.get(key)
        if key in config and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise ValueError(f"{key!r} must be a non-negative integer, got {value!r}")
    kinds, layers = config.get("layer_types"), config.get("num_hidden_layers")
    if kinds is not None:
        if not isinstance(kinds, list) or not all(isinstance(k, str) and k in _LAYER_KINDS for k in kinds):
            raise ValueError(f"'layer_types' must be a list of {', '.join(sorted(_LAYER_KINDS))}, got {kinds!r}"[:300])
        if isinstance(layers, int) and len(kinds) != layers:
            raise ValueError(f"'layer_types' has {len(kinds)} entries for {layers} layers")


def _kind(sliding: bool) -> str:
    return "sliding_attention" if sliding else "full_attention"


def attention_window(model_type: str, config: Mapping[str, Any]) -> tuple[int | None, tuple[int, ...] | None]:
    """The sliding window of a normalised config and the layers that use it, as its attention modules
    read them (module doc): ``(W, None)`` for every layer (Mistral, Mixtral, Qwen3-MoE with
    ``sliding_window`` set), ``(W, indices)`` for the layers ``layer_types`` marks sliding
    (:data:`WINDOW_BY_LAYER_TYPE`), ``(None, None)`` for full attention. The value is returned as the
    config holds it (:class:`~nspsim.specs.model.ModelSpec` refuses a window of 0)."""
    window = config.get("sliding_window")
    if model_type in NO_WINDOW or window is None:
        return None, None
    if model_type not in WINDOW_BY_LAYER_TYPE:
        return window, None
    layers = tuple(i for i, kind in enumerate(config.get("layer_types") or ()) if kind == "sliding_attention")
    return (window, layers) if layers else (None, None)


def unmodelled_attention(config: Mapping[str, Any]) -> str | None:
    """The attention feature of a normalised config (or of transformers' own config, as the runtime's
    bridge reads it) that neither nspsim models nor the runtime runs, as the runtime's phrase, or
    ``None``. A causal sliding window is not among them (:func:`attention_window`)."""
    if config.get("is_causal", True) is False:
        return "non-causal (bidirectional) attention (config.is_causal is False)"
    kinds = set(config.get("layer_types") or ())
    if "chunked_attention" in kinds:
        window = config.get("sliding_window")
        return f"sliding-window or chunked attention (layer_types {sorted(kinds)}, sliding_window={window})"
    if config.get("attention_chunk_size") is not None:
        return "chunked attention (attention_chunk_size)"
    if config.get("attn_logit_softcapping") is not None:
        return "attention logit soft-capping (attn_logit_softcapping)"
    dropout = config.get("attention_dropout", 0.0) or 0.0
    if isinstance(dropout, (int, float)) and dropout > 0.0:
        return f"attention dropout ({dropout})"
    return None
