"""A small Qwen3-style decoder built from an nspsim ``ModelSpec``, with a pluggable attention call.

Packed (varlen) input: one row per token, ``positions`` restart at 0 for every sample. Layers: RMSNorm
-> attention (Q/K/V projections, per-head QK RMSNorm, RoPE at the per-sample positions, GQA) ->
residual -> RMSNorm -> SwiGLU MLP or top-k MoE (softmax router, renormalised top-k weights, no
auxiliary loss) -> residual; final RMSNorm and (tied) output head.

The model knows nothing of sequence parallelism: it calls ``attention(q, k, v)`` with ``q`` of shape
``[T, H, D]`` and ``k``, ``v`` of ``[T, H_kv, D]`` for the rows it holds (``attention(q, k, v,
window=W)`` on the layers the spec's sliding window applies to), and everything else is per-token.
A single process plugs in :class:`LocalAttention` over whole samples; NSP plugs in its nested
executor. ``relayout`` (identity by default) maps the final hidden rows into the layout of
``targets`` before the loss; the NSP executor uses it for the layout-restoring all-to-all.
Initial weights are drawn from a ``torch.Generator`` seeded by ``seed``, so every rank and the
single-process reference start from identical weights without touching global RNG state.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Protocol

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from nspsim.specs.model import ModelSpec
from nspsim_runtime.kernels import AttentionKernel, Segments


class AttentionFn(Protocol):
    """The attention core a model calls: ``[T, H, D]`` rows in and out, causal per sample, within the
    layer's sliding ``window`` when it has one (callers pass ``window`` only when it is set, so a
    three-argument function serves full attention)."""

    def __call__(self, q: Tensor, k: Tensor, v: Tensor, window: int | None = None) -> Tensor: ...


def layer_window(spec: ModelSpec, layer: int) -> int | None:
    """The sliding window of decoder layer ``layer`` (``None``: full causal attention)."""
    if spec.window_layers is not None and layer not in spec.window_layers:
        return None
    return spec.sliding_window


def call_attention(attention: AttentionFn, q: Tensor, k: Tensor, v: Tensor, window: int | None) -> Tensor:
    """``attention(q, k, v)``, with ``window=`` only when the layer has one."""
    return attention(q, k, v) if window is None else attention(q, k, v, window=window)


INIT_STD = 0.02


class RMSNorm(nn.Module):
    """Root-mean-square norm over the last dimension with a learned scale."""

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: Tensor) -> Tensor:
        """Normalise ``x``."""
        var = x.float().pow(2).mean(dim=-1, keepdim=True)
        # Scale in fp32, then return x's dtype: under bf16 autocast the fp32 weight would otherwise
        # promote q and k (q_norm, k_norm) to fp32 while v stays bf16, which attention kernels refuse.
        return (x.float() * torch.rsqrt(var + self.eps) * self.weight.float()).to(x.dtype)


def rope(x: Tensor, positions: Tensor, theta: float) -> Tensor:
    """Rotary embedding (rotate-half form) of ``x`` ``[T, H, D]`` at per-token ``positions``."""
    half = x.shape[-1] // 2
    freqs = theta ** (-torch.arange(half, device=x.device, dtype=torch.float32) / half)
    angles = positions.to(torch.float32)[:, None] * freqs[None, :]
    cos, sin = angles.cos()[:, None, :], angles.sin()[:, None, :]
    x1, x2 = x[..., :half].float(), x[..., half:].float()
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1).to(x.dtype)


class Attention(nn.Module):
    """GQA self-attention block; the attention core is the caller's ``attention`` function."""

    def __init__(self, spec: ModelSpec, rope_theta: float, window: int | None = None) -> None:
        super().__init__()
        self.spec, self.rope_theta, self.window = spec, rope_theta, window
        self.q_proj = nn.Linear(spec.hidden, spec.q_width, bias=False)
        self.k_proj = nn.Linear(spec.hidden, spec.kv_width, bias=False)
        self.v_proj = nn.Linear(spec.hidden, spec.kv_width, bias=False)
        self.o_proj = nn.Linear(spec.q_width, spec.hidden, bias=False)
        self.q_norm = RMSNorm(spec.head_dim) if spec.qk_norm else nn.Identity()
        self.k_norm = RMSNorm(spec.head_dim) if spec.qk_norm else nn.Identity()

    def forward(self, h: Tensor, positions: Tensor, attention: AttentionFn) -> Tensor:
        """Attention output projected back to the hidden size."""
        t, s = h.shape[0], self.spec
        q = self.q_norm(self.q_proj(h).view(t, s.num_heads, s.head_dim))
        k = self.k_norm(self.k_proj(h).view(t, s.num_kv_heads, s.head_dim))
        v = self.v_proj(h).view(t, s.num_kv_heads, s.head_dim)
        q, k = rope(q, positions, self.rope_theta), rope(k, positions, self.rope_theta)
        out: Tensor = self.o_proj(call_attention(attention, q, k, v, self.window).reshape(t, s.q_width))
        return out


class SwiGLU(nn.Module):
    """Gated MLP: down(silu(gate(x)) * up(x))."""

    def __init__(self, hidden: int, ffn: int) -> None:
        super().__init__()
        self.gate = nn.Linear(hidden, ffn, bias=False)
        self.up = nn.Linear(hidden, ffn, bias=False)
        self.down = nn.Linear(ffn, hidden, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        """Apply the MLP per token."""
        out: Tensor = self.down(F.silu(self.gate(x)) * self.up(x))
        return out


class MoE(nn.Module):
    """Top-k mixture of SwiGLU experts, per token (so any token layout gives the same result)."""

    def __init__(self, hidden: int, num_experts: int, top_k: int, ffn: int, shared_ffn: int) -> None:
        super().__init__()
        self.top_k = top_k
        self.router = nn.Linear(hidden, num_experts, bias=False)
        self.experts = nn.ModuleList(SwiGLU(hidden, ffn) for _ in range(num_experts))
        self.shared = SwiGLU(hidden, shared_ffn) if shared_ffn else None

    def forward(self, x: Tensor) -> Tensor:
        """Route every token to its top-k experts and mix their outputs."""
        probs = torch.softmax(self.router(x).float(), dim=-1)
        weights, chosen = probs.topk(self.top_k, dim=-1)
        weights = (weights / weights.sum(dim=-1, keepdim=True)).to(x.dtype)
        out = torch.zeros_like(x) if self.shared is None else self.shared(x)
        for e, expert in enumerate(self.experts):
            # An expert with no routed rows still runs (on zero rows): its parameters then get a zero
            # gradient on this rank, so every rank synchronises the same set of gradients.
            rows, slot = torch.nonzero(chosen == e, as_tuple=True)
            out = out.index_add(0, rows, expert(x.index_select(0, rows)) * weights[rows, slot, None])
        return out


class DecoderLayer(nn.Module):
    """Pre-norm decoder layer."""

    def __init__(self, spec: ModelSpec, rope_theta: float, window: int | None = None) -> None:
        super().__init__()
        self.attn_norm = RMSNorm(spec.hidden)
        self.attn = Attention(spec, rope_theta, window)
        self.ffn_norm = RMSNorm(spec.hidden)
        moe = spec.moe
        self.ffn: nn.Module = (
            SwiGLU(spec.hidden, spec.dense_ffn)
            if moe is None
            else MoE(spec.hidden, moe.num_experts, moe.top_k, moe.expert_ffn, moe.shared_expert_ffn)
        )

    def forward(self, h: Tensor, positions: Tensor, attention: AttentionFn) -> Tensor:
        """One decoder layer."""
        h = h + self.attn(self.attn_norm(h), positions, attention)
        out: Tensor = h + self.ffn(self.ffn_norm(h))
        return out


class DecoderLM(nn.Module):
    """Embedding, decoder layers, final norm, output head; forward returns the summed token loss."""

    def __init__(self, spec: ModelSpec, *, seed: int, rope_theta: float = 1e6) -> None:
        super().__init__()
        self.spec = spec
        self.embed = nn.Embedding(spec.vocab, spec.hidden)
        self.layers = nn.ModuleList(
            DecoderLayer(spec, rope_theta, layer_window(spec, i)) for i in range(spec.num_layers)
        )
        self.norm = RMSNorm(spec.hidden)
        self.head = None if spec.tie_embeddings else nn.Linear(spec.hidden, spec.vocab, bias=False)
        self._init_weights(seed)

    def _init_weights(self, seed: int) -> None:
        gen = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for name, p in self.named_parameters():
                if not name.endswith("norm.weight"):
                    p.copy_(torch.randn(p.shape, generator=gen) * INIT_STD)

    def logits(self, h: Tensor) -> Tensor:
        """Output-head logits of final hidden rows."""
        h = self.norm(h)
        out: Tensor = h @ self.embed.weight.t() if self.head is None else self.head(h)
        return out

    def forward(
        self,
        ids: Tensor,
        positions: Tensor,
        targets: Tensor,
        attention: AttentionFn,
        relayout: Callable[[Tensor], Tensor] | None = None,
    ) -> Tensor:
        """Summed next-token cross-entropy of the ``targets`` rows (normalise outside)."""
        h = self.embed(ids)
        for layer in self.layers:
            h = layer(h, positions, attention)
        if relayout is not None:
            h = relayout(h)
        return F.cross_entropy(self.logits(h).float(), targets, reduction="sum")


class _LocalAttentionFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, q: Tensor, k: Tensor, v: Tensor, kernel: AttentionKernel, seg: Segments) -> Tensor:
        out, lse = kernel.forward(q, k, v, seg, causal=True)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.kernel, ctx.seg = kernel, seg
        return out

    @staticmethod
    def backward(ctx: Any, dout: Tensor) -> tuple[Tensor | None, ...]:
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = ctx.kernel.backward(dout.contiguous(), q, k, v, out, lse, ctx.seg, causal=True)
        return dq, dk, dv, None, None


class LocalAttention:
    """Single-device causal varlen attention over whole samples (the reference attention)."""

    def __init__(self, kernel: AttentionKernel, lengths: list[int]) -> None:
        self.kernel = kernel
        self.segments = Segments.same(lengths)

    def __call__(self, q: Tensor, k: Tensor, v: Tensor, window: int | None = None) -> Tensor:
        """Attention output ``[T, H, D]`` (causal within ``window``)."""
        seg = self.segments.windowed(window)
        out: Tensor = _LocalAttentionFn.apply(q, k, v, self.kernel, seg)  # type: ignore[no-untyped-call]
        return out


def fsdp_shard(model: nn.Module, layers: Iterable[nn.Module]) -> None:
    """Shard ``model`` with FSDP2 as ``nspsim_runtime.train`` does: each decoder layer of ``layers`` (the
    model's own), then the whole model (embedding, final norm and head)."""
    from torch.distributed.fsdp import fully_shard

    for layer in layers:
        fully_shard(layer)
    fully_shard(model)
