"""The sequence-parallel (SP) backends: one :class:`SPBackend` enum that specs, cost models, plans and
the runtime all key on, and each backend's layout facts (:class:`BackendLayout`: how a sample's
chunks sit on a node's ranks, what a saved node keeps), the single truth the memory model, the
execution shards and the runtime's validation cases read.

It is a :class:`~enum.StrEnum`, so a member equals (and hashes like) its plain string value: plans,
configs and records written as JSON keep the same bytes, and values read back from JSON compare equal
to the members. This module imports nothing else from nspsim, so any layer (and ``runtime``) may use
it. How to add a backend: see :mod:`nspsim.cost.backends`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum


class SPBackend(StrEnum):
    """How one SP-tree node of degree > 1 splits the attention core over its GPUs."""

    ULYSSES = "ulysses"
    RING = "ring"


BACKENDS: tuple[str, ...] = tuple(b.value for b in SPBackend)
"""The backend names in declaration order (``in`` tests and error messages; Python 3.11's
``"x" in SPBackend`` raises for non-members)."""


CHUNK_LAYOUTS = ("contiguous", "zigzag")


@dataclass(frozen=True, kw_only=True)
class BackendLayout:
    """Where a backend's data sits on a node of degree k > 1.

    ``chunks``: ``contiguous`` (rank r holds chunk r of k, Ulysses) or ``zigzag`` (the sample is cut
    into 2k chunks and rank r holds chunks r and 2k-1-r, balancing causal attention: Ring).
    ``saves_head_layout_qkv``: a saved node also keeps Q, K and V in head layout (Ulysses' backward
    kernel runs there). ``replicates_kv``: K and V are replicated before the all-to-all once the degree
    exceeds the KV heads (Ulysses), which a saved node keeps too."""

    chunks: str
    saves_head_layout_qkv: bool
    replicates_kv: bool

    def __post_init__(self) -> None:
        if self.chunks not in CHUNK_LAYOUTS:
            raise ValueError(f"backend layout chunks must be one of {', '.join(CHUNK_LAYOUTS)}, got {self.chunks!r}")


LAYOUTS: Mapping[SPBackend, BackendLayout] = {
    SPBackend.ULYSSES: BackendLayout(chunks="contiguous", saves_head_layout_qkv=True, replicates_kv=True),
    SPBackend.RING: BackendLayout(chunks="zigzag", saves_head_layout_qkv=False, replicates_kv=False),
}


def backend_layout(backend: str) -> BackendLayout:
    """The layout facts of ``backend`` (a member or its value); ``ValueError`` naming the known ones."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown SP backend {backend!r} (known: {', '.join(BACKENDS)})")
    return LAYOUTS[SPBackend(backend)]
