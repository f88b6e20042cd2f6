"""Local (single-device) varlen attention kernels with an explicit forward and backward.

Every SP backend calls one :class:`AttentionKernel` for the attention core it runs locally. Inputs are
packed: ``q`` is ``[Tq, Hq, D]``, ``k`` and ``v`` are ``[Tk, Hkv, D]`` with ``Hq % Hkv == 0`` (GQA), and
:class:`Segments` gives the per-sample boundaries of the query and key buffers (``cu_q``, ``cu_k``).
A segment attends only within itself; ``causal`` segments must have equal query and key lengths.

The forward returns the output and the natural-log log-sum-exp ``lse`` (``[Tq, Hq]``, fp32) of the
scaled scores, and the backward takes ``(dout, q, k, v, out, lse)``. That explicit form is what Ring
attention needs: partial results over key blocks are merged through the LSE, and each block's
gradient is computed with the *merged* output and LSE (``D = rowsum(dO * O)``, ``P = exp(S - lse)``).

Kernels, best first (``select_kernel("auto", device)``):

* ``flash-attn``: the flash-attn package's varlen kernels (CUDA, optional extra ``gpu``);
* ``torch-varlen``: ``torch.nn.attention.varlen`` (FlashAttention inside torch, CUDA only);
* ``cpu-flash``: torch's CPU flash-attention op (returns the LSE), one call per group of
  equally long segments;
* ``math``: plain matmul + softmax in fp32 with hand-written backward (any device; the reference).

Trade-off: grouping equal-length segments into one batched call makes the CPU kernels fast for the
many short samples of long-tail batches, at the cost of an index gather/scatter per group.
"""

from __future__ import annotations

import importlib.util
import inspect
import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Protocol

import numpy as np
import torch
from torch import Tensor


@dataclass(frozen=True)
class Segments:
    """Boundaries of packed varlen segments: segment s spans rows ``cu_q[s]:cu_q[s+1]`` of the queries
    and ``cu_k[s]:cu_k[s+1]`` of the keys. Empty segments are allowed and skipped."""

    cu_q: tuple[int, ...]
    cu_k: tuple[int, ...]

    def __post_init__(self) -> None:
        if len(self.cu_q) != len(self.cu_k) or not self.cu_q or self.cu_q[0] != 0 or self.cu_k[0] != 0:
            raise ValueError("segment boundaries must start at 0 and have one entry per segment plus one")
        if np.any(np.diff(self.cu_q) < 0) or np.any(np.diff(self.cu_k) < 0):
            raise ValueError("segment boundaries must be non-decreasing")

    @staticmethod
    def same(lengths: Sequence[int]) -> Segments:
        """Self-attention segments: queries and keys are the same packed buffer."""
        cu = (0, *np.cumsum(np.asarray(lengths, dtype=np.int64)).tolist())
        return Segments(cu, cu)

    @staticmethod
    def pairs(q_lengths: Sequence[int], k_lengths: Sequence[int]) -> Segments:
        """Segments with separate query and key lengths (a Ring block pair)."""
        cq = (0, *np.cumsum(np.asarray(q_lengths, dtype=np.int64)).tolist())
        ck = (0, *np.cumsum(np.asarray(k_lengths, dtype=np.int64)).tolist())
        return Segments(cq, ck)

    @property
    def num(self) -> int:
        """Number of segments."""
        return len(self.cu_q) - 1

    @cached_property
    def q_lengths(self) -> np.ndarray:
        """Query length of every segment."""
        return np.diff(np.asarray(self.cu_q, dtype=np.int64))

    @cached_property
    def k_lengths(self) -> np.ndarray:
        """Key length of every segment."""
        return np.diff(np.asarray(self.cu_k, dtype=np.int64))

    @property
    def total_q(self) -> int:
        """Rows of the query buffer."""
        return self.cu_q[-1]

    @property
    def total_k(self) -> int:
        """Rows of the key buffer."""
        return self.cu_k[-1]

    def nonempty(self) -> np.ndarray:
        """Indices of segments with at least one query and one key."""
        return np.flatnonzero((self.q_lengths > 0) & (self.k_lengths > 0))

    def groups(self) -> Iterator[tuple[int, int, np.ndarray, np.ndarray]]:
        """Non-empty segments grouped by (query length, key length): ``(lq, lk, q_rows, k_rows)`` with
        row indices shaped ``[B, lq]`` and ``[B, lk]``, for one batched kernel call per group. Derived
        once per :class:`Segments` (the runtime reuses one per node for every layer)."""
        return iter(self._groups)

    @cached_property
    def _groups(self) -> tuple[tuple[int, int, np.ndarray, np.ndarray], ...]:
        return tuple(self._make_groups())

    def _make_groups(self) -> Iterator[tuple[int, int, np.ndarray, np.ndarray]]:
        ids = self.nonempty()
        if ids.size == 0:
            return
        lq, lk = self.q_lengths[ids], self.k_lengths[ids]
        keys = np.stack([lq, lk], axis=1)
        uniq, inverse = np.unique(keys, axis=0, return_inverse=True)
        starts_q = np.asarray(self.cu_q[:-1], dtype=np.int64)[ids]
        starts_k = np.asarray(self.cu_k[:-1], dtype=np.int64)[ids]
        for g, (gq, gk) in enumerate(uniq.tolist()):
            members = np.flatnonzero(inverse.reshape(-1) == g)
            q_rows = starts_q[members, None] + np.arange(gq, dtype=np.int64)[None, :]
            k_rows = starts_k[members, None] + np.arange(gk, dtype=np.int64)[None, :]
            yield int(gq), int(gk), q_rows, k_rows

    def check(self, q: Tensor, k: Tensor, causal: bool) -> None:
        """Raise ``ValueError`` if the buffers do not match the segments."""
        if q.shape[0] != self.total_q or k.shape[0] != self.total_k:
            raise ValueError(
                f"segments cover {self.total_q} query / {self.total_k} key rows, "
                f"buffers have {q.shape[0]} / {k.shape[0]}"
            )
        if causal and np.any(self.q_lengths != self.k_lengths):
            raise ValueError("causal segments need equal query and key lengths")


class AttentionKernel(Protocol):
    """Varlen attention with LSE; see the module docstring for shapes."""

    name: str

    def forward(self, q: Tensor, k: Tensor, v: Tensor, seg: Segments, causal: bool) -> tuple[Tensor, Tensor]:
        """``(out [Tq, Hq, D], lse [Tq, Hq] fp32)``; rows of empty segments get out 0 and lse -inf."""
        ...

    def backward(
        self, dout: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor, seg: Segments, causal: bool
    ) -> tuple[Tensor, Tensor, Tensor]:
        """``(dq, dk, dv)`` given the (possibly merged) output and LSE."""
        ...


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


def _causal_mask(lq: int, lk: int, device: torch.device) -> Tensor:
    return torch.ones(lq, lk, dtype=torch.bool, device=device).triu(1)


class _GroupedKernel(ABC):
    """Shared driver: one batched dense call per group of equally long segments."""

    name = "grouped"

    @abstractmethod
    def _fwd_group(self, q: Tensor, k: Tensor, v: Tensor, causal: bool, scale: float) -> tuple[Tensor, Tensor]:
        """(output, log-sum-exp) of one group of equally long segments."""

    @abstractmethod
    def _bwd_group(
        self, do: Tensor, q: Tensor, k: Tensor, v: Tensor, o: Tensor, lse: Tensor, causal: bool, scale: float
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
            o, l_ = self._fwd_group(_gather(q, q_rows), kg, vg, causal, scale)
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
                _gather(dout, q_rows), _gather(q, q_rows), kg, vg, _gather(out, q_rows), lg, causal, scale
            )
            _scatter(dq, q_rows, gq)
            _scatter(dk, k_rows, _reduce_kv(gk, groups))
            _scatter(dv, k_rows, _reduce_kv(gv, groups))
        return dq, dk, dv


class MathKernel(_GroupedKernel):
    """Plain fp32 matmul/softmax attention with an explicit backward: exact, memory O(L^2) per segment."""

    name = "math"

    def _scores(self, q: Tensor, k: Tensor, causal: bool, scale: float) -> Tensor:
        s = torch.matmul(q.float(), k.float().transpose(-1, -2)) * scale
        if causal:
            s = s.masked_fill(_causal_mask(s.shape[-2], s.shape[-1], s.device), -math.inf)
        return s

    def _fwd_group(self, q: Tensor, k: Tensor, v: Tensor, causal: bool, scale: float) -> tuple[Tensor, Tensor]:
        s = self._scores(q, k, causal, scale)
        lse = torch.logsumexp(s, dim=-1)
        out = torch.matmul(torch.exp(s - lse.unsqueeze(-1)), v.float())
        return out.to(q.dtype), lse

    def _bwd_group(
        self, do: Tensor, q: Tensor, k: Tensor, v: Tensor, o: Tensor, lse: Tensor, causal: bool, scale: float
    ) -> tuple[Tensor, Tensor, Tensor]:
        p = torch.exp(self._scores(q, k, causal, scale) - lse.float().unsqueeze(-1))
        do32 = do.float()
        dv = torch.matmul(p.transpose(-1, -2), do32)
        dp = torch.matmul(do32, v.float().transpose(-1, -2))
        delta = (do32 * o.float()).sum(dim=-1, keepdim=True)
        ds = p * (dp - delta) * scale
        dq = torch.matmul(ds, k.float())
        dk = torch.matmul(ds.transpose(-1, -2), q.float())
        return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)


class CpuFlashKernel(_GroupedKernel):
    """torch's CPU flash-attention op (``_scaled_dot_product_flash_attention_for_cpu``) and its backward."""

    name = "cpu-flash"

    def _fwd_group(self, q: Tensor, k: Tensor, v: Tensor, causal: bool, scale: float) -> tuple[Tensor, Tensor]:
        out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, causal, scale=scale)
        return out, lse

    def _bwd_group(
        self, do: Tensor, q: Tensor, k: Tensor, v: Tensor, o: Tensor, lse: Tensor, causal: bool, scale: float
    ) -> tuple[Tensor, Tensor, Tensor]:
        op = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward
        dq, dk, dv = op(
            do.contiguous(),
            q.contiguous(),
            k.contiguous(),
            v.contiguous(),
            o.contiguous(),
            lse.contiguous(),
            0.0,
            causal,
            scale=scale,
        )
        return dq, dk, dv


def _cu(bounds: tuple[int, ...], device: torch.device) -> Tensor:
    return torch.tensor(bounds, dtype=torch.int32, device=device)


class TorchVarlenKernel:
    """``torch.nn.attention.varlen`` (FlashAttention inside torch; CUDA). KV heads are expanded before
    the call so the GQA-less cuDNN path works too; the LSE is kept as ``[Tq, Hq]``."""

    name = "torch-varlen"

    def forward(self, q: Tensor, k: Tensor, v: Tensor, seg: Segments, causal: bool) -> tuple[Tensor, Tensor]:
        """See :class:`AttentionKernel`."""
        from torch.nn.attention.varlen import AuxRequest, varlen_attn

        seg.check(q, k, causal)
        groups = q.shape[1] // k.shape[1]
        ke, ve = (t.repeat_interleave(groups, dim=1) for t in (k, v))
        out, lse = varlen_attn(
            q,
            ke,
            ve,
            _cu(seg.cu_q, q.device),
            _cu(seg.cu_k, q.device),
            int(seg.q_lengths.max(initial=0)),
            int(seg.k_lengths.max(initial=0)),
            return_aux=AuxRequest(lse=True),
            window_size=(-1, 0) if causal else (-1, -1),
        )
        return out, _lse_tokens_first(lse, q.shape[0])

    def backward(
        self, dout: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor, seg: Segments, causal: bool
    ) -> tuple[Tensor, Tensor, Tensor]:
        """See :class:`AttentionKernel`."""
        groups = q.shape[1] // k.shape[1]
        ke, ve = (t.repeat_interleave(groups, dim=1) for t in (k, v))
        rng = torch.zeros(2, dtype=torch.uint64, device=q.device)
        dq, dk, dv = torch.ops.torch_attn._varlen_attn_backward(
            dout,
            q,
            ke,
            ve,
            out,
            lse.t().contiguous(),
            _cu(seg.cu_q, q.device),
            _cu(seg.cu_k, q.device),
            int(seg.q_lengths.max(initial=0)),
            int(seg.k_lengths.max(initial=0)),
            causal,
            rng,
            None,
            [-1, 0] if causal else [-1, -1],
        )
        return dq, _reduce_heads(dk, groups), _reduce_heads(dv, groups)


def _lse_tokens_first(lse: Tensor, tokens: int) -> Tensor:
    """Flash varlen kernels return the LSE as ``[H, T]``; the kernels here use ``[T, H]``."""
    return lse.t().contiguous().float() if lse.shape[-1] == tokens and lse.shape[0] != tokens else lse.float()


def _reduce_heads(dx: Tensor, groups: int) -> Tensor:
    """``[T, H*groups, D]`` gradients of replicated heads summed to ``[T, H, D]``."""
    return dx if groups == 1 else dx.view(dx.shape[0], -1, groups, dx.shape[-1]).sum(dim=2)


class FlashAttnKernel:
    """flash-attn's varlen forward/backward (``pip install nspsim[gpu]``). Keyword arguments are
    matched to the installed version's signature (window sizes and softcap changed across 2.x)."""

    name = "flash-attn"

    def __init__(self) -> None:
        from flash_attn import flash_attn_interface as fa  # type: ignore[import-not-found]  # optional extra

        self._fwd: Callable[..., Any] = fa._flash_attn_varlen_forward
        self._bwd: Callable[..., Any] = fa._flash_attn_varlen_backward

    def _call(self, fn: Callable[..., Any], causal: bool, **kw: Any) -> Any:
        params = inspect.signature(fn).parameters
        extra: dict[str, Any] = {
            "dropout_p": 0.0,
            "causal": causal,
            "alibi_slopes": None,
            "softcap": 0.0,
            "deterministic": True,
            "window_size": (-1, -1),
            "window_size_left": -1,
            "window_size_right": -1,
            "return_softmax": False,
        }
        kw.update({name: value for name, value in extra.items() if name in params})
        return fn(**kw)

    def forward(self, q: Tensor, k: Tensor, v: Tensor, seg: Segments, causal: bool) -> tuple[Tensor, Tensor]:
        """See :class:`AttentionKernel`."""
        seg.check(q, k, causal)
        res = self._call(
            self._fwd,
            causal,
            q=q,
            k=k,
            v=v,
            cu_seqlens_q=_cu(seg.cu_q, q.device),
            cu_seqlens_k=_cu(seg.cu_k, q.device),
            max_seqlen_q=int(seg.q_lengths.max(initial=0)),
            max_seqlen_k=int(seg.k_lengths.max(initial=0)),
            softmax_scale=q.shape[-1] ** -0.5,
        )
        return res[0], _lse_tokens_first(res[1], q.shape[0])

    def backward(
        self, dout: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor, seg: Segments, causal: bool
    ) -> tuple[Tensor, Tensor, Tensor]:
        """See :class:`AttentionKernel`."""
        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        self._call(
            self._bwd,
            causal,
            dout=dout,
            q=q,
            k=k,
            v=v,
            out=out,
            softmax_lse=lse.t().contiguous(),
            dq=dq,
            dk=dk,
            dv=dv,
            cu_seqlens_q=_cu(seg.cu_q, q.device),
            cu_seqlens_k=_cu(seg.cu_k, q.device),
            max_seqlen_q=int(seg.q_lengths.max(initial=0)),
            max_seqlen_k=int(seg.k_lengths.max(initial=0)),
            softmax_scale=q.shape[-1] ** -0.5,
        )
        return dq, dk, dv


KERNELS: dict[str, Callable[[], AttentionKernel]] = {
    "math": MathKernel,
    "cpu-flash": CpuFlashKernel,
    "torch-varlen": TorchVarlenKernel,
    "flash-attn": FlashAttnKernel,
}


def kernel_available(name: str, device: torch.device) -> bool:
    """Whether kernel ``name`` can run on ``device`` here."""
    if name == "math":
        return True
    if name == "cpu-flash":
        return device.type == "cpu" and hasattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu")
    if device.type != "cuda":
        return False
    module = "torch.nn.attention.varlen" if name == "torch-varlen" else "flash_attn"
    return importlib.util.find_spec(module) is not None


def select_kernel(name: str, device: torch.device) -> AttentionKernel:
    """Kernel by name, or the best available for ``device`` with ``"auto"``; ``ValueError`` otherwise."""
    if name == "auto":
        order = ("flash-attn", "torch-varlen") if device.type == "cuda" else ("cpu-flash",)
        name = next((n for n in order if kernel_available(n, device)), "math")
    if name not in KERNELS:
        raise ValueError(f"unknown attention kernel {name!r} (known: auto, {', '.join(KERNELS)})")
    if not kernel_available(name, device):
        raise ValueError(f"attention kernel {name!r} is not available on {device.type}")
    return KERNELS[name]()
