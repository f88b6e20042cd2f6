"""The nested SP executor: runs one training step of a Plan on this rank (docs/simulator.md).

Per step: (1) every rank all-gathers the plan's content hash on the control group and stops with
:class:`PlanMismatchError` unless all agree, before any other collective; (2) the process groups of
the plan's nodes are created (same order everywhere); (3) per micro-batch, one all-to-all moves token
ids and positions from the input layout to the plan's execution layout, the model runs with its
attention call replaced by :class:`NestedAttention`, and a second all-to-all (differentiable) returns
the final hidden rows to the input layout, where the loss of that micro-batch is computed and
back-propagated (the loss is normalised by the whole batch's token count, so micro-batches add up).

:class:`~nspsim_runtime.nested_attention.NestedAttention` (its own module) is one autograd Function per
layer call that runs the phases of this rank's nodes; the samples it recomputes in backward are
:func:`nspsim.execution.recompute.recompute_marks` of the plan and ``ExecOptions.recompute``.

Gradients are summed over all ranks: FSDP2 (``fully_shard`` per layer and at the root) reduce-scatters
them during backward, or, with ``grad_sync="allreduce"``, one all-reduce of all gradients follows the
last micro-batch. Trade-off: the layout changes cost two extra all-to-alls per micro-batch, in exchange
for a data pipeline and loss that never see the plan.

Gradient accumulation (``nspsim_runtime.train --accumulate W``): each pass of a window is one
:meth:`NSPExecutor.run` with ``window_tokens`` the window's token count, so every pass's loss is
normalised by the window's tokens and the gradients summed over the passes are the gradient of the
mean loss over all the window's tokens. ``sync=False`` leaves this pass's gradients unsynchronised:
FSDP2 holds them unsharded (``set_requires_gradient_sync(False)``) and the flat all-reduce is skipped,
so the pass that synchronises (the window's last) reduces the whole window's sum once.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import torch
import torch.distributed as dist
from torch import Tensor, nn
from torch.distributed.fsdp import FSDPModule

from nspsim.execution.layout import Exchange, MicroBatchLayout, micro_batch_layout
from nspsim.execution.recompute import recompute_marks
from nspsim.plan import Plan
from nspsim.sp_tree import Node
from nspsim.specs.backend import SPBackend, window_refusal
from nspsim.specs.memory import MemoryModel
from nspsim.specs.model import ModelSpec
from nspsim_runtime.backends import sp_backends
from nspsim_runtime.backends.base import ExecContext, LocalBackend, PhaseBackend
from nspsim_runtime.data import TokenStream
from nspsim_runtime.exec_options import ExecOptions
from nspsim_runtime.groups import Comm, GroupCache
from nspsim_runtime.kernels import select_kernel
from nspsim_runtime.nested_attention import NestedAttention
from nspsim_runtime.timing import PhaseClock


class PlanMismatchError(RuntimeError):
    """Ranks hold different plans for the same step."""


class PeerFailure(RuntimeError):
    """A collective failed because a peer rank died or stalled past the process-group timeout."""


_TRANSPORT_ERRORS = ("Connection closed", "Connection reset", "Timed out", "timed out", "NCCL", "Broken pipe")


def is_transport_error(exc: BaseException) -> bool:
    """Whether ``exc`` is a collective failing because a peer is gone or stalled (gloo's and NCCL's
    messages), as opposed to a bug or bad input."""
    return isinstance(exc, RuntimeError) and any(m in str(exc) for m in _TRANSPORT_ERRORS)


# ---- layout change --------------------------------------------------------------------------------
class _RowExchangeFn(torch.autograd.Function):
    """Differentiable all-to-all of rows (forward: A -> B; backward: B -> A)."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, ex: Exchange, comm: Comm, label: str) -> Tensor:
        ctx.ex, ctx.comm, ctx.label = ex, comm, label
        return exchange_rows(comm, ex, x, label)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
        return exchange_rows(ctx.comm, ctx.ex.reverse(), grad.contiguous(), ctx.label + "-bwd"), None, None, None


def exchange_rows(comm: Comm, ex: Exchange, x: Tensor, label: str) -> Tensor:
    """Run one layout-change all-to-all over the world (blocking; charged to ``sp_exposed_comm``)."""
    send = x.index_select(0, torch.as_tensor(ex.send_rows, device=x.device)).contiguous()
    recv = x.new_empty(int(ex.recv_counts.sum()), *x.shape[1:])
    comm.all_to_all(None, recv, send, ex.recv_counts.tolist(), ex.send_counts.tolist(), label).wait()
    return recv.index_select(0, torch.as_tensor(ex.recv_perm, device=x.device))


# ---- the executor ----------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class ExecutedStep:
    """What one executed step reports on this rank: the batch's mean loss (summed over ranks), its
    tokens, the forward+backward wall time and the seconds per measured category
    (:data:`nspsim_runtime.timing.MEASURED`)."""

    loss: float
    num_tokens: int
    fwd_bwd_s: float
    seconds: dict[str, float]


class NSPExecutor:
    """Executes plans on this rank. Process groups are passed in or created through ``groups``."""

    def __init__(
        self,
        *,
        model: nn.Module | None,
        spec: ModelSpec,
        rank: int,
        world: int,
        device: torch.device,
        groups: GroupCache,
        options: ExecOptions,
        control_group: Any = None,
        memory: MemoryModel | None = None,
    ) -> None:
        self.model, self.rank, self.world, self.device = model, rank, world, device
        self.groups, self.options, self.memory = groups, options, memory
        self.control_group = control_group if control_group is not None else groups.world_group
        sync = torch.cuda.synchronize if device.type == "cuda" and options.sync_timing else None
        self.clock = PhaseClock(sync)
        self.comm = Comm(rank=rank, world=world, groups=groups, clock=self.clock, device=device)
        self.ctx = ExecContext(comm=self.comm, kernel=select_kernel(options.kernel, device), clock=self.clock)
        self._sp: dict[SPBackend, PhaseBackend] = sp_backends(spec)
        self._window = spec.sliding_window
        self._local = LocalBackend()
        self._layouts: dict[str, list[MicroBatchLayout]] = {}

    # ---- plan identity ----------------------------------------------------------------------------
    def check_plan(self, plan: Plan) -> None:
        """All ranks must hold the same plan (content hash); raises :class:`PlanMismatchError` on every
        rank otherwise. This is the step's first collective."""
        hashes: list[Any] = [None] * self.world
        dist.all_gather_object(hashes, plan.content_hash, group=self.control_group)
        self.comm.log.append((tuple(range(self.world)), "plan-hash"))
        if len(set(hashes)) != 1:
            groups: dict[str, list[int]] = {}
            for r, h in enumerate(hashes):
                groups.setdefault(str(h), []).append(r)
            detail = "; ".join(f"ranks {rs} hold {h}" for h, rs in groups.items())
            raise PlanMismatchError(
                f"ranks hold different plans for this step ({detail}); every rank must execute the same plan"
            )

    def layouts(self, plan: Plan) -> list[MicroBatchLayout]:
        """Per-micro-batch layouts of this rank (only its own share; cached for the last two plans)."""
        key = plan.content_hash
        if key not in self._layouts:
            if len(self._layouts) >= 2:
                self._layouts.pop(next(iter(self._layouts)))
            self._layouts[key] = [
                micro_batch_layout(plan, mb, self.rank, self.world) for mb in range(plan.num_micro_batches)
            ]
        return self._layouts[key]

    def nested_attention(
        self, plan: Plan, micro_batch: int, marks: npt.NDArray[np.bool_] | None = None
    ) -> NestedAttention:
        """The attention call for ``micro_batch`` of ``plan`` on this rank (its inputs are the rank's
        execution-layout rows). Every rank must call this for the same plan: it may create groups. A
        plan whose backend cannot run the model's sliding window is refused here, on every rank alike,
        before any of its collectives (:func:`~nspsim.specs.backend.window_refusal`)."""
        refusal = window_refusal(plan.backend, self._window)
        if refusal is not None:
            raise ValueError(refusal)
        self.groups.ensure(plan.issue_order[micro_batch])
        mbl = self.layouts(plan)[micro_batch]
        if marks is None:
            marks = recompute_marks(plan, self.options.recompute, self.memory)
        self.ctx.enter(plan.content_hash)
        backends = {node: self._backend(plan, node) for node in mbl.shards}
        return NestedAttention(
            self.ctx, mbl.layout, backends, marks, plan.issue_order[micro_batch], self.options.lookahead
        )

    def _backend(self, plan: Plan, node: Node) -> PhaseBackend:
        return self._local if node.degree == 1 else self._sp[plan.backend]

    # ---- one step -----------------------------------------------------------------------------------
    def run(
        self, plan: Plan, data: TokenStream, *, window_tokens: int | None = None, sync: bool = True
    ) -> ExecutedStep:
        """Forward and backward of every micro-batch of ``plan`` on this rank's input rows ``data``;
        gradients are summed over all ranks. The caller steps the optimizer. A pass of an accumulation
        window gives the window's ``window_tokens`` (the loss normaliser; default: the plan's tokens)
        and ``sync=False`` to leave its gradients unsynchronised (module docstring)."""
        if self.model is None:
            raise ValueError("this executor was built without a model; it can only provide nested_attention()")
        total = int(plan.arrays[0].sum())
        if window_tokens is not None and window_tokens < total:
            raise ValueError(f"a window of {window_tokens} tokens cannot hold a pass of {total} tokens")
        try:
            return self._run(plan, data, total if window_tokens is None else window_tokens, sync)
        except RuntimeError as exc:
            if isinstance(exc, PlanMismatchError) or not is_transport_error(exc):
                raise
            last = self.comm.log[-1][1] if self.comm.log else "the first collective"
            raise PeerFailure(
                f"the step failed at or after collective '{last}': a peer rank died "
                f"or stalled past the process-group timeout ({str(exc).splitlines()[0]})"
            ) from exc

    def _run(self, plan: Plan, data: TokenStream, normaliser: int, sync: bool) -> ExecutedStep:
        assert self.model is not None
        self.clock.reset()
        self.comm.log.clear()  # the log and the index cache hold the current step only
        self.ctx.reset()
        self.check_plan(plan)
        self.groups.ensure(n for order in plan.issue_order for n in order)
        marks = recompute_marks(plan, self.options.recompute, self.memory)
        total = int(plan.arrays[0].sum())
        if isinstance(self.model, FSDPModule):
            self.model.set_requires_gradient_sync(sync)
        layouts = self.layouts(plan)  # host-side set-up, outside the measured forward/backward
        start = time.perf_counter()
        local_loss = 0.0
        for mb, mbl in enumerate(layouts):
            local_loss += self._micro_batch(self.model, plan, mb, mbl, data, marks, normaliser)
        fwd_bwd = self.clock.now() - start
        with self.clock.measure("comm_wait"):  # waiting here is waiting for the slowest rank
            dist.barrier(group=self.control_group)
        self.comm.log.append((tuple(range(self.world)), "barrier"))
        if sync:
            self._sync_grads()
        loss = torch.tensor([local_loss], dtype=torch.float64)
        dist.all_reduce(loss, group=self.control_group)
        self.comm.log.append((tuple(range(self.world)), "loss-sum"))
        return ExecutedStep(
            loss=float(loss.item()) / total, num_tokens=total, fwd_bwd_s=fwd_bwd, seconds=dict(self.clock.seconds)
        )

    def _micro_batch(
        self,
        model: nn.Module,
        plan: Plan,
        mb: int,
        mbl: MicroBatchLayout,
        data: TokenStream,
        marks: npt.NDArray[np.bool_],
        normaliser: int,
    ) -> float:
        rows = torch.as_tensor(mbl.input_rows)
        inputs = torch.stack([torch.as_tensor(data.ids), torch.as_tensor(data.positions)], dim=1)
        moved = exchange_rows(self.comm, mbl.layout_in, inputs.index_select(0, rows).to(self.device), f"layout-in-{mb}")
        if not torch.equal(moved[:, 1].cpu(), torch.as_tensor(mbl.layout.positions)):
            raise RuntimeError("the layout change delivered tokens the plan did not assign to this rank")
        attention = self.nested_attention(plan, mb, marks)
        back = mbl.layout_in.reverse()
        targets = torch.as_tensor(data.targets).index_select(0, rows).to(self.device)
        with self._autocast():
            loss_sum = model(
                moved[:, 0],
                moved[:, 1],
                targets,
                attention=attention,
                relayout=lambda h: _RowExchangeFn.apply(  # type: ignore[no-untyped-call]
                    h, back, self.comm, f"layout-out-{mb}"
                ),
            )
        # FSDP averages gradients over the world; the step needs their sum (the loss is a global mean).
        scale = self.world if self.options.grad_sync == "fsdp" else 1
        (loss_sum * (scale / normaliser)).backward()
        return float(loss_sum.detach().item())

    def _autocast(self) -> Any:
        if self.options.autocast is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=getattr(torch, self.options.autocast))

    def _sync_grads(self) -> None:
        if self.options.grad_sync != "allreduce" or self.world == 1 or self.model is None:
            return
        with self.clock.measure("fsdp_exposed_comm"):
            grads = [_grad_or_zeros(p) for p in self.model.parameters()]
            flat = torch.cat([g.reshape(-1) for g in grads])
            dist.all_reduce(flat, group=self.groups.world_group)
            self.comm.log.append((tuple(range(self.world)), "grad-allreduce"))
            offset = 0
            for g in grads:
                g.copy_(flat[offset : offset + g.numel()].view_as(g))
                offset += g.numel()


def _grad_or_zeros(p: nn.Parameter) -> Tensor:
    """The parameter's gradient, set to zeros if this rank produced none, so every rank all-reduces a
    buffer of the same size."""
    if p.grad is None:
        p.grad = torch.zeros_like(p)
    return p.grad
