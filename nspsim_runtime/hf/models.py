"""Transformers models built from a config in code or a ``config.json``, with seeded random weights.

:func:`build_hf_model` builds the transformers causal LM of a config mapping (``AutoConfig.for_model``
from its ``model_type``, then ``AutoModelForCausalLM.from_config``: ``Qwen3ForCausalLM(Qwen3Config)``,
``Qwen3MoeForCausalLM(Qwen3MoeConfig)``, ...), never touching the hub. Its weights are transformers'
own initialisation drawn under ``torch.manual_seed(seed)`` inside :func:`torch.random.fork_rng`, so
every rank and the single-process reference build identical weights and the caller's RNG state is
left as it was. The configs are nspsim's (:data:`nspsim.specs.hf.HF_CONFIGS`, or a file through
:func:`nspsim.specs.hf.load_hf_config`), so the planners and the simulator see the same shapes as the
model that runs (:func:`hf_spec`). :func:`hf_causal_lm` wraps the model for the NSP executor
(:class:`nspsim_runtime.hf.bridge.HFCausalLM`, attention registered under
:data:`nspsim_runtime.hf.bridge.NSP_ATTENTION`).

Trade-off: random weights only (no checkpoint loading); a pretrained model would be loaded by the
caller and handed to :class:`~nspsim_runtime.hf.bridge.HFCausalLM` directly. :func:`training_model` is
how ``nspsim_runtime.train`` chooses between a transformers model and the built-in
:class:`nspsim_runtime.model.DecoderLM`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from nspsim.jsonfile import read_json
from nspsim.specs.hf import HF_CONFIGS, hf_config, is_config_path, resolve_model
from nspsim.specs.model import ModelSpec
from nspsim_runtime.hf import MissingExtraError, require_transformers
from nspsim_runtime.hf.bridge import NSP_ATTENTION, HFCausalLM, register
from nspsim_runtime.model import DecoderLM

HF_PREFIX = "hf-"
"""Model names with this prefix (and config paths) are transformers models."""


def is_hf_model(name: str) -> bool:
    """Whether ``name`` names a transformers model: one of :data:`~nspsim.specs.hf.HF_CONFIGS` or a
    config path."""
    return name in HF_CONFIGS or name.startswith(HF_PREFIX) or is_config_path(name)


def config_of(name: str) -> dict[str, Any]:
    """The config mapping of a named transformers model or of a ``config.json`` path."""
    if is_config_path(name):
        config = read_json(name, "transformers config")
        if not isinstance(config, dict):
            raise ValueError(f"{name}: not a transformers config (a JSON object)")
        return config
    return hf_config(name)


def hf_spec(name: str) -> ModelSpec:
    """The nspsim spec of the named transformers model (the shapes the planners see)."""
    return resolve_model(name)


def build_hf_model(
    config: Mapping[str, Any], *, seed: int, attn_implementation: str = NSP_ATTENTION, dtype: str = "float32"
) -> nn.Module:
    """The transformers causal LM of ``config`` with seeded random weights (module docstring)."""
    tf = require_transformers()
    if attn_implementation == NSP_ATTENTION:
        register()
    values = {k: v for k, v in config.items() if k not in ("architectures", "torch_dtype", "dtype")}
    model_type = values.pop("model_type", None)
    if model_type is None:
        raise ValueError("a transformers config needs a 'model_type'")
    hf_config_obj = tf.AutoConfig.for_model(model_type, **values)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model: nn.Module = tf.AutoModelForCausalLM.from_config(
            hf_config_obj, attn_implementation=attn_implementation, dtype=getattr(torch, dtype)
        )
    return model


def hf_causal_lm(name: str, *, seed: int) -> HFCausalLM:
    """The named transformers model (or ``config.json`` path) with NSP's attention, ready for the executor."""
    return HFCausalLM(build_hf_model(config_of(name), seed=seed))


def training_model(name: str, spec: ModelSpec, *, seed: int) -> DecoderLM | HFCausalLM:
    """The model ``nspsim_runtime.train`` trains for the workload's model ``name``: the transformers model (NSP
    attention) for an ``hf-*`` name or a config path, else the built-in :class:`nspsim_runtime.model.DecoderLM`.
    Without the ``hf`` extra a transformers name is a one-line ``ValueError`` naming it."""
    if not is_hf_model(name):
        return DecoderLM(spec, seed=seed)
    try:
        return hf_causal_lm(name, seed=seed)
    except MissingExtraError as exc:
        raise ValueError(f"--model {name}: {exc}") from None


def model_impl(model: nn.Module) -> str:
    """The class that runs, for records: ``transformers.Qwen3MoeForCausalLM`` for a bridged model,
    ``nspsim_runtime.model.DecoderLM`` for the built-in one (call it before FSDP2 wraps the model)."""
    impl = getattr(model, "model_impl", None)
    return impl if isinstance(impl, str) else f"{type(model).__module__}.{type(model).__qualname__}"
