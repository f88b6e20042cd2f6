"""The SP tree (NSP paper, Definition 1): the space of admissible sequence-parallel groups.

P GPUs and a largest admissible SP degree spmax = 2^K that divides P define a forest of P / spmax
complete binary trees (the paper's "P > spmax gives a forest"; 96 GPUs are three trees of 32). A node
is an aligned block of consecutive ranks whose size (the SP degree) is a power of two <= spmax. We name
a node by ``(degree, index)``: it covers the ranks ``[index * degree, (index + 1) * degree)``. This
global naming makes the forest case free (the tree a node belongs to is ``index * degree // spmax``)
and keeps plans readable.

Hosts of ``gpus_per_node`` GPUs (any count: 8, 4, 6) must tile the trees: spmax divides a host or a
host divides spmax, so every group lies inside one host or spans whole hosts, and "does a group of
this size cross hosts?" has one answer per size (:meth:`SPTree.spans_hosts`). :func:`largest_spmax`
is the largest such degree.

Trade-off: restricting groups to aligned dyadic blocks loses no makespan on homogeneous workers
(paper, Appendix B: any laminar power-of-two schedule relabels into a tree schedule) and keeps small
groups inside one NVLink domain, at the price of ruling out crossing groups such as {1, 2}, and of
a non-power-of-two cluster's largest group (96 GPUs: 32, not 64 or 96).
Any two nodes are nested or disjoint; a disjoint-group plan (Static SP, FlexSP) is an antichain.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np


def is_power_of_two(n: int) -> bool:
    """True for 1, 2, 4, ...; False for 0, negatives and other integers."""
    return n > 0 and (n & (n - 1)) == 0


def tiles_hosts(degree: int, gpus_per_node: int) -> bool:
    """Whether aligned groups of ``degree`` ranks lie inside one host or span whole hosts."""
    return gpus_per_node % degree == 0 or degree % gpus_per_node == 0


def largest_spmax(num_gpus: int, gpus_per_node: int) -> int:
    """The largest power of two that divides ``num_gpus`` and tiles hosts of ``gpus_per_node``
    (:func:`tiles_hosts`): 96 GPUs in hosts of 8 give 32, 12 in hosts of 6 give 2."""
    degree = num_gpus & -num_gpus  # the largest power of two dividing num_gpus
    while not tiles_hosts(degree, gpus_per_node):
        degree //= 2
    return degree


def log2_exact(n: int) -> int:
    """log2 of a power of two; ``ValueError`` for anything else."""
    if not is_power_of_two(n):
        raise ValueError(f"{n} is not a power of two")
    return n.bit_length() - 1


@dataclass(frozen=True, order=True)
class Node:
    """One SP group: ``degree`` consecutive ranks starting at ``index * degree``."""

    degree: int
    index: int

    @property
    def first_rank(self) -> int:
        """Lowest rank of the group."""
        return self.index * self.degree

    @property
    def end_rank(self) -> int:
        """One past the highest rank of the group."""
        return (self.index + 1) * self.degree

    @property
    def ranks(self) -> range:
        """The ranks R(u) of the group."""
        return range(self.first_rank, self.end_rank)

    def contains_rank(self, rank: int) -> bool:
        """Whether ``rank`` belongs to this group."""
        return self.first_rank <= rank < self.end_rank

    def contains(self, other: Node) -> bool:
        """Whether ``other`` is this node or one of its descendants."""
        return self.first_rank <= other.first_rank and other.end_rank <= self.end_rank

    def overlaps(self, other: Node) -> bool:
        """Whether the two groups share a rank (for tree nodes: one contains the other)."""
        return self.first_rank < other.end_rank and other.first_rank < self.end_rank

    def to_str(self) -> str:
        """Compact text form ``"sp{degree}#{index}"`` used in JSON and messages."""
        return f"sp{self.degree}#{self.index}"

    @staticmethod
    def parse(text: str) -> Node:
        """Inverse of :meth:`to_str`."""
        try:
            deg, idx = text.removeprefix("sp").split("#")
            return Node(int(deg), int(idx))
        except ValueError:
            raise ValueError(f"malformed node name {text!r} (expected e.g. 'sp8#3')") from None

    def __str__(self) -> str:
        return self.to_str()


@dataclass(frozen=True, kw_only=True)
class SPTree:
    """The SP forest over ``num_gpus`` ranks with largest degree ``spmax``.

    ``gpus_per_node`` only matters for topology queries (does a group span several hosts?).
    """

    num_gpus: int
    spmax: int
    gpus_per_node: int = 8

    def __post_init__(self) -> None:
        if self.num_gpus < 1:
            raise ValueError(f"number of GPUs must be positive, got {self.num_gpus}")
        if self.gpus_per_node < 1:
            raise ValueError(f"gpus_per_node must be positive, got {self.gpus_per_node}")
        largest = largest_spmax(self.num_gpus, self.gpus_per_node)
        if not is_power_of_two(self.spmax) or self.spmax > largest:
            raise ValueError(
                f"spmax must be a power of two <= {largest} ({self.num_gpus} GPUs in hosts of {self.gpus_per_node} "
                f"form trees of at most {largest} GPUs), got {self.spmax}"
            )

    @property
    def depth(self) -> int:
        """K, with spmax = 2^K: leaves sit at depth K."""
        return log2_exact(self.spmax)

    @property
    def num_trees(self) -> int:
        """P / spmax: the forest has this many root nodes."""
        return self.num_gpus // self.spmax

    @property
    def degrees(self) -> tuple[int, ...]:
        """Admissible SP degrees from the roots down: (spmax, spmax/2, ..., 1)."""
        return tuple(self.spmax >> d for d in range(self.depth + 1))

    def node_depth(self, node: Node) -> int:
        """Depth d of ``node`` in its tree (root 0, leaves K)."""
        return self.depth - log2_exact(node.degree)

    def tree_of(self, node: Node) -> int:
        """Index of the tree (forest component) that holds ``node``."""
        return node.first_rank // self.spmax

    def has_node(self, node: Node) -> bool:
        """Whether ``node`` is a node of this forest."""
        return (
            is_power_of_two(node.degree)
            and node.degree <= self.spmax
            and 0 <= node.index < self.num_gpus // node.degree
        )

    def check_node(self, node: Node) -> None:
        """Raise ``ValueError`` naming the problem if ``node`` is not in the forest."""
        if not self.has_node(node):
            raise ValueError(
                f"node {node} is not in the SP tree (P={self.num_gpus}, spmax={self.spmax}): "
                f"degree must be a power of two <= {self.spmax} and index < P/degree"
            )

    def nodes(self, degree: int | None = None) -> Iterator[Node]:
        """All nodes, roots first; or only those of one degree."""
        for deg in self.degrees if degree is None else (degree,):
            for index in range(self.num_gpus // deg):
                yield Node(deg, index)

    def num_nodes(self) -> int:
        """Total node count of the forest: P/spmax * (2*spmax - 1)."""
        return self.num_trees * (2 * self.spmax - 1)

    def node_of(self, rank: int, degree: int) -> Node:
        """The node of ``degree`` that contains ``rank``."""
        self._check_rank(rank)
        return Node(degree, rank // degree)

    def chain(self, rank: int) -> tuple[Node, ...]:
        """The leaf-to-root chain of ``rank``: the only nodes this GPU takes part in."""
        self._check_rank(rank)
        return tuple(Node(deg, rank // deg) for deg in reversed(self.degrees))

    def parent(self, node: Node) -> Node | None:
        """The parent node, or ``None`` for a root."""
        self.check_node(node)
        if node.degree == self.spmax:
            return None
        return Node(node.degree * 2, node.index // 2)

    def children(self, node: Node) -> tuple[Node, ...]:
        """The two children, or ``()`` for a leaf."""
        self.check_node(node)
        if node.degree == 1:
            return ()
        half = node.degree // 2
        return (Node(half, 2 * node.index), Node(half, 2 * node.index + 1))

    def ancestors(self, node: Node) -> tuple[Node, ...]:
        """Proper ancestors from the parent up to the root."""
        out: list[Node] = []
        parent = self.parent(node)
        while parent is not None:
            out.append(parent)
            parent = self.parent(parent)
        return tuple(out)

    def descendants(self, node: Node) -> tuple[Node, ...]:
        """Proper descendants, level by level (children first)."""
        self.check_node(node)
        out: list[Node] = []
        deg = node.degree // 2
        while deg >= 1:
            ratio = node.degree // deg
            out.extend(Node(deg, node.index * ratio + k) for k in range(ratio))
            deg //= 2
        return tuple(out)

    def spans_hosts(self, node: Node) -> int:
        """How many hosts (NVLink domains) the group spans."""
        return max(1, node.degree // self.gpus_per_node)

    def is_antichain(self, nodes: Iterable[Node]) -> bool:
        """True when no chosen node contains another: a disjoint-group plan.

        Sorting by first rank makes any overlap show up between neighbours, so this is O(n log n).
        """
        ordered = sorted(set(nodes), key=lambda n: (n.first_rank, -n.degree))
        return all(a.end_rank <= b.first_rank for a, b in zip(ordered, ordered[1:]))

    def node_arrays(self, nodes: Iterable[Node]) -> tuple[np.ndarray, np.ndarray]:
        """(degrees, first ranks) of ``nodes`` as int64 arrays, for vectorised per-GPU sums."""
        pairs = np.array([(n.degree, n.first_rank) for n in nodes], dtype=np.int64).reshape(-1, 2)
        return pairs[:, 0], pairs[:, 1]

    def per_gpu_sum(self, values: np.ndarray, degrees: np.ndarray, first_ranks: np.ndarray) -> np.ndarray:
        """Sum per GPU of ``values[j]`` added to every rank of the group of item j.

        Vectorised by degree level: a ``bincount`` per level over block indices, then a ``repeat``
        expands block sums onto the ranks of each block.
        """
        out = np.zeros(self.num_gpus, dtype=np.float64)
        for deg in np.unique(degrees):
            mask = degrees == deg
            blocks = np.bincount(first_ranks[mask] // deg, weights=values[mask], minlength=self.num_gpus // int(deg))
            out += np.repeat(blocks, int(deg))
        return out

    def _check_rank(self, rank: int) -> None:
        if not 0 <= rank < self.num_gpus:
            raise ValueError(f"rank {rank} out of range [0, {self.num_gpus})")
