"""NSP's nested attention under an unchanged Hugging Face transformers model.

transformers 5 looks every attention call up by name in a public registry: a model built with
``attn_implementation=name`` calls ``fn(module, query, key, value, attention_mask, **kwargs)`` with
``query`` ``[1, Hq, T, D]``, ``key``/``value`` ``[1, Hkv, T, D]`` (KV heads not replicated; GQA is the
function's business) after its projections, QK-norm and RoPE at the ``position_ids`` it was given,
and expects ``(output [1, T, Hq, D], weights)``. The keyword arguments it adds are ``scaling``,
``dropout``, ``sliding_window`` (Qwen3, Mistral, ...), ``softcap`` (Gemma 2), ``s_aux`` (attention
sinks, gpt-oss), ``position_ids``, ``use_cache`` and whatever the caller passed to ``forward`` (the
flash-attention packing keywords ``cu_seq_lens_q/k``, ``max_length_q/k``). The mask comes from a
second registry, ``AttentionMaskInterface``: a name without a mask function gets no mask built for it
(transformers passes a user's mask through unchecked), so :func:`register` registers one under the
same name. A layer's ``sliding_window`` (the W of transformers' ``kv_idx > q_idx - W``) is handed to
the attention call as its ``window``.

:func:`register` puts :func:`nsp_attention_forward` and :func:`nsp_attention_mask` under one name
(:data:`NSP_ATTENTION`). The attention function is stateless: the step's
:class:`~nspsim_runtime.nested_attention.NestedAttention` (or any ``attention(q, k, v)`` on ``[T, H, D]``
rows) reaches it through a context variable that :class:`HFCausalLM` sets around the model's forward
(:func:`attention_scope`); it turns ``[1, H, T, D]`` into the ``[T, H, D]`` execution-layout rows and
back. Sample boundaries come from the plan, not from a mask: the mask function builds nothing (it
returns ``None``; a dense ``T x T`` mask would cost quadratic memory per rank) after checking that no
padding or cache offset was asked for.

:class:`HFCausalLM` gives a transformers causal LM the calling convention of
:class:`nspsim_runtime.model.DecoderLM` (``model(ids, positions, targets, attention=, relayout=)`` -> summed
next-token loss), so :class:`nspsim_runtime.executor.NSPExecutor` runs it unchanged: the token ids and
positions arrive in the execution layout (a ``[1, T]`` packed row with per-sample ``position_ids``),
a forward hook on the model's decoder applies ``relayout`` (the layout-restoring all-to-all) to the
final hidden rows, and the model's own head computes the logits in the input layout.

Supported: causal attention, full or within a layer's sliding window (Ulysses and local nodes; Ring
refuses a window: :func:`nspsim.specs.backend.window_refusal`), GQA/MQA, any head dimension the
kernel takes, RoPE variants and QK-norm (both inside the model), the default scaling
``1/sqrt(head_dim)``, dense and MoE FFNs, fp32 and bf16 autocast over fp32 master weights (q, k, v
reach the kernel in one dtype: :func:`kernel_dtype`). Refused with a one-line ``ValueError`` naming
the feature (nspsim refuses the same configs with the same phrase:
:func:`nspsim.specs.hf_defaults.unmodelled_attention`): chunked attention, attention sinks, attention
logit soft-capping, non-causal (bidirectional) attention, attention
dropout, a custom attention scaling, padding masks, a KV cache or query offset, a batch of more than
one row, caller-supplied ``cu_seq_lens``, gradient checkpointing (its recomputation would run outside
the step; NSP has its own tree-level recomputation), and MoE router logits (the auxiliary loss needs
batch-global statistics). Trade-off: one context variable instead of a per-module attribute keeps the
model untouched and the registry entry shareable by every model in the process, at the cost of a
model that can run only inside a scope.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from nspsim.specs.hf_defaults import unmodelled_attention
from nspsim_runtime.hf import require_transformers
from nspsim_runtime.model import AttentionFn, call_attention

NSP_ATTENTION = "nsp_nested"
"""The ``attn_implementation`` name NSP's attention is registered under."""

Relayout = Callable[[Tensor], Tensor]


@dataclass(frozen=True, kw_only=True)
class _Scope:
    """What one forward of a bridged model uses: the attention call and the final-rows relayout."""

    attention: AttentionFn
    relayout: Relayout | None
    pad: int = 0


_SCOPE: ContextVar[_Scope | None] = ContextVar("nsp_attention_scope", default=None)

_REFUSED_KWARGS = {
    "softcap": "attention logit soft-capping",
    "s_aux": "attention sinks",
    "sinks": "attention sinks",
    "cu_seq_lens_q": "caller-supplied cu_seq_lens (the plan gives the sample boundaries)",
    "cu_seq_lens_k": "caller-supplied cu_seq_lens (the plan gives the sample boundaries)",
    "max_length_q": "caller-supplied max_length (the plan gives the sample boundaries)",
    "max_length_k": "caller-supplied max_length (the plan gives the sample boundaries)",
}
"""Keyword arguments of the attention call whose presence (not None) means a refused feature."""


def unsupported(feature: str) -> ValueError:
    """The one-line error for an attention feature the bridge does not support."""
    return ValueError(f"the NSP attention bridge does not support {feature}")


def register(name: str = NSP_ATTENTION) -> str:
    """Register NSP's attention and mask functions under ``name`` with transformers' public
    ``AttentionInterface`` and ``AttentionMaskInterface`` (idempotent); returns ``name``."""
    tf = require_transformers()
    tf.AttentionInterface.register(name, nsp_attention_forward)
    tf.AttentionMaskInterface.register(name, nsp_attention_mask)
    return name


@contextlib.contextmanager
def attention_scope(attention: AttentionFn, relayout: Relayout | None = None, pad: int = 0) -> Iterator[None]:
    """Within this block every bridged attention call runs ``attention`` (``[T, H, D]`` rows), and a
    :class:`HFCausalLM` maps its final hidden rows through ``relayout``. The last ``pad`` rows of every
    call are padding that neither sees (their attention output is zero)."""
    token = _SCOPE.set(_Scope(attention=attention, relayout=relayout, pad=pad))
    try:
        yield
    finally:
        _SCOPE.reset(token)


def _active_scope() -> _Scope:
    scope = _SCOPE.get()
    if scope is None:
        raise RuntimeError(
            f"attn_implementation={NSP_ATTENTION!r} was called outside an NSP step (attention_scope); "
            "run the model through nspsim_runtime.hf.bridge.HFCausalLM "
            "(generation and gradient checkpointing are not supported)"
        )
    return scope


def check_call(module: nn.Module, query: Tensor, attention_mask: Tensor | None, kwargs: dict[str, Any]) -> None:
    """Refuse an attention call the bridge cannot run exactly (one-line ``ValueError``)."""
    if query.dim() != 4 or query.shape[0] != 1:
        raise unsupported(f"a batch of shape {tuple(query.shape[:1])}; pack the samples into one row")
    if not getattr(module, "is_causal", True) or kwargs.get("is_causal") is False:
        raise unsupported("non-causal (bidirectional) attention")
    window = kwargs.get("sliding_window")
    if window is not None and (isinstance(window, bool) or not isinstance(window, int) or window <= 0):
        raise unsupported(f"sliding-window attention (sliding_window={window!r}; a window is a positive token count)")
    for key, feature in _REFUSED_KWARGS.items():
        if kwargs.get(key) is not None:
            raise unsupported(feature)
    if float(kwargs.get("dropout") or 0.0) > 0.0:
        raise unsupported(f"attention dropout ({kwargs['dropout']})")
    scaling = kwargs.get("scaling")
    if scaling is not None and not math.isclose(float(scaling), query.shape[-1] ** -0.5, rel_tol=1e-6):
        raise unsupported(f"attention scaling {scaling} (only 1/sqrt(head_dim) = {query.shape[-1] ** -0.5:.6g})")
    if attention_mask is not None and attention_mask.numel() > 0:
        raise unsupported("an attention mask (padding); pass packed samples with per-sample position_ids")


def kernel_dtype(query: Tensor, key: Tensor, value: Tensor) -> torch.dtype:
    """The one dtype the attention kernels get ``q``, ``k`` and ``v`` in: under ``torch.autocast`` its
    dtype (as transformers' own sdpa and flash paths do), else the promotion of the three. Needed
    because a transformers model under bf16 autocast with fp32 weights hands over fp32 ``q``/``k``
    (its RMSNorm multiplies by the fp32 weight after QK-norm, and RoPE's cos/sin are fp32) but a bf16
    ``v`` (a linear under autocast); the flash kernels refuse mixed dtypes. The casts are differentiable,
    so the gradients reach the model in its own dtypes."""
    device_type = query.device.type
    if torch.is_autocast_enabled(device_type):
        return torch.get_autocast_dtype(device_type)
    return torch.promote_types(torch.promote_types(query.dtype, key.dtype), value.dtype)


def nsp_attention_forward(
    module: nn.Module, query: Tensor, key: Tensor, value: Tensor, attention_mask: Tensor | None, **kwargs: Any
) -> tuple[Tensor, None]:
    """The registered attention function: ``[1, H, T, D]`` in, the scope's attention on ``[T, H, D]``
    rows in one dtype (:func:`kernel_dtype`), ``[1, T, Hq, D]`` out in that dtype (no attention weights)."""
    scope = _active_scope()
    check_call(module, query, attention_mask, kwargs)
    rows = query.shape[2] - scope.pad
    dtype = kernel_dtype(query, key, value)
    q, k, v = (x[0, :, :rows].transpose(0, 1).to(dtype).contiguous() for x in (query, key, value))
    out = call_attention(scope.attention, q, k, v, kwargs.get("sliding_window"))
    if scope.pad:
        out = torch.cat([out, out.new_zeros((scope.pad, *out.shape[1:]))])
    return out.unsqueeze(0), None


def nsp_attention_mask(
    *,
    batch_size: int,
    q_length: int,
    kv_length: int,
    q_offset: Any = 0,
    kv_offset: Any = 0,
    attention_mask: Tensor | None = None,
    local_size: int | None = None,
    **kwargs: Any,
) -> None:
    """The registered mask function: checks what the model asks for and builds no mask (the plan gives
    the per-sample causal structure; a sliding layer's ``local_size`` reaches the attention call as its
    ``sliding_window``). Refuses batches of several rows, padding and cache offsets."""
    if batch_size != 1:
        raise unsupported(f"a batch of {batch_size} rows; pack the samples into one row")
    if int(q_offset) != 0 or int(kv_offset) != 0 or kv_length != q_length:
        raise unsupported("a KV cache (query or key offset); NSP runs training forward passes only")
    if attention_mask is not None and not bool(attention_mask.all()):
        raise unsupported("an attention mask (padding); pass packed samples with per-sample position_ids")
    return None


def check_model(model: Any) -> None:
    """Refuse, from its config and modules, a transformers model (an ``nn.Module`` with a ``config``)
    whose attention the bridge cannot run exactly (one-line ``ValueError``)."""
    config = model.config
    # the config's attention features, read by the rule nspsim reads a config.json by (one phrase each)
    feature = unmodelled_attention({**config.to_dict(), "is_causal": getattr(config, "is_causal", True)})
    if feature is not None:
        raise unsupported(feature)
    if any(hasattr(m, "sinks") for m in model.modules()):
        raise unsupported("attention sinks")
    if getattr(config, "output_router_logits", False):
        raise unsupported(
            "MoE router logits / auxiliary loss (output_router_logits), which need batch-global statistics"
        )
    checkpointing = "is_activation_checkpointing" if hasattr(model, "is_activation_checkpointing") else ""
    if getattr(model, checkpointing or "is_gradient_checkpointing", False):
        raise unsupported("gradient checkpointing (NSP recomputes attention itself, per plan)")
    if config._attn_implementation != NSP_ATTENTION:
        raise ValueError(
            f"the model was built with attn_implementation={config._attn_implementation!r}; "
            f"build it with attn_implementation={NSP_ATTENTION!r} (nspsim_runtime.hf.bridge.register())"
        )


def _relayout_hook(module: nn.Module, args: Any, output: Any) -> Any:
    """Forward hook on the decoder: drop the padding rows and map the final hidden rows ``[1, T, hidden]``
    through the scope's relayout (the model's head then computes logits in the input layout)."""
    scope = _active_scope()
    if scope.relayout is not None or scope.pad:
        hidden = output.last_hidden_state[0]
        hidden = hidden[: hidden.shape[0] - scope.pad]
        output.last_hidden_state = (hidden if scope.relayout is None else scope.relayout(hidden)).unsqueeze(0)
    return output


def _decoder(model: Any) -> nn.Module:
    """The decoder (embeddings, layers, final norm) of a transformers causal LM."""
    decoder: nn.Module = model.get_decoder()
    return decoder


class HFCausalLM(nn.Module):
    """A transformers causal LM with :class:`nspsim_runtime.model.DecoderLM`'s calling convention (see the module
    docstring). The wrapped model is ``self.hf``; its code is not changed."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        check_model(model)
        self.hf = model
        _decoder(model).register_forward_hook(_relayout_hook)

    @property
    def layers(self) -> nn.ModuleList:
        """The decoder layers (what FSDP2 wraps one by one)."""
        decoder: Any = _decoder(self.hf)
        layers: nn.ModuleList = decoder.layers
        return layers

    @property
    def model_impl(self) -> str:
        """The class that runs, e.g. ``transformers.Qwen3MoeForCausalLM``."""
        return f"transformers.{type(self.hf).__name__}"

    def forward(
        self,
        ids: Tensor,
        positions: Tensor,
        targets: Tensor,
        attention: AttentionFn,
        relayout: Relayout | None = None,
    ) -> Tensor:
        """Summed next-token cross-entropy of the ``targets`` rows (normalise outside)."""
        pad = 0
        if ids.numel() == 0:
            # No execution rows on this rank (it may still take part in its nodes' collectives):
            # transformers' layers cannot reshape an empty row, so one padding row runs, which the
            # attention call and the relayout hook drop. Its gradient is exactly zero, and every
            # parameter still gets a gradient tensor, so FSDP2 and the all-reduce see the same set.
            ids, positions, pad = ids.new_zeros(1), positions.new_zeros(1), 1
        with attention_scope(attention, relayout, pad):
            out = self.hf(input_ids=ids[None], position_ids=positions[None], use_cache=False)
        return F.cross_entropy(out.logits[0].float(), targets, reduction="sum")
