"""Kernels that run one batched dense call per group of equally long segments (any device / CPU).

:meth:`Segments.groups` buckets the non-empty segments by (query length, key length); each bucket is
gathered from the packed buffers into a ``[B, H, L, D]`` batch (KV heads repeated for GQA), run
through one dense call, and scattered back. Two kernels share that driver (:class:`_GroupedKernel`):

* ``cpu-flash`` (:class:`CpuFlashKernel`): torch's CPU flash-attention op, which returns the LSE, and
  its backward;
* ``math`` (:class:`MathKernel`): plain matmul + softmax in fp32 with a hand-written backward (any
  device; the exact reference, memory O(L^2) per segment).

Trade-off: grouping equal-length segments into one batched call makes the CPU kernels fast for the
many short samples of long-tail batches, at the cost of an index gather/scatter per group.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod

import numpy as np
import torch
from torch import Tensor

from nspsim_runtime.kernels.segments import Segments


def _expand_kv(x: Tensor, groups: int) -> Tensor:
    """Repeat each KV head ``groups`` times along the head axis (dim -3 of ``[..., H, L, D]``)."""
    return x if groups == 1 else x.repeat_interleave(groups, dim=-3)


def _reduce_kv(dx: Tensor, groups: int) -> Tensor:
    """Sum gradients of replicated KV heads back onto their source head (inverse of ``_expand_kv``)."""
    if groups == 1:
        return dx
    shape = dx.shape
    return dx.reshape(*shape[:-3], shape[-3] // groups, groups, *shape[-2:]).sum(dim=-3)


def _gather(x: Tensor, rows: np.ndarray) -> Tensor:
    """Rows ``[B, L]`` of a packed ``[T, H, D]`` buffer as a batched ``[B, H, L, D]`` tensor."""
    idx = torch.as_tensor(rows.reshape(-1), device=x.device)
    b, length = rows.shape
    return x.index_select(0, idx).view(b, length, x.shape[1], x.shape[2]).transpose(1, 2)


def _scatter(dst: Tensor, rows: np.ndarray, src: Tensor) -> None:
    """Write batched ``[B, H, L, *]`` values back into packed rows of ``dst``."""
    idx = torch.as_tensor(rows.reshape(-1), device=dst.device)
    flat = src.transpose(1, 2).reshape(-1, *dst.shape[1:])
    dst.index_copy_(0, idx, flat.to(dst.dtype))


def _causal_mask(lq: int, lk: int, device: torch.device, window: int | None = None) -> Tensor:
    """The masked-out (True) query-key pairs of a causal segment: keys after the query and, with a
    sliding ``window`` W, keys W or more before it."""
    ones = torch.ones(lq, lk, dtype=torch.bool, device=device)
    return ones.triu(1) if window is None else ones.triu(1) | ones.tril(-window)


class _GroupedKernel(ABC):
    """Shared driver: one batched dense call per group of equally long segments."""

    name = "grouped"

    @abstractmethod
    def _fwd_group(
        self, q: Tensor, k: Tensor, v: Tensor, causal: bool, scale: float, window: int | None
    ) -> tuple[Tensor, Tensor]:
        """(output, log-sum-exp) of one group of equally long segments (causal within ``window``)."""

    @abstractmethod
    def _bwd_group(
        self,
        do: Tensor,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        o: Tensor,
        lse: Tensor,
        causal: bool,
        scale: float,
        window: int | None,
    ) -> tuple[Tensor, Tensor, Tensor]:
        """(dq, dk, dv) of one group of equally long segments."""

    def forward(self, q: Tensor, k: Tensor, v: Tensor, seg: Segments, causal: bool) -> tuple[Tensor, Tensor]:
        """See :class:`AttentionKernel`."""
        seg.check(q, k, causal)
        out = torch.zeros_like(q)
        lse = torch.full(q.shape[:2], -math.inf, dtype=torch.float32, device=q.device)
        groups, scale = q.shape[1] // k.shape[1], q.shape[-1] ** -0.5
        for _, _, q_rows, k_rows in seg.groups():
            kg, vg = (_expand_kv(_gather(t, k_rows), groups) for t in (k, v))
            o, l_ = self._fwd_group(_gather(q, q_rows), kg, vg, causal, scale, seg.window)
            _scatter(out, q_rows, o)
            _scatter(lse.unsqueeze(-1), q_rows, l_.unsqueeze(-1).float())
        return out, lse

    def backward(
        self, dout: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor, seg: Segments, causal: bool
    ) -> tuple[Tensor, Tensor, Tensor]:
        """See :class:`AttentionKernel`."""
        seg.check(q, k, causal)
        dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
        groups, scale = q.shape[1] // k.shape[1], q.shape[-1] ** -0.5
        for _, _, q_rows, k_rows in seg.groups():
            kg, vg = (_expand_kv(_gather(t, k_rows), groups) for t in (k, v))
            lg = _gather(lse.unsqueeze(-1), q_rows).squeeze(-1)
            gq, gk, gv = self._bwd_group(
                _gather(dout, q_rows), _gather(q, q_rows), kg, vg, _gather(out, q_rows), lg, causal, scale, seg.window
            )
            _scatter(dq, q_rows, gq)
            _scatter(dk, k_rows, _reduce_kv(gk, groups))
            _scatter(dv, k_rows, _reduce_kv(gv, groups))
        return dq, dk, dv


class MathKernel(_GroupedKernel):
    """Plain fp32 matmul/softmax attention with an explicit backward: exact, memory O(L^2) per segment."""

    name = "math"

    def _scores(self, q: Tensor, k: Tensor, causal: bool, scale: float, window: int | None) -> Tensor:
        s = torch.matmul(q.float(), k.float().transpose(-1, -2)) * scale
        if causal:
            s = s.masked_fill(_causal_mask(s.shape[-2], s.shape[-1], s.device, window), -math.inf)
        return s

    def _fwd_group(
        self, q: Tensor, k: Tensor, v: Tensor, causal: bool, scale: float, window: int | None
    ) -> tuple[Tensor, Tensor]:
        s = self._scores(q, k, causal, scale, window)
        lse = torch.logsumexp(s, dim=-1)
        out = torch.matmul(torch.exp(s - lse.unsqueeze(-1)), v.float())
        return out.to(q.dtype), lse

    def _bwd_group(
        self,
        do: Tensor,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        o: Tensor,
        lse: Tensor,
        causal: bool,
        scale: float,
        window: int | None,
    ) -> tuple[Tensor, Tensor, Tensor]:
        p = torch.exp(self._scores(q, k, causal, scale, window) - lse.float().unsqueeze(-1))
        do32 = do.float()
        dv = torch.matmul(p.transpose(-1, -2), do32)
        dp = torch.matmul(do32, v.float().transpose(-1, -2))
        delta = (do32 * o.float()).sum(dim=-1, keepdim=True)
        ds = p * (dp - delta) * scale
        dq = torch.matmul(ds, k.float())
        dk = torch.matmul(ds.transpose(-1, -2), q.float())
        return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)


class CpuFlashKernel(_GroupedKernel):
    """torch's CPU flash-attention op (``_scaled_dot_product_flash_attention_for_cpu``) and its backward;
    a sliding window runs as a non-causal call with the banded causal mask (``attn_mask``)."""

    name = "cpu-flash"

    @staticmethod
    def _mask(q: Tensor, k: Tensor, causal: bool, window: int | None) -> tuple[bool, Tensor | None]:
        """(is_causal, attn_mask) of the op: its own causal flag, or the band as an additive mask in the
        query's dtype (0 within the window, -inf outside; the op takes no boolean mask)."""
        if window is None:
            return causal, None
        outside = _causal_mask(q.shape[-2], k.shape[-2], q.device, window)
        return False, torch.zeros(outside.shape, dtype=q.dtype, device=q.device).masked_fill(outside, -math.inf)

    def _fwd_group(
        self, q: Tensor, k: Tensor, v: Tensor, causal: bool, scale: float, window: int | None
    ) -> tuple[Tensor, Tensor]:
        is_causal, mask = self._mask(q, k, causal, window)
        op = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
        out, lse = op(q, k, v, 0.0, is_causal, attn_mask=mask, scale=scale)
        return out, lse

    def _bwd_group(
        self,
        do: Tensor,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        o: Tensor,
        lse: Tensor,
        causal: bool,
        scale: float,
        window: int | None,
    ) -> tuple[Tensor, Tensor, Tensor]:
        is_causal, mask = self._mask(q, k, causal, window)
        op = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward
        dq, dk, dv = op(
            do.contiguous(),
            q.contiguous(),
            k.contiguous(),
            v.contiguous(),
            o.contiguous(),
            lse.contiguous(),
            0.0,
            is_causal,
            attn_mask=mask,
            scale=scale,
        )
        return dq, dk, dv
