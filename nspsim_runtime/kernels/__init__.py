"""Local (single-device) varlen attention kernels with an explicit forward and backward, by name.

The contract (packed ``[T, H, D]`` buffers, :class:`Segments`, output + LSE forward, backward from
the merged output and LSE) is in :mod:`nspsim_runtime.kernels.segments`. Kernels, best first
(``select_kernel("auto", device)``):

* ``flash-attn``: the flash-attn package's varlen kernels (CUDA, optional extra ``gpu``);
* ``torch-varlen``: ``torch.nn.attention.varlen`` (FlashAttention inside torch, CUDA only);
* ``cpu-flash``: torch's CPU flash-attention op (returns the LSE), one call per group of
  equally long segments;
* ``math``: plain matmul + softmax in fp32 with hand-written backward (any device; the reference).

The first two run one varlen call over the packed buffer (:mod:`nspsim_runtime.kernels.varlen`), the last
two one batched dense call per group of equal-length segments (:mod:`nspsim_runtime.kernels.grouped`).
Trade-off of ``auto``: the fastest kernel present wins, so results across machines agree to kernel
precision, not bit for bit; name a kernel to pin it.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable

import torch

from nspsim_runtime.kernels.grouped import CpuFlashKernel, MathKernel
from nspsim_runtime.kernels.segments import AttentionKernel, Segments
from nspsim_runtime.kernels.varlen import FlashAttnKernel, TorchVarlenKernel

__all__ = [
    "KERNELS",
    "AttentionKernel",
    "CpuFlashKernel",
    "FlashAttnKernel",
    "MathKernel",
    "Segments",
    "TorchVarlenKernel",
    "kernel_available",
    "select_kernel",
]

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
