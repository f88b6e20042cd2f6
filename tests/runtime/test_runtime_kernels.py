"""Local attention kernels agree with a dense autograd reference (outputs, LSE, gradients)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from nspsim_runtime.kernels import KERNELS, Segments, kernel_available, select_kernel

CPU = torch.device("cpu")
CPU_KERNELS = [name for name in KERNELS if kernel_available(name, CPU)]


def dense_reference(q, k, v, seg: Segments, causal: bool):
    """Autograd reference: one masked softmax over the whole packed buffer (block-diagonal mask)."""
    groups = q.shape[1] // k.shape[1]
    ke, ve = (t.repeat_interleave(groups, dim=1) for t in (k, v))
    s = torch.einsum("qhd,khd->hqk", q.double(), ke.double()) / math.sqrt(q.shape[-1])
    allowed = torch.zeros(q.shape[0], k.shape[0], dtype=torch.bool)
    for i in range(seg.num):
        q0, q1, k0, k1 = seg.cu_q[i], seg.cu_q[i + 1], seg.cu_k[i], seg.cu_k[i + 1]
        block = torch.ones(q1 - q0, k1 - k0, dtype=torch.bool)
        allowed[q0:q1, k0:k1] = block.tril() if causal else block
    s = s.masked_fill(~allowed, -math.inf)
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - lse.unsqueeze(-1)).nan_to_num(0.0)
    out = torch.einsum("hqk,khd->qhd", p, ve.double())
    return out, lse.t()


def random_case(seed: int, causal: bool, hq: int = 4, hkv: int = 2, d: int = 8):
    rng = np.random.default_rng(seed)
    lq = rng.integers(0, 12, size=6).tolist()
    lk = lq if causal else rng.integers(0, 12, size=6).tolist()
    lq[0] = lk[0] = 5 if causal else lq[0]
    seg = Segments.pairs(lq, lk)
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(seg.total_q, hq, d, generator=gen)
    k = torch.randn(seg.total_k, hkv, d, generator=gen)
    v = torch.randn(seg.total_k, hkv, d, generator=gen)
    return q, k, v, seg


def rows_with_keys(seg: Segments) -> torch.Tensor:
    mask = torch.zeros(seg.total_q, dtype=torch.bool)
    for i in seg.nonempty():
        mask[seg.cu_q[i] : seg.cu_q[i + 1]] = True
    return mask


@pytest.mark.parametrize("name", CPU_KERNELS)
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_kernel_matches_dense_reference(name: str, causal: bool, seed: int) -> None:
    kernel = select_kernel(name, CPU)
    q, k, v, seg = random_case(seed, causal)
    out, lse = kernel.forward(q, k, v, seg, causal)
    qr, kr, vr = (t.clone().double().requires_grad_() for t in (q, k, v))
    ref_out, ref_lse = dense_reference(qr, kr, vr, seg, causal)
    live = rows_with_keys(seg)
    torch.testing.assert_close(out[live].double(), ref_out[live].detach(), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(lse[live].double(), ref_lse[live].detach(), atol=1e-5, rtol=1e-5)
    assert torch.all(out[~live] == 0) and torch.all(torch.isneginf(lse[~live]))
    dout = torch.randn_like(out)
    dout[~live] = 0
    dq, dk, dv = kernel.backward(dout, q, k, v, out, lse, seg, causal)
    ref_out.backward(dout.double())
    for got, ref in ((dq, qr), (dk, kr), (dv, vr)):
        torch.testing.assert_close(got.double(), ref.grad, atol=1e-5, rtol=1e-5)


def test_backward_with_merged_lse_gives_blockwise_gradients() -> None:
    """Ring attention's identity: a kernel's backward fed the merged output and LSE of two key blocks
    returns that block's share of the gradient; the shares sum to the full gradient."""
    kernel = select_kernel("math", CPU)
    q, k, v, _ = random_case(3, causal=False)
    seg_full = Segments.pairs([q.shape[0]], [k.shape[0]])
    out, lse = kernel.forward(q, k, v, seg_full, causal=False)
    half = k.shape[0] // 2
    dout = torch.randn_like(out)
    total = [torch.zeros_like(t) for t in (q, k, v)]
    for lo, hi in ((0, half), (half, k.shape[0])):
        seg = Segments.pairs([q.shape[0]], [hi - lo])
        dq, dk, dv = kernel.backward(dout, q, k[lo:hi], v[lo:hi], out, lse, seg, causal=False)
        total[0] += dq
        total[1][lo:hi] += dk
        total[2][lo:hi] += dv
    full = kernel.backward(dout, q, k, v, out, lse, seg_full, causal=False)
    for got, ref in zip(total, full):
        torch.testing.assert_close(got, ref, atol=1e-5, rtol=1e-5)


def test_select_kernel_rejects_unknown_and_unavailable() -> None:
    with pytest.raises(ValueError, match="unknown attention kernel"):
        select_kernel("nope", CPU)
    with pytest.raises(ValueError, match="not available"):
        select_kernel("torch-varlen", CPU)
    assert select_kernel("auto", CPU).name == "cpu-flash"


def test_causal_segments_need_equal_lengths() -> None:
    q = torch.zeros(3, 2, 4)
    with pytest.raises(ValueError, match="equal query and key"):
        select_kernel("math", CPU).forward(q, q[:2], q[:2], Segments.pairs([3], [2]), causal=True)


def _matches_math_on_cuda(
    name: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, seg: Segments, causal: bool
) -> None:
    """``name``'s forward and backward equal the math kernel's on the GPU in bf16 (rows with keys)."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    dev = torch.device("cuda")
    if not kernel_available(name, dev):
        pytest.skip(f"{name} is not installed")
    kernel, ref = select_kernel(name, dev), select_kernel("math", dev)
    q, k, v = (t.to(dev, torch.bfloat16) for t in (q, k, v))
    out, lse = kernel.forward(q, k, v, seg, causal)
    ref_out, ref_lse = ref.forward(q, k, v, seg, causal)
    live = rows_with_keys(seg).to(dev)
    torch.testing.assert_close(out[live].float(), ref_out[live].float(), atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(lse[live], ref_lse[live], atol=2e-2, rtol=2e-2)
    dout = torch.randn_like(out)
    for got, want in zip(
        kernel.backward(dout, q, k, v, out, lse, seg, causal),
        ref.backward(dout, q, k, v, ref_out, ref_lse, seg, causal),
    ):
        torch.testing.assert_close(got.float(), want.float(), atol=5e-2, rtol=5e-2)


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["torch-varlen", "flash-attn"])
@pytest.mark.parametrize("causal", [True, False])
def test_cuda_kernel_matches_math_kernel(name: str, causal: bool) -> None:
    q, k, v, seg = random_case(5, causal, hq=8, hkv=2, d=64)
    _matches_math_on_cuda(name, q, k, v, seg, causal)


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["torch-varlen", "flash-attn"])
@pytest.mark.parametrize("window", [1, 5, 64])
def test_cuda_kernel_within_a_window_matches_math_kernel(name: str, window: int) -> None:
    """``window_size=(W - 1, 0)``: the CUDA kernels attend within the sliding window as the math
    kernel's banded mask does (a query sees itself and the W-1 keys before it)."""
    q, k, v, seg = random_case(6, True, hq=8, hkv=2, d=64)
    _matches_math_on_cuda(name, q, k, v, seg.windowed(window), True)
