"""Ulysses (DeepSpeed-Ulysses) sequence parallelism for one SP-tree node.

Group rank ``i`` of a degree-``k`` node holds a contiguous shard of every sample of the node (shard
sizes differ by at most one token, so any length works) with all heads. Forward:

* prologue: one all-to-all of Q, K, V from sequence-sharded to head-sharded layout: rank ``i`` sends
  heads ``[r*H/k, (r+1)*H/k)`` of its rows to rank ``r`` (split sizes = the ranks' shard sizes) and
  receives whole sequences for its ``H/k`` heads. When ``k`` exceeds the KV heads, each KV head is
  first replicated ``k / H_kv`` times so that every rank receives exactly the KV head its query
  heads use (GQA);
* compute: local varlen causal attention over whole samples (per-sample boundaries);
* epilogue: one all-to-all of the output back to sequence layout.

Backward mirrors it: dO to head layout, the local backward kernel, dQ/dK/dV back (gradients of
replicated KV heads are summed). Recompute-marked samples keep nothing after forward; the backward
prologue re-sends their Q, K, V and the compute phase reruns their forward kernel. Trade-off: Q, K
and V travel in one all-to-all (one latency, one buffer copy) at the price of a concatenation.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import torch
from torch import Tensor

from nspsim.execution.shards import NodeShards, ulysses_gather_order
from nspsim.specs.backend import SPBackend
from nspsim.specs.model import ulysses_admits
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

_STATE = ("q", "k", "v", "out", "lse")


def _perms(ctx: ExecContext, shards: NodeShards) -> tuple[Tensor, Tensor]:
    """(received -> sequence order, sequence -> received order) permutations of a node's samples."""

    def make() -> tuple[Tensor, Tensor]:
        perm = ulysses_gather_order(shards)
        inverse = np.empty_like(perm)
        inverse[perm] = np.arange(perm.size)
        return torch.as_tensor(perm), torch.as_tensor(inverse)

    key = ("ulysses-perm", shards.key)
    perms: tuple[Tensor, Tensor] = ctx.cached(key, make)
    return perms


class UlyssesBackend:
    """All-to-all sequence parallelism; see the module docstring."""

    name = SPBackend.ULYSSES

    def __init__(self, *, num_heads: int, num_kv_heads: int) -> None:
        self.num_heads = num_heads
        self.num_kv_heads = num_kv_heads

    def _check(self, degree: int) -> None:
        if not ulysses_admits(self.num_heads, self.num_kv_heads, degree):
            raise ValueError(f"Ulysses degree {degree} must divide the {self.num_heads} attention heads")

    def _replicas(self, degree: int) -> int:
        return max(1, degree // self.num_kv_heads)

    # ---- layout changes ----------------------------------------------------------------------------
    def _to_heads(
        self, t: NodeTask, ctx: ExecContext, shards: NodeShards, xs: list[Tensor], label: str
    ) -> tuple[Pending, Tensor]:
        """Issue the sequence->head all-to-all of ``xs`` (each ``[rows, H_x, D]``)."""
        k = shards.degree
        rows, dim = xs[0].shape[0], xs[0].shape[-1]
        send = torch.cat([x.reshape(rows, k, x.shape[1] // k, dim) for x in xs], dim=2)
        width = send.shape[2]
        send = send.permute(1, 0, 2, 3).reshape(k * rows, width, dim).contiguous()
        recv = send.new_empty(int(shards.rank_tokens.sum()), send.shape[1], dim)
        pending = ctx.comm.all_to_all(
            shards.node, recv, send, shards.rank_tokens.tolist(), [rows] * k, f"{shards.node}:{label}"
        )
        return pending, recv

    def _from_heads(self, ctx: ExecContext, shards: NodeShards, recv: Tensor, widths: list[int]) -> list[Tensor]:
        """Received head-layout rows in sequence order, split into tensors of ``widths`` heads."""
        perm, _ = _perms(ctx, shards)
        seq = recv.index_select(0, perm.to(recv.device))
        return list(torch.split(seq, widths, dim=1))

    def _to_seq(self, t: NodeTask, ctx: ExecContext, x: Tensor, label: str) -> tuple[Pending, Tensor]:
        """Issue the head->sequence all-to-all of the head-layout ``x`` (sequence order)."""
        shards, k, rows = t.slot.shards, t.slot.shards.degree, t.slot.rows
        _, inverse = _perms(ctx, shards)
        send = x.index_select(0, inverse.to(x.device)).contiguous()
        recv = x.new_empty(k * rows, x.shape[1], x.shape[2])
        pending = ctx.comm.all_to_all(
            shards.node, recv, send, [rows] * k, shards.rank_tokens.tolist(), f"{shards.node}:{label}"
        )
        return pending, recv

    @staticmethod
    def _seq_heads(recv: Tensor, degree: int) -> Tensor:
        """``[k*rows, h, D]`` blocks from each source -> ``[rows, k*h, D]`` (source r = heads r*h..)."""
        rows, heads, dim = recv.shape[0] // degree, recv.shape[1], recv.shape[2]
        return recv.view(degree, rows, heads, dim).permute(1, 0, 2, 3).reshape(rows, degree * heads, dim)

    def _kv(self, t: NodeTask, rows: npt.NDArray[np.int64] | None = None) -> list[Tensor]:
        q, k, v = (t.q, t.k, t.v) if rows is None else (select_rows(x, rows) for x in (t.q, t.k, t.v))
        rep = self._replicas(t.slot.shards.degree)
        if rep > 1:
            k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        return [q, k, v]

    def _widths(self, degree: int) -> list[int]:
        kv = max(self.num_kv_heads, degree) // degree
        return [self.num_heads // degree, kv, kv]

    # ---- forward -----------------------------------------------------------------------------------
    def fwd_prologue(self, t: NodeTask, ctx: ExecContext) -> None:
        """All-to-all Q, K, V to head layout."""
        self._check(t.slot.shards.degree)
        pending, recv = self._to_heads(t, ctx, t.slot.shards, self._kv(t), "fwd-qkv")
        t.pending.append(pending)
        t.state["recv"] = recv

    def fwd_compute(self, t: NodeTask, ctx: ExecContext) -> None:
        """Local varlen causal attention over the node's whole samples."""
        t.wait_all()
        shards, index = t.slot.shards, node_index(ctx, t)
        q, k, v = self._from_heads(ctx, shards, t.state.pop("recv"), self._widths(shards.degree))
        with ctx.clock.measure("attn_fwd"):
            out, lse = ctx.kernel.forward(q, k, v, index.segments.windowed(t.window), causal=True)
        t.state["out_heads"] = out
        keep_rows(t, index.kept_sample_rows, {"q": q, "k": k, "v": v, "out": out, "lse": lse})

    def fwd_epilogue(self, t: NodeTask, ctx: ExecContext) -> None:
        """All-to-all the output back to sequence layout."""
        pending, recv = self._to_seq(t, ctx, t.state.pop("out_heads"), "fwd-out")
        t.pending.append(pending)
        t.state["recv"] = recv

    def fwd_finish(self, t: NodeTask, ctx: ExecContext) -> Tensor:
        """The node's output rows in sequence layout."""
        t.wait_all()
        return self._seq_heads(t.state.pop("recv"), t.slot.shards.degree)

    # ---- backward ----------------------------------------------------------------------------------
    def bwd_prologue(self, t: NodeTask, ctx: ExecContext) -> None:
        """Re-send recompute-marked samples' Q, K, V; all-to-all dO to head layout."""
        shards = t.slot.shards
        if t.any_recompute:
            index = node_index(ctx, t)
            t.state["remat"] = self._to_heads(t, ctx, index.remat_shards, self._kv(t, index.remat_rows), "remat-qkv")
        assert t.dout is not None
        t.state["dout"] = self._to_heads(t, ctx, shards, [t.dout], "bwd-dout")

    def bwd_compute(self, t: NodeTask, ctx: ExecContext) -> None:
        """Rerun marked samples' forward, then the backward kernel over all samples."""
        shards = t.slot.shards
        state = self._recompute(t, ctx) if t.any_recompute else kept_state(t, _STATE)
        pending, recv = t.state.pop("dout")
        pending.wait()
        (dout,) = self._from_heads(ctx, shards, recv, [self.num_heads // shards.degree])
        with ctx.clock.measure("attn_bwd"):
            dq, dk, dv = ctx.kernel.backward(
                dout,
                state["q"],
                state["k"],
                state["v"],
                state["out"],
                state["lse"],
                node_index(ctx, t).segments.windowed(t.window),
                causal=True,
            )
        t.state["dqkv_heads"] = torch.cat([dq, dk, dv], dim=1)
        t.state = {k: v for k, v in t.state.items() if k == "dqkv_heads"}

    def _recompute(self, t: NodeTask, ctx: ExecContext) -> dict[str, Tensor]:
        shards, index = t.slot.shards, node_index(ctx, t)
        pending, recv = t.state.pop("remat")
        with ctx.clock.measure("attn_remat"):
            pending.wait(None)
            q, k, v = self._from_heads(ctx, index.remat_shards, recv, self._widths(shards.degree))
            out, lse = ctx.kernel.forward(q, k, v, index.remat_segments.windowed(t.window), causal=True)
        return merge_kept(
            t, int(shards.lengths.sum()), index.remat_sample_rows, {"q": q, "k": k, "v": v, "out": out, "lse": lse}
        )

    def bwd_epilogue(self, t: NodeTask, ctx: ExecContext) -> None:
        """All-to-all dQ, dK, dV back to sequence layout."""
        pending, recv = self._to_seq(t, ctx, t.state.pop("dqkv_heads"), "bwd-dqkv")
        t.pending.append(pending)
        t.state["recv"] = recv

    def bwd_finish(self, t: NodeTask, ctx: ExecContext) -> tuple[Tensor, Tensor, Tensor]:
        """dQ, dK, dV of the node's rows (replicated KV-head gradients summed)."""
        t.wait_all()
        k = t.slot.shards.degree
        rows = t.slot.rows
        dim = t.q.shape[-1]
        hq, hkv, _ = self._widths(k)
        full = self._seq_heads(t.state.pop("recv"), k).view(rows, k, hq + 2 * hkv, dim)
        dq = full[:, :, :hq].reshape(rows, self.num_heads, dim)
        dk, dv = (full[:, :, s : s + hkv].reshape(rows, k * hkv, dim) for s in (hq, hq + hkv))
        rep = self._replicas(k)
        if rep > 1:
            dk, dv = (x.view(rows, self.num_kv_heads, rep, dim).sum(dim=2) for x in (dk, dv))
        return dq, dk, dv
