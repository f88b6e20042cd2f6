"""The contract every local attention kernel meets: packed varlen buffers, their segments, and an
explicit forward (output + log-sum-exp) and backward.

Every SP backend calls one :class:`AttentionKernel` for the attention core it runs locally. Inputs are
packed: ``q`` is ``[Tq, Hq, D]``, ``k`` and ``v`` are ``[Tk, Hkv, D]`` with ``Hq % Hkv == 0`` (GQA), and
:class:`Segments` gives the per-sample boundaries of the query and key buffers (``cu_q``, ``cu_k``).
A segment attends only within itself; ``causal`` segments must have equal query and key lengths.
A ``window`` W (causal segments only) restricts every query to itself and the W-1 keys before it
(transformers' sliding window, ``kv_idx > q_idx - W``); ``None`` is full causal attention.

The forward returns the output and the natural-log log-sum-exp ``lse`` (``[Tq, Hq]``, fp32) of the
scaled scores, and the backward takes ``(dout, q, k, v, out, lse)``. That explicit form is what Ring
attention needs: partial results over key blocks are merged through the LSE, and each block's
gradient is computed with the *merged* output and LSE (``D = rowsum(dO * O)``, ``P = exp(S - lse)``).

Trade-off: :class:`Segments` derives its per-length groups once and caches them, so the runtime
builds one per node and reuses it for every layer, at the cost of keeping its row indices alive.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Protocol

import numpy as np
from torch import Tensor


@dataclass(frozen=True)
class Segments:
    """Boundaries of packed varlen segments: segment s spans rows ``cu_q[s]:cu_q[s+1]`` of the queries
    and ``cu_k[s]:cu_k[s+1]`` of the keys. Empty segments are allowed and skipped. ``window``: the
    causal sliding window every segment attends within (module doc)."""

    cu_q: tuple[int, ...]
    cu_k: tuple[int, ...]
    window: int | None = None

    def __post_init__(self) -> None:
        if len(self.cu_q) != len(self.cu_k) or not self.cu_q or self.cu_q[0] != 0 or self.cu_k[0] != 0:
            raise ValueError("segment boundaries must start at 0 and have one entry per segment plus one")
        if np.any(np.diff(self.cu_q) < 0) or np.any(np.diff(self.cu_k) < 0):
            raise ValueError("segment boundaries must be non-decreasing")
        window = self.window
        if window is not None and (isinstance(window, bool) or not isinstance(window, int) or window <= 0):
            raise ValueError(f"a sliding window must be a positive token count, got {window!r}")

    @staticmethod
    def same(lengths: Sequence[int], window: int | None = None) -> Segments:
        """Self-attention segments: queries and keys are the same packed buffer (within ``window``)."""
        cu = (0, *np.cumsum(np.asarray(lengths, dtype=np.int64)).tolist())
        return Segments(cu, cu, window)

    def windowed(self, window: int | None) -> Segments:
        """These boundaries within ``window`` (itself when it is already that window); the per-length
        groups are shared, not derived again."""
        if window == self.window:
            return self
        out = Segments(self.cu_q, self.cu_k, window)
        out.__dict__["_groups"] = self._groups
        return out

    @staticmethod
    def pairs(q_lengths: Sequence[int], k_lengths: Sequence[int]) -> Segments:
        """Segments with separate query and key lengths (a Ring block pair)."""
        cq = (0, *np.cumsum(np.asarray(q_lengths, dtype=np.int64)).tolist())
        ck = (0, *np.cumsum(np.asarray(k_lengths, dtype=np.int64)).tolist())
        return Segments(cq, ck)

    @property
    def num(self) -> int:
        """Number of segments."""
        return len(self.cu_q) - 1

    @cached_property
    def q_lengths(self) -> np.ndarray:
        """Query length of every segment."""
        return np.diff(np.asarray(self.cu_q, dtype=np.int64))

    @cached_property
    def k_lengths(self) -> np.ndarray:
        """Key length of every segment."""
        return np.diff(np.asarray(self.cu_k, dtype=np.int64))

    @property
    def total_q(self) -> int:
        """Rows of the query buffer."""
        return self.cu_q[-1]

    @property
    def total_k(self) -> int:
        """Rows of the key buffer."""
        return self.cu_k[-1]

    def nonempty(self) -> np.ndarray:
        """Indices of segments with at least one query and one key."""
        return np.flatnonzero((self.q_lengths > 0) & (self.k_lengths > 0))

    def groups(self) -> Iterator[tuple[int, int, np.ndarray, np.ndarray]]:
        """Non-empty segments grouped by (query length, key length): ``(lq, lk, q_rows, k_rows)`` with
        row indices shaped ``[B, lq]`` and ``[B, lk]``, for one batched kernel call per group. Derived
        once per :class:`Segments` (the runtime reuses one per node for every layer)."""
        return iter(self._groups)

    @cached_property
    def _groups(self) -> tuple[tuple[int, int, np.ndarray, np.ndarray], ...]:
        return tuple(self._make_groups())

    def _make_groups(self) -> Iterator[tuple[int, int, np.ndarray, np.ndarray]]:
        ids = self.nonempty()
        if ids.size == 0:
            return
        lq, lk = self.q_lengths[ids], self.k_lengths[ids]
        keys = np.stack([lq, lk], axis=1)
        uniq, inverse = np.unique(keys, axis=0, return_inverse=True)
        starts_q = np.asarray(self.cu_q[:-1], dtype=np.int64)[ids]
        starts_k = np.asarray(self.cu_k[:-1], dtype=np.int64)[ids]
        for g, (gq, gk) in enumerate(uniq.tolist()):
            members = np.flatnonzero(inverse.reshape(-1) == g)
            q_rows = starts_q[members, None] + np.arange(gq, dtype=np.int64)[None, :]
            k_rows = starts_k[members, None] + np.arange(gk, dtype=np.int64)[None, :]
            yield int(gq), int(gk), q_rows, k_rows

    def check(self, q: Tensor, k: Tensor, causal: bool) -> None:
        """Raise ``ValueError`` if the buffers do not match the segments."""
        if q.shape[0] != self.total_q or k.shape[0] != self.total_k:
            raise ValueError(
                f"segments cover {self.total_q} query / {self.total_k} key rows, "
                f"buffers have {q.shape[0]} / {k.shape[0]}"
            )
        if causal and np.any(self.q_lengths != self.k_lengths):
            raise ValueError("causal segments need equal query and key lengths")
        if self.window is not None and not causal:
            raise ValueError("a sliding window applies to causal segments only")


class AttentionKernel(Protocol):
    """Varlen attention with LSE; see the module docstring for shapes."""

    name: str

    def forward(self, q: Tensor, k: Tensor, v: Tensor, seg: Segments, causal: bool) -> tuple[Tensor, Tensor]:
        """``(out [Tq, Hq, D], lse [Tq, Hq] fp32)``; rows of empty segments get out 0 and lse -inf."""
        ...

    def backward(
        self, dout: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor, seg: Segments, causal: bool
    ) -> tuple[Tensor, Tensor, Tensor]:
        """``(dq, dk, dv)`` given the (possibly merged) output and LSE."""
        ...
