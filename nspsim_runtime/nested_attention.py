"""The nested attention call: the ``attention(q, k, v)`` a model's layers make under an NSP plan.

:class:`NestedAttention` is built per micro-batch and rank by
:meth:`nspsim_runtime.executor.NSPExecutor.nested_attention` and called once per layer. It expects this
rank's rows of the plan's *execution layout* (:class:`nspsim.execution.layout.RankLayout`: the rank's
nodes in issue order, inside a node each sample's chunks in plan order), already projected and
position-encoded by the layer:

* ``q``: ``[T, Hq, D]``; ``k``, ``v``: ``[T, Hkv, D]`` with ``Hq % Hkv == 0`` (GQA), where ``T`` is
  ``layout.num_rows`` and row ``r`` is the token at ``layout.positions[r]`` of its sample;

and returns the causal attention output of the same rows, ``[T, Hq, D]`` (one causal segment per
sample: each token attends to the earlier tokens of its own sample, wherever they are held; with the
layer's sliding ``window`` W, to itself and the W-1 before it). Ulysses and local nodes run a window
as a banded kernel; Ring refuses it (:func:`nspsim.specs.backend.window_refusal`).
Gradients flow to ``q``, ``k`` and ``v``.

Each call is one autograd Function. Its forward and backward run the phases of this rank's nodes in
the global streamed order of :mod:`nspsim.execution.schedule` (prologues of the next node in flight
while the current node computes), each phase delegated to the node's backend (Ulysses, Ring, or the
local one for leaves). Tree-level recomputation: samples marked ``recompute`` keep no attention state
after forward and are recomputed (communication and kernel) in backward. Trade-off: the whole
attention core is opaque to autograd (one node in the graph per layer), so the backends schedule
their own collectives and hold their own state, in exchange for overlap that autograd could not order.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt
import torch
from torch import Tensor

from nspsim.execution.layout import RankLayout
from nspsim.execution.schedule import rank_steps
from nspsim.sp_tree import Node
from nspsim_runtime.backends.base import ExecContext, NodeTask, PhaseBackend


class _NestedAttentionFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, q: Tensor, k: Tensor, v: Tensor, runner: NestedAttention, window: int | None) -> Tensor:
        out, tasks = runner.run_forward(q, k, v, window)
        ctx.runner, ctx.tasks = runner, tasks
        return out

    @staticmethod
    def backward(ctx: Any, dout: Tensor) -> tuple[Tensor | None, ...]:
        dq, dk, dv = ctx.runner.run_backward(ctx.tasks, dout.contiguous())
        ctx.tasks = None
        return dq, dk, dv, None, None


class NestedAttention:
    """The attention call NSP plugs into the model for one micro-batch on one rank."""

    def __init__(
        self,
        ctx: ExecContext,
        layout: RankLayout,
        backends: Mapping[Node, PhaseBackend],
        marks: npt.NDArray[np.bool_],
        order: tuple[Node, ...],
        lookahead: int | None,
    ) -> None:
        self.ctx, self.layout, self.backends, self.marks = ctx, layout, backends, marks
        self.steps = {
            "fwd": rank_steps(order, layout.rank, lookahead),
            "bwd": rank_steps(tuple(reversed(order)), layout.rank, lookahead),
        }
        self.serial = lookahead == 0
        self._empty: tuple[Tensor, Tensor] = (torch.zeros(0), torch.zeros(0))
        self.slots = {slot.node: slot for slot in layout.slots}

    def __call__(self, q: Tensor, k: Tensor, v: Tensor, window: int | None = None) -> Tensor:
        """Attention output for this rank's execution rows (causal within the layer's sliding ``window``)."""
        out: Tensor = _NestedAttentionFn.apply(q, k, v, self, window)  # type: ignore[no-untyped-call]
        return out

    def _tasks(self, q: Tensor, k: Tensor, v: Tensor, window: int | None) -> dict[Node, NodeTask]:
        return {
            node: NodeTask(
                slot=s,
                q=q[s.start : s.stop],
                k=k[s.start : s.stop],
                v=v[s.start : s.stop],
                recompute=self.marks[s.shards.samples],
                window=window,
            )
            for node, s in self.slots.items()
        }

    def _drive(self, tasks: dict[Node, NodeTask], prefix: str) -> dict[Node, Any]:
        results: dict[Node, Any] = {}
        for step in self.steps[prefix]:
            backend, task = self.backends[step.node], tasks[step.node]
            getattr(backend, f"{prefix}_{step.phase}")(task, self.ctx)
            if self.serial and step.phase == "epilogue":
                results[step.node] = getattr(backend, f"{prefix}_finish")(task, self.ctx)
        for node, task in tasks.items():
            if node not in results:
                results[node] = getattr(self.backends[node], f"{prefix}_finish")(task, self.ctx)
        return results

    def run_forward(
        self, q: Tensor, k: Tensor, v: Tensor, window: int | None = None
    ) -> tuple[Tensor, dict[Node, NodeTask]]:
        """Forward of every node on this rank; returns the output rows and the per-node state."""
        self._empty = (q.new_zeros((0, *q.shape[1:])), k.new_zeros((0, *k.shape[1:])))
        tasks = self._tasks(q, k, v, window)
        outs = self._drive(tasks, "fwd")
        for task in tasks.values():
            task.out = None
        return _cat([outs[s.node] for s in self.layout.slots], self._empty[0]), tasks

    def run_backward(self, tasks: dict[Node, NodeTask], dout: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Backward of every node (recomputing marked samples); returns dQ, dK, dV rows."""
        for task in tasks.values():
            task.dout = dout[task.slot.start : task.slot.stop]
        grads = self._drive(tasks, "bwd")
        parts = [grads[s.node] for s in self.layout.slots]
        q0, k0 = self._empty
        return _cat([g[0] for g in parts], q0), _cat([g[1] for g in parts], k0), _cat([g[2] for g in parts], k0)


def _cat(parts: list[Tensor], empty: Tensor) -> Tensor:
    return torch.cat(parts, dim=0) if parts else empty
