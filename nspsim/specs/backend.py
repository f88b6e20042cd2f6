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


WINDOWED_BACKENDS = frozenset({SPBackend.ULYSSES})
"""The backends that run (and whose costs model) causal attention within a sliding window: Ulysses
gives each rank whole samples for its heads, so a window is only a cheaper kernel. Ring attention
passes K,V blocks around the ring; with a window the blocks wholly outside it could be skipped (fewer
useful steps, less work per step), which neither its cost model nor the runtime's ring does, so it
is refused rather than priced as full attention."""


def window_refusal(backend: str, sliding_window: int | None) -> str | None:
    """The one line refusing a sliding window on ``backend`` (nspsim and the runtime say the same), or
    ``None`` when there is no window or the backend runs it (:data:`WINDOWED_BACKENDS`)."""
    if sliding_window is None or backend in WINDOWED_BACKENDS:
        return None
    return (
        f"the {backend} backend does not support sliding-window attention (sliding_window={sliding_window}): "
        "blocks outside the window are neither skipped nor modelled; use --backend ulysses"
    )
