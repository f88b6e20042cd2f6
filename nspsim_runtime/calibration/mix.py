"""The calibration's stand-ins for a decoder layer's work: the attention core replaced by a pass-through
(so a layer times its projections, norms and MLP alone), and the *kernel mix*, one layer's forward plus
an attention forward, which the sharing curve and the lockstep waits repeat as a unit of typical work.
Trade-off: a fixed mix is not any one step's blend of kernels, but it is the same on every rank and in
every measurement, so the figures it gives compare with each other."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from nspsim.specs.model import ModelSpec
from nspsim_runtime.kernels import Segments, select_kernel
from nspsim_runtime.model import DecoderLayer


class _PassThrough(torch.autograd.Function):
    """Stands in for the attention core: returns q, passes the gradient to q only."""

    @staticmethod
    def forward(ctx: Any, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        return q.clone()

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None, None]:
        return grad, None, None


def pass_through(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """The attention core of a layer timed without it (:class:`_PassThrough`)."""
    out: Tensor = _PassThrough.apply(q, k, v)  # type: ignore[no-untyped-call]
    return out


def kernel_mix(spec: ModelSpec, tokens: int, kernel_name: str = "auto") -> Callable[[], None]:
    """A no-grad decoder layer forward over ``tokens`` tokens (attention core passed through) followed
    by the runtime's attention kernel forward over one causal sample of ``tokens``."""
    kernel = select_kernel(kernel_name, torch.device("cpu"))
    layer = DecoderLayer(spec, rope_theta=1e6)
    h, pos = torch.randn(tokens, spec.hidden), torch.arange(tokens)
    q = torch.randn(tokens, spec.num_heads, spec.head_dim)
    kv = torch.randn(tokens, spec.num_kv_heads, spec.head_dim)
    seg = Segments.same([tokens])

    def mix() -> None:
        with torch.no_grad():
            layer(h, pos, pass_through)
            kernel.forward(q, kv, kv, seg, causal=True)

    return mix
