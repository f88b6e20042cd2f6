"""The three-phase SP backend interface (docs/simulator.md; paper section 4.1.2) and the leaf backend.

A backend runs the attention core of one SP-tree node on one rank of its group, split into a
communication prologue, local compute and a communication epilogue, separately for forward and
backward. The executor calls the phases of all of a rank's nodes in one global order
(:mod:`nspsim.execution.schedule`), so a prologue or epilogue only *issues* asynchronous collectives and the
next phase of the same node waits for them. State between phases lives in a :class:`NodeTask`.

Tree-level recomputation: ``task.recompute`` marks node samples whose attention state is not kept
after forward; in backward the prologue re-issues their forward communication and the compute phase
reruns their forward attention (charged to ``attn_remat``) before the backward kernel.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt
import torch
from torch import Tensor

from nspsim.execution.layout import Slot
from nspsim.execution.shards import NodeShards, sample_rows
from nspsim_runtime.groups import Comm, Pending
from nspsim_runtime.kernels import AttentionKernel, Segments
from nspsim_runtime.timing import PhaseClock


@dataclass
class ExecContext:
    """What every backend needs: the communicator, the local kernel, the clock and a memo of index
    arrays derived from the plan, reused by every layer and pass. The memo holds one scope (one
    step's plan) at a time: :meth:`enter` with another scope, or :meth:`reset`, empties it."""

    comm: Comm
    kernel: AttentionKernel
    clock: PhaseClock
    memo: dict[Any, Any] = field(default_factory=dict)
    scope: Any = None

    def cached(self, key: Any, make: Callable[[], Any]) -> Any:
        """``make()`` once per ``key`` in the current scope. Keys describe content (lengths, ranks,
        marks), so a hit is correct whatever the scope; scopes only bound the memo's size."""
        if key not in self.memo:
            self.memo[key] = make()
        return self.memo[key]

    def enter(self, scope: Any) -> None:
        """Cache for ``scope`` from now on, dropping entries of any other scope."""
        if scope != self.scope:
            self.reset()
            self.scope = scope

    def reset(self) -> None:
        """Drop every cached entry (start of a step)."""
        self.memo.clear()
        self.scope = None


@dataclass
class NodeTask:
    """One node's attention work on this rank for one layer application (forward and backward);
    ``window``: the layer's causal sliding window (``None``: full causal attention)."""

    slot: Slot
    q: Tensor
    k: Tensor
    v: Tensor
    recompute: npt.NDArray[np.bool_]
    window: int | None = None
    pending: list[Pending] = field(default_factory=list)
    state: dict[str, Any] = field(default_factory=dict)
    out: Tensor | None = None
    dout: Tensor | None = None
    grads: tuple[Tensor, Tensor, Tensor] | None = None

    @property
    def any_recompute(self) -> bool:
        """Whether some samples of this node are recomputed in backward."""
        return bool(self.recompute.any())

    @property
    def all_recompute(self) -> bool:
        """Whether every sample of this node is recomputed in backward."""
        return bool(self.recompute.all())

    def wait_all(self, category: str | None = "sp_exposed_comm") -> None:
        """Wait for every outstanding collective of this task."""
        for p in self.pending:
            p.wait(category)
        self.pending.clear()


class PhaseBackend(Protocol):
    """Three phases per pass; ``*_finish`` returns the node's local result in sequence layout."""

    @property
    def name(self) -> str:
        """The backend's name (an :class:`~nspsim.specs.backend.SPBackend` member, or ``local``)."""
        ...

    def fwd_prologue(self, t: NodeTask, ctx: ExecContext) -> None: ...
    def fwd_compute(self, t: NodeTask, ctx: ExecContext) -> None: ...
    def fwd_epilogue(self, t: NodeTask, ctx: ExecContext) -> None: ...
    def fwd_finish(self, t: NodeTask, ctx: ExecContext) -> Tensor: ...
    def bwd_prologue(self, t: NodeTask, ctx: ExecContext) -> None: ...
    def bwd_compute(self, t: NodeTask, ctx: ExecContext) -> None: ...
    def bwd_epilogue(self, t: NodeTask, ctx: ExecContext) -> None: ...
    def bwd_finish(self, t: NodeTask, ctx: ExecContext) -> tuple[Tensor, Tensor, Tensor]: ...


def sample_segments(lengths: npt.NDArray[np.int64]) -> Segments:
    """Causal self-attention segments of whole samples."""
    return Segments.same(lengths.tolist())


class NodeIndex:
    """Index arrays of one node on this rank for one set of recompute marks: derived on first use and
    then shared by every layer and both passes of the step (see :func:`node_index`)."""

    def __init__(self, slot: Slot, marks: npt.NDArray[np.bool_]) -> None:
        self.slot, self.marks = slot, marks
        self.shards = slot.shards

    @cached_property
    def segments(self) -> Segments:
        """Whole-sample causal segments of the node (head layout / leaf rows)."""
        return sample_segments(self.shards.lengths)

    @cached_property
    def kept_rows(self) -> npt.NDArray[np.int64]:
        """This rank's local rows of the unmarked samples."""
        return self.shards.local_rows_of(self.slot.group_rank, ~self.marks)

    @cached_property
    def remat_rows(self) -> npt.NDArray[np.int64]:
        """This rank's local rows of the recompute-marked samples."""
        return self.shards.local_rows_of(self.slot.group_rank, self.marks)

    @cached_property
    def remat_shards(self) -> NodeShards:
        """The node restricted to its marked samples."""
        return self.shards.subset(self.marks)

    @cached_property
    def remat_segments(self) -> Segments:
        """Whole-sample segments of the marked samples."""
        return sample_segments(self.remat_shards.lengths)

    @cached_property
    def kept_sample_rows(self) -> npt.NDArray[np.int64]:
        """Rows of the unmarked samples in a buffer of the node's whole samples (Ulysses head layout)."""
        return sample_rows(self.shards.lengths, ~self.marks)

    @cached_property
    def remat_sample_rows(self) -> npt.NDArray[np.int64]:
        """Rows of the marked samples in a buffer of the node's whole samples."""
        return sample_rows(self.shards.lengths, self.marks)


def node_index(ctx: ExecContext, t: NodeTask) -> NodeIndex:
    """The :class:`NodeIndex` of ``t``'s node, rank and marks, built once per step."""
    key = ("node-index", t.slot.shards.key, t.slot.group_rank, t.recompute.tobytes())
    index: NodeIndex = ctx.cached(key, lambda: NodeIndex(t.slot, t.recompute))
    return index


def select_rows(x: Tensor, rows: npt.NDArray[np.int64]) -> Tensor:
    """``x[rows]`` with a numpy index."""
    return x.index_select(0, torch.as_tensor(rows, device=x.device))


def keep_rows(t: NodeTask, rows: npt.NDArray[np.int64], tensors: dict[str, Tensor]) -> None:
    """Save the given forward tensors, restricted to ``rows`` (the kept samples), in ``t.state``."""
    if t.all_recompute:
        return
    t.state["kept_rows"] = rows
    for name, x in tensors.items():
        t.state[name] = x if rows.size == x.shape[0] else select_rows(x, rows)


def merge_kept(
    t: NodeTask, total: int, rows: npt.NDArray[np.int64], recomputed: dict[str, Tensor]
) -> dict[str, Tensor]:
    """Full tensors of ``total`` rows from the kept rows in ``t.state`` and the recomputed ``rows``."""
    if t.all_recompute:
        return recomputed
    kept_idx = torch.as_tensor(t.state["kept_rows"])
    new_idx = torch.as_tensor(rows)
    out = {}
    for name, x in recomputed.items():
        full = x.new_empty((total, *x.shape[1:]))
        full.index_copy_(0, kept_idx.to(x.device), t.state[name])
        full.index_copy_(0, new_idx.to(x.device), x)
        out[name] = full
    return out


def kept_state(t: NodeTask, names: tuple[str, ...]) -> dict[str, Tensor]:
    """The saved tensors of a node with nothing to recompute."""
    return {name: t.state[name] for name in names}


class LocalBackend:
    """Degree-1 nodes: whole samples on one rank, no communication. Recompute-marked samples keep
    only the inputs (which the layer holds anyway) and rerun their forward kernel in backward."""

    name = "local"

    def fwd_prologue(self, t: NodeTask, ctx: ExecContext) -> None:
        """No communication."""

    def fwd_compute(self, t: NodeTask, ctx: ExecContext) -> None:
        """Run the kernel over the node's whole samples."""
        index = node_index(ctx, t)
        with ctx.clock.measure("attn_fwd"):
            out, lse = ctx.kernel.forward(t.q, t.k, t.v, index.segments.windowed(t.window), causal=True)
        t.out = out
        keep_rows(t, index.kept_rows, {"out": out, "lse": lse})

    def fwd_epilogue(self, t: NodeTask, ctx: ExecContext) -> None:
        """No communication."""

    def fwd_finish(self, t: NodeTask, ctx: ExecContext) -> Tensor:
        """The node's output rows."""
        assert t.out is not None
        return t.out

    def bwd_prologue(self, t: NodeTask, ctx: ExecContext) -> None:
        """No communication."""

    def bwd_compute(self, t: NodeTask, ctx: ExecContext) -> None:
        """Recompute the marked samples if needed, then run the backward kernel."""
        index = node_index(ctx, t)
        out, lse = self._forward_state(t, ctx, index)
        assert t.dout is not None
        with ctx.clock.measure("attn_bwd"):
            seg = index.segments.windowed(t.window)
            t.grads = ctx.kernel.backward(t.dout, t.q, t.k, t.v, out, lse, seg, causal=True)

    def _forward_state(self, t: NodeTask, ctx: ExecContext, index: NodeIndex) -> tuple[Tensor, Tensor]:
        if not t.any_recompute:
            return t.state["out"], t.state["lse"]
        with ctx.clock.measure("attn_remat"):
            rows = index.remat_rows
            q, k, v = (select_rows(x, rows) for x in (t.q, t.k, t.v))
            out_r, lse_r = ctx.kernel.forward(q, k, v, index.remat_segments.windowed(t.window), causal=True)
        full = merge_kept(t, t.q.shape[0], rows, {"out": out_r, "lse": lse_r})
        return full["out"], full["lse"]

    def bwd_epilogue(self, t: NodeTask, ctx: ExecContext) -> None:
        """No communication."""

    def bwd_finish(self, t: NodeTask, ctx: ExecContext) -> tuple[Tensor, Tensor, Tensor]:
        """Gradients of the node's q, k, v rows."""
        assert t.grads is not None
        return t.grads
