"""Ring attention (causal, zigzag-balanced) for one SP-tree node.

Group rank ``i`` of a degree-``k`` node holds chunks ``i`` and ``2k-1-i`` of every sample (all heads).
Forward: ``k`` steps; at step ``s`` the rank attends its queries to the K/V block of rank ``i - s``
(:func:`nspsim.execution.layout.ring_blocks` says which chunk pairs) while the block for step ``s + 1`` is
passed one hop around the ring with ``batch_isend_irecv``; partial outputs are merged through the
log-sum-exp. Backward: the same walk with the merged output and LSE; each K/V block travels with a
dK/dV accumulator that collects every rank's contribution and arrives home after the last step.

Phases: prologue = the first K/V hop, compute = the ring steps (their later hops overlap the block
kernels), epilogue = nothing in forward and the final dK/dV hop home in backward. Recompute-marked
samples keep only their inputs; the backward reruns their forward ring (charged to ``attn_remat``).
Trade-off: K and V (and dK, dV) travel as one buffer per hop, one message instead of two; the dK/dV
accumulators are fp32 so bf16 runs do not lose gradient precision over ``k`` additions.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import torch
from torch import Tensor

from nspsim.execution.shards import NodeShards, RingBlock, ring_blocks
from nspsim.specs.backend import SPBackend, window_refusal
from nspsim_runtime.backends.base import (
    ExecContext,
    NodeTask,
    keep_rows,
    kept_state,
    merge_kept,
    node_index,
    select_rows,
)
from nspsim_runtime.groups import Pending
from nspsim_runtime.kernels import Segments

KV_TAG, DKV_TAG = 1, 2
Shift = tuple[Pending, Tensor]


Block = tuple[RingBlock, Segments]


def _blocks(ctx: ExecContext, shards: NodeShards, group_rank: int, step: int) -> tuple[Block, ...]:
    """The ring blocks of a step with their kernel segments (built once per step and reused)."""

    def make() -> tuple[Block, ...]:
        return tuple(
            (b, Segments.pairs(b.q_lengths.tolist(), b.k_lengths.tolist()))
            for b in ring_blocks(shards, group_rank, step)
        )

    blocks: tuple[Block, ...] = ctx.cached(("ring-blocks", shards.key, group_rank, step), make)
    return blocks


def _index(rows: npt.NDArray[np.int64], device: torch.device) -> Tensor:
    return torch.as_tensor(rows, device=device)


def merge_partial(out: Tensor, lse: Tensor, rows: Tensor, o: Tensor, lse_b: Tensor) -> None:
    """Fold a partial result (``o``, ``lse_b``) of query ``rows`` into the running (``out``, ``lse``)."""
    old_o, old_l = out.index_select(0, rows), lse.index_select(0, rows)
    new_l = torch.logaddexp(old_l, lse_b)
    w_old = torch.exp(old_l - new_l).nan_to_num(0.0).unsqueeze(-1)
    w_new = torch.exp(lse_b - new_l).nan_to_num(0.0).unsqueeze(-1)
    out.index_copy_(0, rows, old_o * w_old + o.float() * w_new)
    lse.index_copy_(0, rows, new_l)


class RingBackend:
    """Ring attention; see the module docstring."""

    name = SPBackend.RING

    def __init__(self, *, num_heads: int, num_kv_heads: int) -> None:
        self.num_heads = num_heads
        self.num_kv_heads = num_kv_heads

    def _shift(
        self, t: NodeTask, ctx: ExecContext, shards: NodeShards, send: Tensor, step: int, label: str, tag: int
    ) -> Shift:
        """Pass ``send`` one hop; receive the buffer of the rank this one holds at ``step``."""
        src = (t.slot.group_rank - step) % shards.degree
        recv = send.new_empty(int(shards.rank_tokens[src]), *send.shape[1:])
        return ctx.comm.ring_shift(shards.node, send.contiguous(), recv, f"{shards.node}:{label}", tag), recv

    def _split(self, kv: Tensor) -> tuple[Tensor, Tensor]:
        return kv[:, : self.num_kv_heads], kv[:, self.num_kv_heads :]

    # ---- the two ring walks ------------------------------------------------------------------------
    def _forward_ring(
        self,
        t: NodeTask,
        ctx: ExecContext,
        shards: NodeShards,
        q: Tensor,
        kv: Tensor,
        first: Shift,
        cats: tuple[str | None, str | None],
    ) -> tuple[Tensor, Tensor]:
        """All ``k`` steps of the forward walk; returns (output, LSE) of the local queries."""
        compute_cat, wait_cat = cats
        out = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
        lse = torch.full(q.shape[:2], -float("inf"), dtype=torch.float32, device=q.device)
        cur, nxt = kv, first
        for step in range(shards.degree):
            if step > 0:
                nxt[0].wait(wait_cat)
                cur = nxt[1]
                if step + 1 < shards.degree:
                    nxt = self._shift(t, ctx, shards, cur, step + 1, "kv", KV_TAG)
            with _timed(ctx, compute_cat):
                for blk, seg in _blocks(ctx, shards, t.slot.group_rank, step):
                    self._block_forward(ctx, blk, seg, q, cur, out, lse)
        return out.to(q.dtype), lse

    def _block_forward(
        self, ctx: ExecContext, blk: RingBlock, seg: Segments, q: Tensor, kv: Tensor, out: Tensor, lse: Tensor
    ) -> None:
        if blk.q_rows.size == 0 or blk.k_rows.size == 0:
            return
        qi, ki = _index(blk.q_rows, q.device), _index(blk.k_rows, q.device)
        k, v = self._split(kv.index_select(0, ki))
        o, lse_b = ctx.kernel.forward(q.index_select(0, qi), k, v, seg, blk.causal)
        merge_partial(out, lse, qi, o, lse_b)

    def _backward_ring(
        self, t: NodeTask, ctx: ExecContext, state: dict[str, Tensor], kv: Tensor, first: Shift
    ) -> tuple[Tensor, Tensor]:
        """All ``k`` steps of the backward walk; returns dQ and the dK/dV accumulator still to send home."""
        shards, q, dout = t.slot.shards, t.q, t.dout
        assert dout is not None
        dq = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
        dkv = torch.zeros(kv.shape, dtype=torch.float32, device=q.device)
        cur, nxt_kv, nxt_dkv = kv, first, None
        for step in range(shards.degree):
            if step > 0:
                assert nxt_dkv is not None
                nxt_kv[0].wait()
                nxt_dkv[0].wait()
                cur, dkv = nxt_kv[1], nxt_dkv[1]
                if step + 1 < shards.degree:
                    nxt_kv = self._shift(t, ctx, shards, cur, step + 1, "bwd-kv", KV_TAG)
            with ctx.clock.measure("attn_bwd"):
                for blk, seg in _blocks(ctx, shards, t.slot.group_rank, step):
                    self._block_backward(ctx, blk, seg, (q, dout, state["out"], state["lse"]), cur, dq, dkv)
            if step + 1 < shards.degree:
                nxt_dkv = self._shift(t, ctx, shards, dkv, step + 1, "bwd-dkv", DKV_TAG)
        return dq.to(q.dtype), dkv

    def _block_backward(
        self,
        ctx: ExecContext,
        blk: RingBlock,
        seg: Segments,
        local: tuple[Tensor, Tensor, Tensor, Tensor],
        kv: Tensor,
        dq: Tensor,
        dkv: Tensor,
    ) -> None:
        if blk.q_rows.size == 0 or blk.k_rows.size == 0:
            return
        qi, ki = _index(blk.q_rows, kv.device), _index(blk.k_rows, kv.device)
        q, dout, out, lse = (x.index_select(0, qi) for x in local)
        k, v = self._split(kv.index_select(0, ki))
        gq, gk, gv = ctx.kernel.backward(dout, q, k, v, out, lse, seg, blk.causal)
        dq.index_add_(0, qi, gq.float())
        dkv.index_add_(0, ki, torch.cat([gk, gv], dim=1).float())

    # ---- forward phases ----------------------------------------------------------------------------
    def fwd_prologue(self, t: NodeTask, ctx: ExecContext) -> None:
        """First K/V hop; a sliding window is refused (:func:`~nspsim.specs.backend.window_refusal`)."""
        refusal = window_refusal(self.name, t.window)
        if refusal is not None:
            raise ValueError(refusal)
        kv = torch.cat([t.k, t.v], dim=1).contiguous()
        t.state["kv"] = kv
        t.state["first"] = self._shift(t, ctx, t.slot.shards, kv, 1, "kv", KV_TAG)

    def fwd_compute(self, t: NodeTask, ctx: ExecContext) -> None:
        """The ring steps; keeps output and LSE of the samples not marked for recomputation."""
        shards = t.slot.shards
        out, lse = self._forward_ring(
            t, ctx, shards, t.q, t.state.pop("kv"), t.state.pop("first"), ("attn_fwd", "sp_exposed_comm")
        )
        t.out = out
        keep_rows(t, node_index(ctx, t).kept_rows, {"out": out, "lse": lse})

    def fwd_epilogue(self, t: NodeTask, ctx: ExecContext) -> None:
        """Nothing: the output is already local."""

    def fwd_finish(self, t: NodeTask, ctx: ExecContext) -> Tensor:
        """The node's output rows."""
        assert t.out is not None
        return t.out

    # ---- backward phases ---------------------------------------------------------------------------
    def bwd_prologue(self, t: NodeTask, ctx: ExecContext) -> None:
        """First K/V hop of the recompute walk (if any samples are marked) or of the backward walk."""
        shards = t.slot.shards
        kv = torch.cat([t.k, t.v], dim=1).contiguous()
        t.state["kv"] = kv
        if t.any_recompute:
            index = node_index(ctx, t)
            sub_kv = select_rows(kv, index.remat_rows)
            t.state["remat"] = self._shift(t, ctx, index.remat_shards, sub_kv, 1, "remat-kv", KV_TAG)
            t.state["remat_kv"] = sub_kv
        else:
            t.state["first"] = self._shift(t, ctx, shards, kv, 1, "bwd-kv", KV_TAG)

    def bwd_compute(self, t: NodeTask, ctx: ExecContext) -> None:
        """Recompute the marked samples' forward walk if needed, then the backward walk."""
        kv = t.state.pop("kv")
        if t.any_recompute:
            state = self._recompute(t, ctx)
            first = self._shift(t, ctx, t.slot.shards, kv, 1, "bwd-kv", KV_TAG)
        else:
            state, first = kept_state(t, ("out", "lse")), t.state.pop("first")
        dq, dkv = self._backward_ring(t, ctx, state, kv, first)
        t.state = {"dq": dq, "dkv": dkv}

    def _recompute(self, t: NodeTask, ctx: ExecContext) -> dict[str, Tensor]:
        index = node_index(ctx, t)
        with ctx.clock.measure("attn_remat"):
            out, lse = self._forward_ring(
                t,
                ctx,
                index.remat_shards,
                select_rows(t.q, index.remat_rows),
                t.state.pop("remat_kv"),
                t.state.pop("remat"),
                (None, None),
            )
        return merge_kept(t, t.slot.rows, index.remat_rows, {"out": out, "lse": lse})

    def bwd_epilogue(self, t: NodeTask, ctx: ExecContext) -> None:
        """The last dK/dV hop brings every rank its own block's gradients."""
        t.state["home"] = self._shift(t, ctx, t.slot.shards, t.state.pop("dkv"), 0, "bwd-dkv-home", DKV_TAG)

    def bwd_finish(self, t: NodeTask, ctx: ExecContext) -> tuple[Tensor, Tensor, Tensor]:
        """dQ, dK, dV of the node's rows."""
        pending, dkv = t.state.pop("home")
        pending.wait()
        dk, dv = self._split(dkv.to(t.k.dtype))
        return t.state.pop("dq"), dk, dv


class _timed:
    """``ctx.clock.measure(category)``, or nothing for ``None`` (the caller times the block)."""

    def __init__(self, ctx: ExecContext, category: str | None) -> None:
        self._cm: Any = ctx.clock.measure(category) if category is not None else None

    def __enter__(self) -> None:
        if self._cm is not None:
            self._cm.__enter__()

    def __exit__(self, *exc: object) -> None:
        if self._cm is not None:
            self._cm.__exit__(*exc)
