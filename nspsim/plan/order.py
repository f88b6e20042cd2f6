"""The default issue order of a plan's nodes: roots first (largest degree), then by rank, so the
longest samples start earliest. One integer key per node and one ``np.unique`` per micro-batch."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from nspsim.sp_tree import Node


def roots_first(degrees: np.ndarray, firsts: np.ndarray, num_gpus: int) -> tuple[Node, ...]:
    """Distinct nodes, largest degree first, then by rank (one integer key per node, one np.unique)."""
    keys = np.unique((num_gpus - degrees) * (num_gpus + 1) + firsts)
    deg = num_gpus - keys // (num_gpus + 1)
    first = keys % (num_gpus + 1)
    return tuple(Node(int(d), int(f // d)) for d, f in zip(deg.tolist(), first.tolist()))


def default_issue_order(nodes: Sequence[Node], micro_batches: Sequence[int]) -> tuple[tuple[Node, ...], ...]:
    """Roots first (largest degree), then by rank: long samples start earliest."""
    degrees = np.fromiter((n.degree for n in nodes), dtype=np.int64, count=len(nodes))
    firsts = degrees * np.fromiter((n.index for n in nodes), dtype=np.int64, count=len(nodes))
    mbs = np.asarray(micro_batches, dtype=np.int64)
    span = int((firsts + degrees).max(initial=1))
    return tuple(roots_first(degrees[mbs == mb], firsts[mbs == mb], span) for mb in np.unique(mbs).tolist())
