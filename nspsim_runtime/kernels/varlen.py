"""Kernels over the whole packed buffer in one varlen call (CUDA): FlashAttention with ``cu_seqlens``.

* ``flash-attn`` (:class:`FlashAttnKernel`): the flash-attn package's varlen forward and backward
  (optional extra ``gpu``); keyword arguments are matched to the installed version's signature;
* ``torch-varlen`` (:class:`TorchVarlenKernel`): ``torch.nn.attention.varlen`` (FlashAttention inside
  torch); KV heads are expanded before the call so the GQA-less cuDNN path works too.

Both return the LSE head-major (``[H, T]``); it is transposed to the ``[T, H]`` of
:class:`~nspsim_runtime.kernels.segments.AttentionKernel` and back for the backward. Trade-off: one launch
for all segments (no per-group gather/scatter), but CUDA only and an extra LSE transpose per call.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from nspsim_runtime.kernels.segments import Segments


def _cu(bounds: tuple[int, ...], device: torch.device) -> Tensor:
    return torch.tensor(bounds, dtype=torch.int32, device=device)


def window_size(seg: Segments, causal: bool) -> tuple[int, int]:
    """FlashAttention's ``(left, right)`` window: ``(W - 1, 0)`` for a causal sliding window W (a query
    sees itself and the W-1 keys before it), ``(-1, 0)`` causal, ``(-1, -1)`` unrestricted."""
    if seg.window is not None:
        return seg.window - 1, 0
    return (-1, 0) if causal else (-1, -1)


class TorchVarlenKernel:
    """``torch.nn.attention.varlen`` (FlashAttention inside torch; CUDA). KV heads are expanded before
    the call so the GQA-less cuDNN path works too; the LSE is kept as ``[Tq, Hq]``."""

    name = "torch-varlen"

    def forward(self, q: Tensor, k: Tensor, v: Tensor, seg: Segments, causal: bool) -> tuple[Tensor, Tensor]:
        """See :class:`AttentionKernel`."""
        # Imported on first use: the module pulls in triton and the flop counter (about 1.5 s on CPU),
        # and only CUDA runs this kernel. Importing it also registers torch.ops.torch_attn (backward).
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
            window_size=window_size(seg, causal),
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
            list(window_size(seg, causal)),
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
        # flash-attn is an optional extra (CUDA builds only): imported when this kernel is selected.
        from flash_attn import flash_attn_interface as fa  # type: ignore[import-not-found]  # optional extra

        self._fwd: Callable[..., Any] = fa._flash_attn_varlen_forward
        self._bwd: Callable[..., Any] = fa._flash_attn_varlen_backward

    def _call(self, fn: Callable[..., Any], causal: bool, window: tuple[int, int], **kw: Any) -> Any:
        params = inspect.signature(fn).parameters
        extra: dict[str, Any] = {
            "dropout_p": 0.0,
            "causal": causal,
            "alibi_slopes": None,
            "softcap": 0.0,
            "deterministic": True,
            "window_size": window if window[0] >= 0 else (-1, -1),
            "window_size_left": window[0],
            "window_size_right": window[1] if window[0] >= 0 else -1,
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
            window_size(seg, causal),
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
            window_size(seg, causal),
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
