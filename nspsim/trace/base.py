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

import hashlib
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import PurePath

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

DEFAULT_MATERIALIZE = 1_000_000
_CHUNK = 1 << 16  # draws per vectorised block (keeps temporaries in cache)
MAX_LENGTH = 2**36
"""The longest sequence a trace may hold, in tokens (68,719,476,736): 64 times the 1G-token batch limit,
so a longer sample could only ever be dropped. The cap keeps every sum of lengths within int64: a
batch sums at most 2**24 draws (its draw limit) and a materialised sample at most 10M lengths, and
2**24 * 2**36 = 2**60 < 2**63. A file's lengths are summed in full once when it is read
(:func:`exact_total`), so a file too large for even that is refused at input."""
MAX_TOTAL = 2**63 - 1
"""The largest sum of lengths (int64), the total every count and share is computed from."""


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


def exact_total(lengths: IntArray, what: str) -> int:
    """The exact sum of ``lengths`` (each in [1, MAX_LENGTH]), summed in int64 blocks small enough
    never to wrap; a one-line ``ValueError`` naming ``what`` when it exceeds :data:`MAX_TOTAL`."""
    block = MAX_TOTAL // MAX_LENGTH  # 2**27 - 1 lengths cannot wrap
    total = sum(int(lengths[i : i + block].sum()) for i in range(0, lengths.size, block))
    if total > MAX_TOTAL:
        raise ValueError(
            f"{what}: lengths too large: they sum to {total:,} tokens, more than the limit {MAX_TOTAL:,} (int64)"
        )
    return total


@dataclass(frozen=True, kw_only=True)
class TraceFile:
    """The file a trace was read from: its ``path`` as given and ``content_hash``, the first 16 hex digits
    of the SHA-256 of its bytes. Two files with the same name but different bytes (``a/x.txt`` and
    ``b/x.txt``), or a histogram file edited but left with its built-in ``name``, differ in ``label``."""

    path: str
    content_hash: str

    def __post_init__(self) -> None:
        if not self.path:
            raise ValueError("a trace file needs a path")
        if len(self.content_hash) != 16 or any(c not in "0123456789abcdef" for c in self.content_hash):
            raise ValueError(f"a trace file's content hash is 16 lowercase hex digits, got {self.content_hash!r}")

    @staticmethod
    def of(path: str, data: bytes) -> TraceFile:
        """The record of the file at ``path`` whose bytes are ``data``."""
        return TraceFile(path=path, content_hash=hashlib.sha256(data).hexdigest()[:16])

    @property
    def label(self) -> str:
        """``x.txt@0123456789abcdef``: the file's base name and its content hash."""
        return f"{PurePath(self.path).name}@{self.content_hash}"


@dataclass(frozen=True, kw_only=True)
class LengthTrace(ABC):
    """A distribution of sequence lengths (positive integers, in tokens).

    ``name`` is a short identifier. ``source`` says where the lengths come from: a file path, or the
    provenance of a built-in trace. ``file`` records the file it was read from (path and content
    hash), ``None`` for a built-in or in-memory trace; it is not compared (equal lengths are equal
    traces). ``identity`` is what batches and plans record.
    """

    name: str
    source: str
    file: TraceFile | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if not self.name or not self.name.strip():
            raise ValueError("a trace needs a non-empty name")

    @property
    def identity(self) -> str:
        """The name a batch and a plan record: the trace's ``name`` for a built-in trace, ``x.txt@<hash>``
        (:attr:`TraceFile.label`) for one read from a file, so different files never share it."""
        return self.file.label if self.file is not None else self.name

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
    arr = np.asarray(src, dtype=np.int64)
    if int(arr.max()) > MAX_LENGTH:
        bad_at = int(np.argmax(arr))
        raise ValueError(
            f"{what}[{bad_at}] = {int(arr[bad_at]):,}: lengths too large (a sample may have at most "
            f"{MAX_LENGTH:,} = 2**36 tokens)"
        )
    exact_total(arr, what)
    return arr


MAX_SEED = 2**63 - 1
"""The largest seed accepted (int64). numpy takes any integer, but torch's ``manual_seed`` overflows
past 2**64 - 1 and seeds travel through configs and records that other tools read as int64."""


def check_seed(seed: int, what: str = "seed") -> None:
    """``ValueError`` unless ``seed`` is an integer in [0, :data:`MAX_SEED`]."""
    _check_count(seed, what)
    if seed > MAX_SEED:
        raise ValueError(f"{what} must be at most 2**63 - 1 = {MAX_SEED:,}, got {seed}")


def _seeded(seed: int) -> np.random.Generator:
    check_seed(seed)
    return np.random.default_rng(seed)
