"""The trace interface and the sampling helpers every trace kind shares.

``LengthTrace`` is the abstract distribution of sequence lengths: i.i.d. ``sample``, low-noise
``materialize``, ``share_at_most`` and ``max_length``.

``materialize`` draws a low-noise sample. Draws go to bins or components by largest-remainder
rounding (``allocate_largest_remainder``), so their shares are exact to 1/n. Within a bin or component
the uniforms are stratified (``(i + U_i) / m``), and the result is shuffled. Trade-off: these draws are
not i.i.d. (``sample`` is), but statistics of a million of them carry almost no sampling noise, even in
the tail. ``sample`` draws in blocks of 65,536 so temporaries stay in cache.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

DEFAULT_MATERIALIZE = 1_000_000
_CHUNK = 1 << 16  # draws per vectorised block (keeps temporaries in cache)


def allocate_largest_remainder(weights: npt.ArrayLike, n: int) -> IntArray:
    """Split ``n`` draws over groups in proportion to ``weights`` (Hamilton's largest-remainder method).

    Each group gets ``floor(n * w_i / sum(w))``. The draws left over go one each to the groups with
    the largest fractional remainders, with ties broken by group order. The shares are therefore
    exact to 1/n, and the result always sums to ``n``.
    """
    w = np.asarray(weights, dtype=np.float64)
    if w.ndim != 1 or w.size == 0 or not np.all(np.isfinite(w)) or np.any(w < 0) or w.sum() <= 0:
        raise ValueError("weights must be a non-empty 1-D array of finite non-negative numbers, not all zero")
    _check_count(n, "n")
    exact = w / w.sum() * n
    alloc: IntArray = np.floor(exact).astype(np.int64)
    leftover = n - int(alloc.sum())
    order = np.argsort(-(exact - alloc), kind="stable")
    alloc[order[:leftover]] += 1
    return alloc


def _check_count(n: int, what: str) -> None:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
        raise ValueError(f"{what} must be a non-negative integer, got {n!r}")


def _stratified(alloc: IntArray, rng: np.random.Generator) -> tuple[npt.NDArray[np.intp], FloatArray]:
    """Group index and a stratified uniform ``(i + U_i) / m_g`` for every draw of ``alloc``."""
    groups = np.repeat(np.arange(alloc.size), alloc)
    starts = np.cumsum(alloc) - alloc
    position = np.arange(groups.size) - starts[groups]
    return groups, (position + rng.random(groups.size)) / alloc[groups]


def _chunked(n: int, draw: Callable[[int], IntArray]) -> IntArray:
    """Call ``draw`` on blocks of at most ``_CHUNK`` and concatenate (bounded temporaries)."""
    out = np.empty(n, dtype=np.int64)
    for start in range(0, n, _CHUNK):
        stop = min(n, start + _CHUNK)
        out[start:stop] = draw(stop - start)
    return out


@dataclass(frozen=True, kw_only=True)
class LengthTrace(ABC):
    """A distribution of sequence lengths (positive integers, in tokens).

    ``name`` is a short identifier. ``source`` says where the lengths come from: a file path, or the
    provenance of a built-in trace.
    """

    name: str
    source: str

    def __post_init__(self) -> None:
        if not self.name or not self.name.strip():
            raise ValueError("a trace needs a non-empty name")

    @abstractmethod
    def sample(self, n: int, rng: np.random.Generator) -> IntArray:
        """``n`` i.i.d. lengths (int64) drawn with ``rng``."""

    @abstractmethod
    def materialize(self, n: int | None = None, seed: int = 0) -> IntArray:
        """A low-noise, shuffled sample of ``n`` lengths (see the module docstring)."""

    @abstractmethod
    def share_at_most(self, length: int) -> float:
        """Probability that a drawn length is at most ``length``."""

    @property
    @abstractmethod
    def max_length(self) -> int:
        """The largest length this trace can produce."""


def _positive_ints(values: npt.ArrayLike, what: str) -> IntArray:
    """``values`` as an int64 array; raises unless it is a non-empty 1-D array of positive whole numbers."""
    src = np.asarray(values)
    if src.ndim != 1 or src.size == 0 or src.dtype.kind not in "iuf":
        raise ValueError(f"{what} must be a non-empty 1-D numeric array, got shape {src.shape} dtype {src.dtype}")
    bad = np.flatnonzero(~((src >= 1) & (src < 2.0**63)) | (src != np.floor(src)))
    if bad.size:
        raise ValueError(f"{what}[{bad[0]}] = {src[bad[0]]} is not a positive integer")
    return np.asarray(src, dtype=np.int64)


def _seeded(seed: int) -> np.random.Generator:
    _check_count(seed, "seed")
    return np.random.default_rng(seed)
