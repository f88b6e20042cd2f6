"""The order in which a rank runs the phases of its SP-tree nodes (pure; no torch).

Every node contributes a communication prologue, a compute phase and a communication epilogue per
pass (docs/simulator.md, "inter-level phase streaming"). One *global* phase sequence is derived from the
issue order (forward: the plan's; backward: reversed, as the simulator models it), and each rank
runs the sub-sequence of the nodes that contain it:

    P(u1) .. P(u1+a)  X(u1) E(u1) P(u2+a)  X(u2) E(u2) P(u3+a) ...

with lookahead ``a``. The default (``None``) issues every prologue first, so the communication queue
is P(u1)..P(um) E(u1)..E(um) and compute follows the issue order: the paper's two FIFO queues and
the simulator's streaming model (epilogues queue behind all prologues). ``a = 1`` bounds the
prologue buffers in flight to two nodes; ``a = 0`` is the serial (non-streamed) order. Because every
rank's collective sequence is a sub-sequence of one global sequence, any two ranks issue the
collectives of the groups they share in the same relative order (:func:`order_conflicts` checks this
for any set of per-rank logs). That is what keeps NCCL from deadlocking on overlapping groups; gloo
would silently tolerate a violation, so tests check the order itself. Trade-off: a rank whose next
node is absent from the global lookahead window starts that node's prologue later than a per-rank
schedule could, the price of a rank-independent order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from nspsim.sp_tree import Node

PROLOGUE, COMPUTE, EPILOGUE = "prologue", "compute", "epilogue"


@dataclass(frozen=True, kw_only=True)
class Step:
    """One phase of one node."""

    phase: str
    node: Node

    def __str__(self) -> str:
        return f"{self.phase[0].upper()}({self.node})"


def stream_order(order: Sequence[Node], lookahead: int | None = None) -> tuple[Step, ...]:
    """The global phase sequence for nodes issued in ``order`` (see the module docstring)."""
    if lookahead is None:
        lookahead = len(order)
    if lookahead < 0:
        raise ValueError(f"lookahead must be >= 0, got {lookahead}")
    steps = [Step(phase=PROLOGUE, node=u) for u in order[: lookahead + 1]]
    for i, u in enumerate(order):
        steps += [Step(phase=COMPUTE, node=u), Step(phase=EPILOGUE, node=u)]
        if i + lookahead + 1 < len(order):
            steps.append(Step(phase=PROLOGUE, node=order[i + lookahead + 1]))
    return tuple(steps)


def rank_steps(order: Sequence[Node], rank: int, lookahead: int | None = None) -> tuple[Step, ...]:
    """The phases ``rank`` runs: the global sequence restricted to nodes that contain it."""
    return tuple(s for s in stream_order(order, lookahead) if s.node.contains_rank(rank))


def order_conflicts(logs: Mapping[int, Sequence[tuple[tuple[int, ...], str]]]) -> list[str]:
    """Pairs of ranks that issue collectives of shared groups in different relative orders.

    ``logs[rank]`` is the rank's issued collectives as ``(group ranks, label)``. For every pair of
    ranks, the entries of groups containing both must form the same sequence. Returns one message
    per conflicting pair (empty when the order is consistent).
    """
    out = []
    ranks = sorted(logs)
    for i, a in enumerate(ranks):
        for b in ranks[i + 1 :]:
            seq_a = [e for e in logs[a] if a in e[0] and b in e[0]]
            seq_b = [e for e in logs[b] if a in e[0] and b in e[0]]
            if seq_a != seq_b:
                where = next((n for n, (x, y) in enumerate(zip(seq_a, seq_b)) if x != y), min(len(seq_a), len(seq_b)))
                out.append(
                    f"ranks {a} and {b} diverge at shared collective #{where}: "
                    f"{_entry(seq_a, where)} vs {_entry(seq_b, where)}"
                )
    return out


def _entry(seq: Sequence[tuple[tuple[int, ...], str]], n: int) -> str:
    return f"{seq[n][1]} on {list(seq[n][0])}" if n < len(seq) else "<end>"
