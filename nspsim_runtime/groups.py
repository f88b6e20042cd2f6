"""Communicators per SP-tree node and the one place that issues collectives.

:class:`GroupCache` creates one process group per node on demand and caches it. ``new_group`` is a
collective over the whole world, so every rank asks for the same nodes in the same (sorted) order:
the nodes come from the plan, which all ranks hold identically (checked by content hash before any
SP collective). A root spanning the whole world reuses the world group; leaves need no group. Each
rank joins at most one group per tree level (the nodes of its chain), as in the paper.

:class:`Comm` issues every collective of the executor asynchronously, logs its (group, label) in
issue order (tests compare the logs of all ranks, :func:`nspsim.execution.schedule.order_conflicts`) and
times it. On CUDA the collectives are issued from a dedicated communication stream that first waits
for the compute stream, and waiting makes the compute stream wait for the communication stream, so
one node's collectives overlap another node's kernels; on CPU/gloo the async work runs on gloo's
threads while the main thread computes.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

from nspsim.sp_tree import Node
from nspsim_runtime.timing import PhaseClock


def node_key(node: Node) -> tuple[int, int]:
    """Canonical creation order: roots first, then by index."""
    return (-node.degree, node.index)


class GroupCache:
    """Process groups per SP-tree node, created on demand in a consistent global order."""

    def __init__(self, *, world: int, backend: str, timeout: timedelta, world_group: Any = None) -> None:
        self.world = world
        self.backend = backend
        self.timeout = timeout
        self.world_group = world_group if world_group is not None else dist.group.WORLD
        self._groups: dict[Node, Any] = {}
        self.created: list[Node] = []

    def ensure(self, nodes: Iterable[Node]) -> None:
        """Create the missing groups of ``nodes`` (every rank must call this with the same nodes)."""
        for node in sorted({n for n in nodes if n.degree > 1}, key=node_key):
            if node in self._groups:
                continue
            if node.degree == self.world:
                self._groups[node] = self.world_group
            else:
                self._groups[node] = dist.new_group(list(node.ranks), backend=self.backend, timeout=self.timeout)
                self.created.append(node)

    def group(self, node: Node) -> Any:
        """The process group of ``node`` (must have been ensured)."""
        try:
            return self._groups[node]
        except KeyError:
            raise RuntimeError(f"no process group for {node}; call ensure() with the plan's nodes first") from None


class Pending:
    """Handles of one issued collective; ``wait`` blocks and charges the blocked time."""

    def __init__(self, comm: Comm, works: Sequence[Any], label: str, issued: float) -> None:
        self._comm, self._works, self.label, self._issued = comm, list(works), label, issued
        self.done = not self._works

    def wait(self, category: str | None = "sp_exposed_comm") -> None:
        """Block until complete; the wait goes to ``category`` (``None``: the caller is timing it) and
        the issue-to-completion span to ``sp_comm``."""
        if self.done:
            return
        start = time.perf_counter()
        for work in self._works:
            work.wait()
        self._comm.after_wait()
        end = self._comm.clock.now()
        if category is not None:
            self._comm.clock.add(category, end - start)
        self._comm.clock.add("sp_comm", end - self._issued)
        self.done = True


class Comm:
    """Issues, logs and times the executor's collectives (see the module docstring)."""

    def __init__(self, *, rank: int, world: int, groups: GroupCache, clock: PhaseClock, device: torch.device) -> None:
        self.rank, self.world, self.groups, self.clock, self.device = rank, world, groups, clock, device
        self.log: list[tuple[tuple[int, ...], str]] = []
        self._stream = torch.cuda.Stream(device) if device.type == "cuda" else None  # type: ignore[no-untyped-call]

    # ---- stream handling (CUDA only) ---------------------------------------------------------
    def _enter(self, tensors: Sequence[Tensor]) -> Any:
        if self._stream is None:
            return _NullContext()
        self._stream.wait_stream(torch.cuda.current_stream(self.device))
        for t in tensors:
            t.record_stream(self._stream)
        return torch.cuda.stream(self._stream)

    def after_wait(self) -> None:
        """Make the compute stream wait for the communication stream (CUDA)."""
        if self._stream is not None:
            torch.cuda.current_stream(self.device).wait_stream(self._stream)

    # ---- collectives ---------------------------------------------------------------------------
    def _record(self, ranks: tuple[int, ...], label: str) -> float:
        self.log.append((ranks, label))
        return time.perf_counter()

    def all_to_all(
        self,
        node: Node | None,
        out: Tensor,
        inp: Tensor,
        out_splits: Sequence[int],
        in_splits: Sequence[int],
        label: str,
    ) -> Pending:
        """Async ``all_to_all_single`` over ``node``'s group (the world for ``None``), split on dim 0."""
        group = self.groups.world_group if node is None else self.groups.group(node)
        ranks = tuple(range(self.world)) if node is None else tuple(node.ranks)
        issued = self._record(ranks, label)
        with self._enter([out, inp]):
            work = dist.all_to_all_single(
                out, inp, [int(s) for s in out_splits], [int(s) for s in in_splits], group=group, async_op=True
            )
        return Pending(self, [work], label, issued)

    def ring_shift(self, node: Node, send: Tensor, recv: Tensor, label: str, tag: int) -> Pending:
        """Async send of ``send`` to the next rank of ``node``'s ring and receive of ``recv`` from the
        previous one (``batch_isend_irecv``)."""
        group = self.groups.group(node)
        i = self.rank - node.first_rank
        nxt = node.first_rank + (i + 1) % node.degree
        prv = node.first_rank + (i - 1) % node.degree
        issued = self._record(tuple(node.ranks), label)
        ops = [dist.P2POp(dist.isend, send, nxt, group, tag), dist.P2POp(dist.irecv, recv, prv, group, tag)]
        with self._enter([send, recv]):
            works = dist.batch_isend_irecv(ops)
        return Pending(self, works, label, issued)


class _NullContext:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None
