"""Published attention-kernel throughput curves: what an attention kernel achieves on a GPU family.

Each curve is ``peak * L / (L + half_length)`` FLOP/s for causal attention over sequences of length L,
forward and backward separately, per (GPU family, kernel, head dimension). The coefficients are least-
squares fits (relative error) to the causal rows of the published kernel benchmarks in nspsim's
reference set (``nspsim/validation/reference/kernels.toml``: FlashAttention-2's A100 and H100 fwd+bwd
figures, FlashAttention-3's H100 forward figure with its FA2, cuDNN and Triton bars), made by
:func:`nspsim.validation.fit.fit_attention_curves`; ``tests/validation/test_validation.py`` refits them and
checks these numbers. FLOPs follow FlashAttention's benchmark convention (forward 4*b*s^2*h*d halved
when causal, backward 2.5x forward), which is nspsim's (:func:`nspsim.specs.model.causal_attention_flops`).

Where a source measured only forward+backward (FlashAttention-2's A100 figure, its Triton bars), the
forward and backward curves are one curve (the split cannot be recovered). Where it measured only
forward (FlashAttention-3 and cuDNN on H100, and FA2 at head dimension 256), backward is the forward
curve times the FA2 backward over forward ratio at 16K tokens on the same GPU and the nearest head
dimension where FA2's backward was measured, a stated assumption. Head dimensions between measured
ones take the nearest in log2.

Trade-off: a two-parameter saturation curve per pass extrapolates sanely past the benchmarks' 16K
tokens (it saturates) and has fit errors of a few percent; a table would be exact at the measured
points and flat beyond them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class KernelCurve:
    """``peak * L / (L + half_length)`` FLOP/s."""

    peak: float
    half_length: float

    def __call__(self, lengths: np.ndarray) -> np.ndarray:
        lengths = np.asarray(lengths, dtype=np.float64)
        return self.peak * lengths / (lengths + self.half_length)


@dataclass(frozen=True)
class AttentionCurves:
    """Forward and backward curves of one kernel on one GPU family at one head dimension."""

    fwd: KernelCurve
    bwd: KernelCurve


ATTENTION_CURVES: Mapping[tuple[str, str, int], AttentionCurves] = {
    ("a100", "fa2", 64): AttentionCurves(KernelCurve(1.756e14, 504.8), KernelCurve(1.756e14, 504.8)),
    ("a100", "fa2", 128): AttentionCurves(KernelCurve(1.935e14, 484.5), KernelCurve(1.935e14, 484.5)),
    ("a100", "triton", 64): AttentionCurves(KernelCurve(8.195e13, 169.5), KernelCurve(8.195e13, 169.5)),
    ("a100", "triton", 128): AttentionCurves(KernelCurve(8.035e13, 319.2), KernelCurve(8.035e13, 319.2)),
    ("h100", "cudnn", 64): AttentionCurves(KernelCurve(3.975e14, 391.4), KernelCurve(3.651e14, 391.4)),
    ("h100", "cudnn", 128): AttentionCurves(KernelCurve(5.61e14, 387.3), KernelCurve(5.181e14, 387.3)),
    ("h100", "cudnn", 256): AttentionCurves(KernelCurve(5.222e14, 350.7), KernelCurve(4.823e14, 350.7)),
    ("h100", "fa2", 64): AttentionCurves(KernelCurve(3.077e14, 359.5), KernelCurve(2.869e14, 614.9)),
    ("h100", "fa2", 128): AttentionCurves(KernelCurve(3.505e14, 403.2), KernelCurve(3.271e14, 580.1)),
    ("h100", "fa2", 256): AttentionCurves(KernelCurve(3.069e14, 237.1), KernelCurve(2.834e14, 237.1)),
    ("h100", "fa3", 64): AttentionCurves(KernelCurve(5.029e14, 822.3), KernelCurve(4.619e14, 822.3)),
    ("h100", "fa3", 128): AttentionCurves(KernelCurve(6.551e14, 603.0), KernelCurve(6.05e14, 603.0)),
    ("h100", "fa3", 256): AttentionCurves(KernelCurve(6.932e14, 684.8), KernelCurve(6.402e14, 684.8)),
}


def attention_curves(family: str, kernel: str, head_dim: int) -> AttentionCurves:
    """The curves of ``kernel`` on ``family`` at the measured head dimension nearest ``head_dim``;
    ``ValueError`` naming what was measured when the kernel has no published curve there."""
    dims = sorted(d for (f, k, d) in ATTENTION_CURVES if f == family and k == kernel)
    if not dims:
        known = sorted({k for (f, k, _) in ATTENTION_CURVES if f == family})
        raise ValueError(
            f"attention kernel {str(kernel)!r} has no published curve for {family or 'this'} GPUs "
            f"(published: {', '.join(known) or 'none'}; or use attention_kernel = 'spec')"
        )
    best = min(dims, key=lambda d: (abs(math.log2(d) - math.log2(head_dim)), d))
    return ATTENTION_CURVES[(family, kernel, best)]
