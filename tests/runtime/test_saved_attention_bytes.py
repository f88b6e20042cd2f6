"""Saved-attention memory: the bytes the runtime's attention node keeps after forward, against
``MemoryModel.node_attention_bytes``.

One rank (rank 0) of a degree-k node runs the real :class:`nspsim_runtime.nested_attention.NestedAttention`
in a single process; a loopback communicator completes every collective at once and fills the
receive buffer (the kept tensors' shapes and dtypes depend on the layout, not on the values). After
forward, the test collects what backward could still read: tensors packed through
``torch.autograd.graph.saved_tensors_hooks`` (none here: the node is one autograd Function that keeps
its state on its context) and every tensor held by the node tasks on that context. Distinct
storages are summed (dedupe by ``data_ptr``) and split into the node's inputs (the caller's
sequence-layout q, k, v) and what the node itself keeps; the latter must equal the model's figure
for one layer, exactly (lengths are multiples of 2k, so every Ring rank holds L/k rows of each
sample). The CPU runtime runs fp32; bf16 cases check that the log-sum-exp stays fp32 while the other
tensors take the activation dtype. No GPU is used (the CUDA allocator's figures are not checked).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import torch
from torch import Tensor

from helpers import make_batch
from nspsim.execution.layout import micro_batch_layout
from nspsim.plan import make_plan
from nspsim.sp_tree import Node
from nspsim.specs.backend import SPBackend
from nspsim.specs.clusters import get_cluster
from nspsim.specs.memory import memory_model
from nspsim.specs.model import get_model
from nspsim.specs.training import TrainingSpec
from nspsim_runtime.backends import sp_backends
from nspsim_runtime.backends.base import ExecContext, LocalBackend, NodeTask, PhaseBackend
from nspsim_runtime.groups import Pending
from nspsim_runtime.kernels import select_kernel
from nspsim_runtime.nested_attention import NestedAttention
from nspsim_runtime.timing import PhaseClock

CPU = torch.device("cpu")
SPEC = get_model("tiny")  # 8 query heads, 2 KV heads, head dim 8
ULYSSES, RING = SPBackend.ULYSSES, SPBackend.RING


class _LoopbackComm:
    """One rank's communicator without peers: a collective is complete when issued and its receive
    buffer holds a constant (the kernels only need finite values)."""

    def all_to_all(self, node: Node | None, out: Tensor, inp: Tensor, *args: Any) -> Pending:
        out.fill_(0.25)
        return Pending(self, [], "loopback", 0.0)  # type: ignore[arg-type]

    def ring_shift(self, node: Node, send: Tensor, recv: Tensor, label: str, tag: int) -> Pending:
        recv.fill_(0.25)
        return Pending(self, [], label, 0.0)  # type: ignore[arg-type]


def _tensors(obj: Any) -> Iterator[Tensor]:
    """Every tensor reachable from node tasks through their fields, dicts, lists and tuples."""
    if isinstance(obj, Tensor):
        yield obj
    elif isinstance(obj, NodeTask):
        for name in ("q", "k", "v", "state", "out", "dout", "grads"):
            yield from _tensors(getattr(obj, name))
    elif isinstance(obj, dict):
        for value in obj.values():
            yield from _tensors(value)
    elif isinstance(obj, (list, tuple)):
        for value in obj:
            yield from _tensors(value)


def _storages(tensors: Iterator[Tensor] | list[Tensor]) -> dict[int, int]:
    return {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in tensors}


def _run_node(
    backend: SPBackend, degree: int, lengths: list[int], marks: list[bool], dtype: torch.dtype
) -> tuple[int, int, int, NestedAttention, Tensor, tuple[Tensor, Tensor, Tensor]]:
    """Forward of rank 0 of one degree-``degree`` node holding ``lengths``; returns (bytes the node
    keeps beyond its inputs, bytes of its inputs it holds, autograd-packed tensors, the call, out, qkv)."""
    plan = make_plan(
        planner="hand",
        cluster=get_cluster("cpu", degree),
        model=SPEC,
        batch=make_batch(lengths),
        spmax=degree,
        token_budget=10**6,
        nodes=[Node(degree, 0)] * len(lengths),
        backend=backend,
        recompute=marks,
    )
    mbl = micro_batch_layout(plan, 0, 0, degree)
    ctx = ExecContext(comm=_LoopbackComm(), kernel=select_kernel("cpu-flash", CPU), clock=PhaseClock())  # type: ignore[arg-type]
    sp = sp_backends(SPEC)[backend]
    backends: dict[Node, PhaseBackend] = {n: LocalBackend() if n.degree == 1 else sp for n in mbl.shards}
    attention = NestedAttention(ctx, mbl.layout, backends, np.asarray(marks), plan.issue_order[0], None)
    rows = mbl.layout.num_rows
    gen = torch.Generator().manual_seed(0)
    q, k, v = (
        torch.randn(rows, h, SPEC.head_dim, generator=gen).to(dtype).requires_grad_()
        for h in (SPEC.num_heads, SPEC.num_kv_heads, SPEC.num_kv_heads)
    )
    packed: list[Tensor] = []

    def pack(x: Tensor) -> Tensor:
        packed.append(x)
        return x

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda x: x):
        out = attention(q, k, v)
    held = _storages([*_tensors(out.grad_fn.tasks), *packed])  # type: ignore[union-attr]
    inputs = _storages([q, k, v])
    assert out.untyped_storage().data_ptr() not in held  # the output belongs to the caller (o_proj input)
    own = sum(n for ptr, n in held.items() if ptr not in inputs)
    held_inputs = sum(n for ptr, n in held.items() if ptr in inputs)
    return own, held_inputs, len(packed), attention, out, (q, k, v)


def _model_bytes(backend: SPBackend, degree: int, tokens: int, dtype: torch.dtype) -> float:
    """The memory model's bytes of one layer of one rank for ``tokens`` saved tokens of the node."""
    act = torch.empty(0, dtype=dtype).element_size()
    training = TrainingSpec(act_bytes=act, param_bytes=act, grad_bytes=act, backend=backend, reserved_bytes=0)
    memory = memory_model(SPEC, get_cluster("cpu", max(degree, 2)), training)
    return memory.node_attention_bytes(float(tokens), degree) / memory.num_layers


def _seq_qkv_bytes(rows: int, dtype: torch.dtype) -> int:
    act = torch.empty(0, dtype=dtype).element_size()
    return rows * (SPEC.q_width + 2 * SPEC.kv_width) * act


SAVED = [
    pytest.param(ULYSSES, 2, torch.float32, id="ulysses-sp2-within-kv-heads"),
    pytest.param(ULYSSES, 4, torch.float32, id="ulysses-sp4-kv-replicated-x2"),
    pytest.param(ULYSSES, 8, torch.float32, id="ulysses-sp8-kv-replicated-x4"),
    pytest.param(ULYSSES, 4, torch.bfloat16, id="ulysses-sp4-bf16-lse-fp32"),
    pytest.param(RING, 4, torch.float32, id="ring-sp4-no-replication"),
    pytest.param(RING, 8, torch.bfloat16, id="ring-sp8-bf16"),
    pytest.param(ULYSSES, 1, torch.float32, id="leaf"),
    pytest.param(RING, 1, torch.bfloat16, id="leaf-bf16"),
]


@pytest.mark.parametrize(("backend", "degree", "dtype"), SAVED)
def test_a_saved_node_keeps_exactly_what_the_memory_model_counts(
    backend: SPBackend, degree: int, dtype: torch.dtype
) -> None:
    lengths = [16, 32, 48]
    own, held_inputs, packed, _, out, qkv = _run_node(backend, degree, lengths, [False] * 3, dtype)
    assert own == _model_bytes(backend, degree, sum(lengths), dtype)
    assert packed == 0  # the node's state lives on its autograd context, not in saved tensors
    # The node also holds its sequence-layout inputs until backward (the model's selective
    # checkpointing recomputes them from the layer input; see nspsim/specs/memory.py).
    assert held_inputs == _seq_qkv_bytes(sum(lengths) // degree, dtype)
    out.backward(torch.ones_like(out))  # what was kept is enough for the backward
    assert all(x.grad is not None and x.grad.shape == x.shape for x in qkv)


def test_the_figures_by_hand() -> None:
    """Tiny model, fp32, 96 tokens: per rank of SP4 Ulysses, 24 sharded tokens x (Q 64 + K, V 2 x 32
    replicated to 4 heads x 8 + O 64 values) x 4 B + 24 x 8 heads x 4 B of LSE; Ring keeps O and LSE."""
    assert _model_bytes(ULYSSES, 4, 96, torch.float32) == 24 * (64 + 2 * 32 + 64) * 4 + 24 * 8 * 4
    assert _model_bytes(ULYSSES, 2, 96, torch.float32) == 48 * (64 + 2 * 16 + 64) * 4 + 48 * 8 * 4
    assert _model_bytes(RING, 4, 96, torch.float32) == 24 * 64 * 4 + 24 * 8 * 4
    assert _model_bytes(ULYSSES, 1, 96, torch.bfloat16) == 96 * 64 * 2 + 96 * 8 * 4


@pytest.mark.parametrize(
    ("backend", "degree"),
    [
        pytest.param(ULYSSES, 4, id="ulysses-sp4"),
        pytest.param(RING, 4, id="ring-sp4"),
        pytest.param(RING, 1, id="leaf"),
    ],
)
def test_a_recompute_marked_sample_keeps_nothing_beyond_the_inputs(backend: SPBackend, degree: int) -> None:
    lengths, marks = [16, 32, 48], [False, True, False]
    own, held_inputs, _, attention, out, qkv = _run_node(backend, degree, lengths, marks, torch.float32)
    assert own == _model_bytes(backend, degree, 16 + 48, torch.float32)
    assert held_inputs == _seq_qkv_bytes(sum(lengths) // degree, torch.float32)
    everything, _, _, _, _, _ = _run_node(backend, degree, lengths, [True] * 3, torch.float32)
    assert everything == 0 == _model_bytes(backend, degree, 0, torch.float32)
    out.backward(torch.ones_like(out))  # the marked sample is recomputed from the held inputs
    assert attention.ctx.clock.seconds["attn_remat"] > 0
    assert all(x.grad is not None for x in qkv)
