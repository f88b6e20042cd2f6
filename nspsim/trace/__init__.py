"""Sequence-length traces: the built-in traces, trace files, and sampling lengths from them (SPEC 9).

A trace is a distribution of sequence lengths in tokens. There are three kinds:

* ``EmpiricalTrace``: the lengths read from a file. ``sample`` draws uniformly with replacement.
* ``HistogramTrace``: integer-aligned bins, each with a count and a fitted within-bin density
  ``x**alpha``. ``alpha`` is chosen so that the bin's mean log-length matches the data. The built-in
  ``wikipedia`` trace has about 150 log-spaced bins and reproduces the real trace's percentiles to
  within 0.1 %. To sample, a Walker alias table picks the bin in O(1). The bin's quantile function is
  tabulated at 16 equal-probability points, and linear interpolation between them gives the length.
  The hot loop uses only ``+``, ``*`` and table look-ups, so 10M draws take about 0.3 s and give the
  same bits on every platform. The trade-off: within one sixteenth of a bin the density is flat.
* ``ParametricTrace``: a mixture of continuous distributions (Burr XII or lognormal), each truncated
  to ``[0, truncate_at]``. A draw is rounded to the nearest integer and clipped at 1. Sampling uses the
  exact inverse CDF.

``materialize`` draws a low-noise sample. Draws go to bins or components by largest-remainder
rounding, so their shares are exact to 1/n. Within a bin or component the uniforms are stratified
(``(i + U_i) / m``), and the result is shuffled. Trade-off: these draws are not i.i.d. (``sample`` is),
but statistics of a million of them carry almost no sampling noise, even in the tail.

``load_trace`` resolves a built-in name or reads a file: text with one integer per line, ``.npy``,
``.csv`` with a ``length`` column, ``.jsonl`` with a ``length`` field, or a histogram ``.json``.
Text and CSV go through numpy's C parser (1M lines in about 0.1 s). A slow pass over the lines runs
only when that parse fails, to name the line at fault.
"""

from __future__ import annotations

import csv
import importlib.resources
import json
import math
import re
import warnings
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Protocol, TextIO

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

DEFAULT_MATERIALIZE = 1_000_000
DEFAULT_MAX_LENGTH = 2**21  # upper truncation of the synthetic presets (2,097,152 tokens)
ALPHA_LIMIT = 40.0  # |alpha| bound of a within-bin power law (a bin spans at most 2x in the built-ins)
HISTOGRAM_FORMAT = "nspsim-length-histogram/1"
_SUBBINS = 16  # tabulated quantile points per histogram bin
_CHUNK = 1 << 16  # draws per vectorised block (keeps temporaries in cache)
_MIN_FIT_COUNT = 10  # histogram bins with fewer samples use the pooled tail exponent
_INT_RE = re.compile(r"\+?\d+")


# ----------------------------------------------------------------------------- helpers


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


# ----------------------------------------------------------------------------- base class


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


# ----------------------------------------------------------------------------- empirical


@dataclass(frozen=True, kw_only=True, eq=False)
class EmpiricalTrace(LengthTrace):
    """A fixed array of lengths (usually read from a file). A read-only int64 copy is kept.
    Equality compares identity, not the lengths."""

    lengths: IntArray

    def __post_init__(self) -> None:
        super().__post_init__()
        arr = _positive_ints(self.lengths, f"trace {self.name!r}: lengths").copy()
        arr.flags.writeable = False
        object.__setattr__(self, "lengths", arr)

    def sample(self, n: int, rng: np.random.Generator) -> IntArray:
        """Uniform draws with replacement from the lengths."""
        _check_count(n, "n")
        return self.lengths[rng.integers(0, self.lengths.size, size=n)]

    def materialize(self, n: int | None = None, seed: int = 0) -> IntArray:
        """The lengths in file order when ``n`` is None. Otherwise ``n // N`` copies of every length,
        plus a random subset of ``n % N`` lengths drawn without replacement, shuffled."""
        if n is None:
            return self.lengths.copy()
        _check_count(n, "n")
        rng = _seeded(seed)
        reps, rest = divmod(n, self.lengths.size)
        extra = self.lengths[rng.choice(self.lengths.size, size=rest, replace=False)]
        return rng.permutation(np.concatenate([np.tile(self.lengths, reps), extra]))

    def share_at_most(self, length: int) -> float:
        """Fraction of the lengths that are ``<= length``."""
        return float(np.count_nonzero(self.lengths <= length)) / self.lengths.size

    @property
    def max_length(self) -> int:
        """The longest length in the array."""
        return int(self.lengths.max())


# ----------------------------------------------------------------------------- histogram


def powerlaw_cdf(lo: npt.ArrayLike, hi: npt.ArrayLike, alpha: npt.ArrayLike, x: npt.ArrayLike) -> FloatArray:
    """CDF at ``x`` of the density ``x**alpha`` on ``[lo, hi)``, clipped to [0, 1]. The arguments broadcast."""
    lo_, hi_, b = np.asarray(lo, float), np.asarray(hi, float), np.asarray(alpha, float) + 1.0
    xs = np.clip(np.asarray(x, float), lo_, hi_)
    flat = np.abs(b) < 1e-9
    bb = np.where(flat, 1.0, b)
    with np.errstate(over="ignore", invalid="ignore"):
        curved = np.expm1(bb * np.log(xs / lo_)) / np.expm1(bb * np.log(hi_ / lo_))
    return np.asarray(np.where(flat, np.log(xs / lo_) / np.log(hi_ / lo_), curved), dtype=np.float64)


def powerlaw_quantile(lo: npt.ArrayLike, hi: npt.ArrayLike, alpha: npt.ArrayLike, u: npt.ArrayLike) -> FloatArray:
    """Inverse of ``powerlaw_cdf``: the point below which a share ``u`` of the bin's mass lies."""
    lo_, hi_, b = np.asarray(lo, float), np.asarray(hi, float), np.asarray(alpha, float) + 1.0
    uu, logr = np.asarray(u, float), np.log(hi_ / lo_)
    flat = np.abs(b) < 1e-9
    bb = np.where(flat, 1.0, b)
    curved = lo_ * np.exp(np.log1p(uu * np.expm1(bb * logr)) / bb)
    return np.asarray(np.where(flat, lo_ * np.exp(uu * logr), curved), dtype=np.float64)


def _int_tuple(values: Sequence[Any], what: str) -> tuple[int, ...]:
    """``values`` as Python ints; raises on anything that is not a whole number (bools included)."""
    out = []
    for i, v in enumerate(values):
        if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) or not float(v).is_integer():
            raise ValueError(f"{what}[{i}] = {v!r} is not an integer")
        out.append(int(v))
    return tuple(out)


def _alias_table(counts: Sequence[int]) -> tuple[FloatArray, npt.NDArray[np.intp]]:
    """Walker/Vose alias table from integer counts, computed exactly in integers (no float drift)."""
    nb, total = len(counts), sum(counts)
    scaled = [c * nb for c in counts]  # column j keeps itself with probability scaled[j] / total
    prob, alias = np.ones(nb), np.arange(nb, dtype=np.intp)
    small = [j for j in range(nb) if scaled[j] < total]
    large = [j for j in range(nb) if scaled[j] >= total]
    while small and large:
        s, g = small.pop(), large.pop()
        prob[s], alias[s] = scaled[s] / total, g
        scaled[g] -= total - scaled[s]
        (small if scaled[g] < total else large).append(g)
    return prob, alias


@dataclass(frozen=True, kw_only=True)
class HistogramTrace(LengthTrace):
    """Binned lengths: bin i holds the integers ``edges[i] <= L < edges[i + 1]`` and ``counts[i]``
    samples. Within a bin the length has density ``x**alpha[i]`` (continuous, floored to an integer).
    An empty ``alpha`` means a uniform density (alpha 0) in every bin."""

    edges: tuple[int, ...]
    counts: tuple[int, ...]
    alpha: tuple[float, ...] = ()
    _prob: FloatArray = field(init=False, repr=False, compare=False)
    _alias: npt.NDArray[np.intp] = field(init=False, repr=False, compare=False)
    _qlo: FloatArray = field(init=False, repr=False, compare=False)
    _qstep: FloatArray = field(init=False, repr=False, compare=False)
    _top: IntArray = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "edges", _int_tuple(self.edges, f"histogram {self.name!r}: edges"))
        object.__setattr__(self, "counts", _int_tuple(self.counts, f"histogram {self.name!r}: counts"))
        object.__setattr__(self, "alpha", tuple(float(a) for a in self.alpha) or (0.0,) * len(self.counts))
        self._validate()
        prob, alias = _alias_table(self.counts)
        object.__setattr__(self, "_prob", prob)
        object.__setattr__(self, "_alias", alias)
        self._build_quantile_table()

    def _validate(self) -> None:
        e, c, a, who = self.edges, self.counts, self.alpha, f"histogram {self.name!r}"
        if len(e) < 2 or e[0] < 1:
            raise ValueError(f"{who}: needs at least 2 edges, the first >= 1 (got {list(e[:3])}...)")
        bad = next((i for i in range(1, len(e)) if e[i] <= e[i - 1]), None)
        if bad is not None:
            raise ValueError(f"{who}: edges must increase strictly "
                             f"(edges[{bad}]={e[bad]} <= edges[{bad - 1}]={e[bad - 1]})")
        if len(c) != len(e) - 1 or len(a) != len(c):
            raise ValueError(f"{who}: {len(e)} edges need {len(e) - 1} counts and alphas, got {len(c)} and {len(a)}")
        if min(c) < 0 or sum(c) == 0:
            raise ValueError(f"{who}: counts must be >= 0 and not all zero")
        wild = next((i for i, x in enumerate(a) if not abs(x) <= ALPHA_LIMIT), None)
        if wild is not None:
            raise ValueError(f"{who}: alpha[{wild}]={a[wild]} is outside [-{ALPHA_LIMIT:g}, {ALPHA_LIMIT:g}]")

    def _build_quantile_table(self) -> None:
        lo, hi = np.asarray(self.edges[:-1], float), np.asarray(self.edges[1:], float)
        grid = np.linspace(0.0, 1.0, _SUBBINS + 1)
        q = powerlaw_quantile(lo[:, None], hi[:, None], np.asarray(self.alpha)[:, None], grid[None, :])
        q[:, 0], q[:, -1] = lo, hi
        object.__setattr__(self, "_qlo", np.ascontiguousarray(q[:, :-1]).ravel())
        object.__setattr__(self, "_qstep", np.diff(q, axis=1).ravel())
        object.__setattr__(self, "_top", np.asarray(self.edges[1:], dtype=np.int64) - 1)

    def _within(self, bins: npt.NDArray[np.intp], u: FloatArray) -> IntArray:
        """Lengths at within-bin quantile ``u`` in bins ``bins`` (piecewise-linear quantile table)."""
        v = u * _SUBBINS
        sub = np.minimum(v.astype(np.intp), _SUBBINS - 1)  # a stratified u can round up to 1.0
        k = bins * _SUBBINS + sub
        x = self._qlo[k] + (v - sub) * self._qstep[k]
        out: IntArray = np.minimum(x.astype(np.int64), self._top[bins])
        return out

    def _draw(self, n: int, rng: np.random.Generator) -> IntArray:
        u = rng.random(n) * len(self.counts)
        col = u.astype(np.intp)
        bins = np.where(u - col < self._prob[col], col, self._alias[col])
        return self._within(bins, rng.random(n))

    def sample(self, n: int, rng: np.random.Generator) -> IntArray:
        """i.i.d. draws: alias-table bin choice, then the bin's quantile at a fresh uniform."""
        _check_count(n, "n")
        return _chunked(n, lambda m: self._draw(m, rng))

    def materialize(self, n: int | None = None, seed: int = 0) -> IntArray:
        """Stratified sample (default 1,000,000). Bin shares are exact to 1/n; see the module docstring."""
        n = DEFAULT_MATERIALIZE if n is None else n
        _check_count(n, "n")
        rng = _seeded(seed)
        bins, u = _stratified(allocate_largest_remainder(self.counts, n), rng)
        return rng.permutation(self._within(bins, u))

    def share_at_most(self, length: int) -> float:
        """Exact under the sampler: whole bins below, plus the tabulated CDF of the bin cut by ``length``."""
        x = float(length) + 1.0  # L <= length  <=>  continuous X < length + 1
        edges, counts = np.asarray(self.edges, float), np.asarray(self.counts, float)
        below = float(counts[edges[1:] <= x].sum())
        j = int(np.searchsorted(edges, x, side="right")) - 1
        if 0 <= j < counts.size and edges[j] < x:
            points = np.append(self._qlo[j * _SUBBINS : (j + 1) * _SUBBINS], edges[j + 1])
            below += counts[j] * float(np.interp(x, points, np.linspace(0.0, 1.0, _SUBBINS + 1)))
        return below / float(counts.sum())

    @property
    def max_length(self) -> int:
        """Top integer of the last occupied bin."""
        last = max(i for i, c in enumerate(self.counts) if c > 0)
        return self.edges[last + 1] - 1

    def to_json_dict(self) -> dict[str, Any]:
        """The histogram in the ``nspsim-length-histogram/1`` JSON layout (see ``from_json``)."""
        return {
            "format": HISTOGRAM_FORMAT,
            "name": self.name,
            "source": self.source,
            "edges": list(self.edges),
            "counts": list(self.counts),
            "alpha": list(self.alpha),
        }

    @classmethod
    def from_json(cls, path: str | Path) -> HistogramTrace:
        """Read a histogram JSON file (keys ``name``, ``source``, ``edges``, ``counts``, ``alpha``)."""
        try:
            data = json.loads(Path(path).read_text(encoding=_encoding(Path(path))))
        except UnicodeDecodeError as exc:
            raise ValueError(f"{path}: not readable as {exc.encoding} text ({exc.reason} at byte {exc.start})") from None
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path} line {exc.lineno}: invalid JSON ({exc.msg})") from None
        except RecursionError:
            raise ValueError(f"{path}: not a length histogram (JSON nested too deeply)") from None
        return cls.from_json_dict(data, where=str(path))

    @classmethod
    def from_json_dict(cls, data: Any, *, where: str = "histogram") -> HistogramTrace:
        """Build from a parsed JSON object. ``where`` (usually the file name) prefixes error messages."""
        if not isinstance(data, dict) or data.get("format") != HISTOGRAM_FORMAT:
            raise ValueError(f"{where}: not a length histogram (needs \"format\": \"{HISTOGRAM_FORMAT}\")")
        missing = [k for k in ("name", "source", "edges", "counts") if k not in data]
        if missing:
            raise ValueError(f"{where}: missing key(s) {', '.join(missing)}")
        try:
            return cls(name=str(data["name"]), source=str(data["source"]), edges=tuple(data["edges"]),
                       counts=tuple(data["counts"]), alpha=tuple(data.get("alpha", ())))
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{where}: {exc}") from None

    @classmethod
    def from_lengths(
        cls, lengths: npt.ArrayLike, *, name: str, source: str, bins_per_octave: int = 8
    ) -> HistogramTrace:
        """Fit a histogram to observed lengths (see ``fit_histogram``)."""
        edges, counts, alpha = fit_histogram(np.asarray(lengths), bins_per_octave=bins_per_octave)
        return cls(name=name, source=source, edges=edges, counts=counts, alpha=alpha)


def log_bin_edges(max_length: int, bins_per_octave: int = 8) -> tuple[int, ...]:
    """Integer bin edges ``round(2**(k / bins_per_octave))``, deduplicated, from 1 to the first power
    of two above ``max_length``. Every power of two is an edge (8192 and 131072 among them). Below
    about ``bins_per_octave * 1.44`` the spacing falls under 1, so the bins there are single integers."""
    if bins_per_octave < 1 or max_length < 1:
        raise ValueError(f"need bins_per_octave >= 1 and max_length >= 1, got {bins_per_octave}, {max_length}")
    octaves = max(1, int(max_length).bit_length())
    k = np.arange(octaves * bins_per_octave + 1)
    return tuple(int(e) for e in np.unique(np.rint(np.exp2(k / bins_per_octave)).astype(np.int64)))


def fit_histogram(
    lengths: npt.ArrayLike, *, bins_per_octave: int = 8
) -> tuple[tuple[int, ...], tuple[int, ...], tuple[float, ...]]:
    """Bin ``lengths`` on ``log_bin_edges`` and fit a within-bin power law to each bin.

    Trailing empty bins are dropped, and the last edge becomes ``max(lengths) + 1``, so a draw never
    exceeds the observed maximum. For a bin with at least 10 samples, ``alpha`` is solved so that
    ``E[log floor(X)]`` equals the bin's mean log-length, where ``X`` has density ``x**alpha`` on
    ``[lo, hi)``. Bins with fewer samples, which are the sparse far tail, share one exponent:
    ``alpha = -(1 + g)``, with ``g`` the Pareto maximum-likelihood index of every sample at or above
    the first sparse bin. Single-integer bins get alpha 0, which has no effect on them.
    """
    arr = _positive_ints(lengths, "fit_histogram: lengths")
    edges = np.asarray(log_bin_edges(int(arr.max()), bins_per_octave), dtype=np.int64)
    idx = np.searchsorted(edges, arr, side="right") - 1
    nb = int(idx.max()) + 1
    edges = edges[: nb + 1].copy()
    edges[-1] = int(arr.max()) + 1
    counts = np.bincount(idx, minlength=nb)
    mean_log = np.bincount(idx, weights=np.log(arr), minlength=nb) / np.maximum(counts, 1)
    alpha = _fit_alphas(edges, counts, mean_log, arr)
    return tuple(int(e) for e in edges), tuple(int(c) for c in counts), tuple(alpha)


def _fit_alphas(edges: IntArray, counts: IntArray, mean_log: FloatArray, arr: IntArray) -> list[float]:
    wide = edges[1:] - edges[:-1] > 1
    sparse = wide & (counts < _MIN_FIT_COUNT)
    tail_alpha = _pooled_tail_alpha(arr, int(edges[np.argmax(sparse)])) if sparse.any() else -1.0
    alpha = []
    for i in range(counts.size):
        if not wide[i]:
            alpha.append(0.0)
        elif sparse[i]:
            alpha.append(tail_alpha)
        else:
            alpha.append(_solve_bin_alpha(int(edges[i]), int(edges[i + 1]), float(mean_log[i])))
    return [round(a, 4) for a in alpha]


def _pooled_tail_alpha(arr: IntArray, xmin: int) -> float:
    tail = arr[arr >= xmin].astype(np.float64)
    spread = float(np.log(tail / xmin).sum())
    gamma = tail.size / spread if spread > 0 else ALPHA_LIMIT
    return float(np.clip(-(1.0 + gamma), -ALPHA_LIMIT, ALPHA_LIMIT))


def _bin_mean_log(lo: int, hi: int, alpha: float) -> float:
    """``E[log floor(X)]`` for ``X`` with density ``x**alpha`` on ``[lo, hi)`` (exact sum over integers)."""
    j = np.arange(lo, hi + 1, dtype=np.float64)
    p = np.diff(powerlaw_cdf(lo, hi, alpha, j))
    return float(np.dot(p, np.log(j[:-1])))


def _solve_bin_alpha(lo: int, hi: int, target: float) -> float:
    from scipy.optimize import brentq

    if _bin_mean_log(lo, hi, -ALPHA_LIMIT) >= target:
        return -ALPHA_LIMIT
    if _bin_mean_log(lo, hi, ALPHA_LIMIT) <= target:
        return ALPHA_LIMIT
    return float(brentq(lambda a: _bin_mean_log(lo, hi, a) - target, -ALPHA_LIMIT, ALPHA_LIMIT, xtol=1e-7))


# ----------------------------------------------------------------------------- parametric


class LengthDistribution(Protocol):
    """A continuous distribution on (0, inf), with a vectorised CDF and quantile function."""

    def cdf(self, x: FloatArray) -> FloatArray:
        """P(X <= x), elementwise."""
        ...

    def ppf(self, u: FloatArray) -> FloatArray:
        """The quantile at probability ``u`` in [0, 1), elementwise."""
        ...


@dataclass(frozen=True, kw_only=True)
class Burr12:
    """Burr type XII (Singh-Maddala): ``S(x) = (1 + (x / scale)**c)**(-k)``.

    The body is lognormal-like: log-logistic when k = 1. The tail is a power law ``S ~ x**(-c*k)``.
    Three parameters fit a median, a body share and a tail share exactly.
    """

    scale: float
    c: float
    k: float

    def __post_init__(self) -> None:
        for key in ("scale", "c", "k"):
            value = getattr(self, key)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"Burr12.{key} must be a positive finite number, got {value!r}")

    def cdf(self, x: FloatArray) -> FloatArray:
        """``1 - (1 + (x/scale)**c)**(-k)``, computed as ``-expm1(-k log1p(z**c))`` for accuracy near 0."""
        z = np.maximum(np.asarray(x, float), 0.0) / self.scale
        return np.asarray(-np.expm1(-self.k * np.log1p(z**self.c)), dtype=np.float64)

    def ppf(self, u: FloatArray) -> FloatArray:
        """``scale * ((1 - u)**(-1/k) - 1)**(1/c)`` (0 at u = 0)."""
        with np.errstate(divide="ignore"):
            core = np.expm1(-np.log1p(-np.asarray(u, float)) / self.k)
            return np.asarray(self.scale * np.exp(np.log(core) / self.c), dtype=np.float64)


@dataclass(frozen=True, kw_only=True)
class LogNormal:
    """Lognormal with the given median (``exp(mu)``) and log-space standard deviation ``sigma``."""

    median: float
    sigma: float

    def __post_init__(self) -> None:
        if not (math.isfinite(self.median) and self.median > 0 and math.isfinite(self.sigma) and self.sigma > 0):
            raise ValueError(f"LogNormal needs median > 0 and sigma > 0, got {self.median!r}, {self.sigma!r}")

    def cdf(self, x: FloatArray) -> FloatArray:
        """``Phi(log(x / median) / sigma)``."""
        from scipy.special import ndtr

        with np.errstate(divide="ignore"):
            z = np.log(np.maximum(np.asarray(x, float), 0.0) / self.median) / self.sigma
        return np.asarray(ndtr(z), dtype=np.float64)

    def ppf(self, u: FloatArray) -> FloatArray:
        """``median * exp(sigma * Phi^-1(u))``."""
        from scipy.special import ndtri

        return np.asarray(self.median * np.exp(self.sigma * ndtri(np.asarray(u, float))), dtype=np.float64)


@dataclass(frozen=True, kw_only=True)
class ParametricTrace(LengthTrace):
    """A mixture ``sum_i w_i * D_i``. Each ``D_i`` is truncated to ``[0, truncate_at]``; a draw is then
    rounded to the nearest integer and clipped at 1. ``components`` holds ``(weight, distribution)``
    pairs; the weights are normalised."""

    components: tuple[tuple[float, LengthDistribution], ...]
    truncate_at: int = DEFAULT_MAX_LENGTH

    def __post_init__(self) -> None:
        super().__post_init__()
        who = f"parametric trace {self.name!r}"
        if isinstance(self.truncate_at, bool) or not isinstance(self.truncate_at, int) or self.truncate_at < 1:
            raise ValueError(f"{who}: truncate_at must be an integer >= 1, got {self.truncate_at!r}")
        if not self.components:
            raise ValueError(f"{who}: needs at least one (weight, distribution) component")
        for i, (w, dist) in enumerate(self.components):
            if not (math.isfinite(w) and w > 0):
                raise ValueError(f"{who}: component {i} weight must be > 0, got {w!r}")
            if not float(dist.cdf(np.array([float(self.truncate_at)]))[0]) > 0:
                raise ValueError(f"{who}: component {i} has no mass below truncate_at={self.truncate_at}")

    @property
    def max_length(self) -> int:
        """The truncation point ``truncate_at``."""
        return self.truncate_at

    @property
    def weights(self) -> FloatArray:
        """Normalised component weights."""
        w = np.asarray([c[0] for c in self.components], dtype=np.float64)
        return np.asarray(w / w.sum(), dtype=np.float64)

    def _lengths(self, dist: LengthDistribution, u: FloatArray) -> IntArray:
        """Truncated inverse CDF at ``u``, rounded and clipped to ``[1, max_length]``."""
        top = float(dist.cdf(np.array([float(self.truncate_at)]))[0])
        x = np.rint(dist.ppf(u * top))
        return np.clip(x, 1, self.truncate_at).astype(np.int64)

    def _draw(self, n: int, rng: np.random.Generator) -> IntArray:
        if len(self.components) == 1:
            return self._lengths(self.components[0][1], rng.random(n))
        which = np.searchsorted(np.cumsum(self.weights)[:-1], rng.random(n), side="right")
        u, out = rng.random(n), np.empty(n, dtype=np.int64)
        for i, (_, dist) in enumerate(self.components):
            mask = which == i
            out[mask] = self._lengths(dist, u[mask])
        return out

    def sample(self, n: int, rng: np.random.Generator) -> IntArray:
        """i.i.d. draws: a component by weight, then its truncated inverse CDF at a fresh uniform."""
        _check_count(n, "n")
        return _chunked(n, lambda m: self._draw(m, rng))

    def materialize(self, n: int | None = None, seed: int = 0) -> IntArray:
        """Stratified sample (default 1,000,000): component shares exact to 1/n, stratified uniforms."""
        n = DEFAULT_MATERIALIZE if n is None else n
        _check_count(n, "n")
        rng = _seeded(seed)
        groups, u = _stratified(allocate_largest_remainder(self.weights, n), rng)
        out = np.empty(n, dtype=np.int64)
        for i, (_, dist) in enumerate(self.components):
            mask = groups == i
            out[mask] = self._lengths(dist, u[mask])
        return rng.permutation(out)

    def share_at_most(self, length: int) -> float:
        """Weighted truncated CDFs at ``length + 0.5`` (lengths are rounded to the nearest integer)."""
        if length >= self.truncate_at:
            return 1.0
        if length < 1:
            return 0.0
        x = np.array([length + 0.5, float(self.truncate_at)])  # rint(X) <= L  <=>  X < L + 0.5
        shares = [float(d.cdf(x)[0] / d.cdf(x)[1]) for _, d in self.components]
        return float(np.dot(self.weights, shares))


def fit_burr12(*, median: float, share_lt_8k: float, share_gt_128k: float,
               max_length: int = DEFAULT_MAX_LENGTH) -> Burr12:
    """Solve the Burr XII whose truncated, rounded lengths have the given median, the given share
    below 8192 tokens and the given share above 131072 tokens. Three equations in three unknowns,
    solved in log-odds space by ``scipy.optimize.least_squares``. Used offline: the presets ship the
    fitted constants (tests/test_trace.py re-fits them)."""
    from scipy.optimize import least_squares

    if not (0 < share_gt_128k < 1 - share_lt_8k < 0.5 and 1 <= median < 8192):
        raise ValueError(f"need 1 <= median < 8192, share_lt_8k > 0.5 and 0 < share_gt_128k < 1 - share_lt_8k; "
                         f"got {median}, {share_lt_8k}, {share_gt_128k}")
    xs = np.array([median, 8191.5, 131072.5])
    target = np.array([0.5, share_lt_8k, 1.0 - share_gt_128k])

    def residual(theta: FloatArray) -> FloatArray:
        dist = Burr12(scale=math.exp(theta[0]), c=math.exp(theta[1]), k=math.exp(theta[2]))
        f = dist.cdf(xs) / dist.cdf(np.array([float(max_length)]))[0]
        return np.asarray(np.log(f / (1 - f)) - np.log(target / (1 - target)), dtype=np.float64)

    c0 = math.log(share_lt_8k / (1 - share_lt_8k)) / math.log(8192 / median)
    fit = least_squares(residual, np.log([median, c0, 1.0]), xtol=1e-14, ftol=1e-14, gtol=1e-14)
    if not fit.success or float(np.max(np.abs(fit.fun))) > 1e-8:
        raise ValueError("no Burr XII matches these three figures; relax one of them")
    return Burr12(scale=math.exp(fit.x[0]), c=math.exp(fit.x[1]), k=math.exp(fit.x[2]))


# ----------------------------------------------------------------------------- built-in traces

_NSP_PAPER = "NSP paper (arXiv 2609.22755) section 3.1"
WIKIPEDIA_SOURCE = (
    "FlexSP artifact (ASPLOS'25): github.com/PKU-DAIR/Hetu-Galvatron, branch flexsp @ b4666892601f, "
    "galvatron/datasets/wikipedia.txt, Apache-2.0; binned as traces/data/wikipedia_hist.json"
)

# Fitted constants: fit_burr12(median=..., share_lt_8k=..., share_gt_128k=..., max_length=2**21).
# traces/README.md gives the figures and the reasons for them. test_trace.py re-fits the constants.
LONGTAIL_PAPER_TARGETS = {"median": 518, "share_lt_8k": 0.940, "share_gt_128k": 0.0012}
LONGTAIL_PAPER_FIT = Burr12(scale=2787.5480684606, c=0.67856566251675, k=2.5021684772748)
CODE_TARGETS = {"median": 1024, "share_lt_8k": 0.880, "share_gt_128k": 0.0030}
CODE_FIT = Burr12(scale=5761.5757379252, c=0.68240492006038, k=2.5841601102707)
COMMONCRAWL_TARGETS = {"median": 512, "share_lt_8k": 0.956, "share_gt_128k": 0.00055}
COMMONCRAWL_FIT = Burr12(scale=2299.1618140118, c=0.7446628417499, k=2.4513859378821)


def wikipedia_trace() -> HistogramTrace:
    """The real FlexSP Wikipedia trace, as a 149-bin histogram (traces/data/wikipedia_hist.json).

    It has 8 log-spaced bins per octave and a fitted power law inside each bin. Built by
    traces/build_wikipedia_hist.py from the artifact's 1,000,000 lengths (median 347, p99 10,919,
    98.4 % < 8K, 49 > 128K, max 1,823,777). ``materialize()`` matches the file's percentiles to <0.1 %.
    """
    resource = importlib.resources.files("traces").joinpath("data/wikipedia_hist.json")
    return HistogramTrace.from_json_dict(json.loads(resource.read_text(encoding="utf-8")),
                                         where="traces/data/wikipedia_hist.json")


def longtail_paper_trace() -> ParametricTrace:
    """Synthetic stand-in for the NSP paper's three pooled traces: 94.0 % < 8K and 0.12 % > 128K
    (published, arXiv 2609.22755 section 3.1), with median 518. The median is a design choice: it is
    the median of the equal-weight pool of the built-in wikipedia, commoncrawl and code traces.
    Burr XII, truncated at 2**21 tokens."""
    return ParametricTrace(
        name="longtail-paper",
        source=f"synthetic Burr XII fitted to {_NSP_PAPER}: 94.0% < 8K, 0.12% > 128K; median 518 (design choice)",
        components=((1.0, LONGTAIL_PAPER_FIT),),
    )


def code_trace() -> ParametricTrace:
    """Illustrative GitHub-like trace, heavier-tailed than the pool: 88.0 % < 8K, 0.30 % > 128K,
    median 1024. These figures are design choices, not published ones. They are picked so that the
    equal-weight pool of wikipedia, commoncrawl and code reproduces the paper's 94.0 % and 0.12 %."""
    return ParametricTrace(
        name="code",
        source="synthetic Burr XII, illustrative GitHub-like figures (design choice): "
        "88.0% < 8K, 0.30% > 128K, median 1024",
        components=((1.0, CODE_FIT),),
    )


def commoncrawl_trace() -> ParametricTrace:
    """Illustrative CommonCrawl-like trace: 95.6 % < 8K, 0.055 % > 128K, median 512. The shares are
    whatever remains of the paper's pooled figures once wikipedia and code are taken out, assuming
    equal-weight pooling. The median is a design choice."""
    return ParametricTrace(
        name="commoncrawl",
        source="synthetic Burr XII, CommonCrawl-like (paper's pooled figures minus wikipedia and code; "
        "design choice): 95.6% < 8K, 0.055% > 128K, median 512",
        components=((1.0, COMMONCRAWL_FIT),),
    )


BUILTIN_TRACES: Mapping[str, Callable[[], LengthTrace]] = MappingProxyType({
    "wikipedia": wikipedia_trace,
    "longtail-paper": longtail_paper_trace,
    "code": code_trace,
    "commoncrawl": commoncrawl_trace,
})


def builtin_trace_names() -> tuple[str, ...]:
    """Names accepted by ``load_trace`` besides file paths, sorted."""
    return tuple(sorted(BUILTIN_TRACES))


# ----------------------------------------------------------------------------- loading files


def load_trace(spec: str) -> LengthTrace:
    """A built-in trace by name, or a trace file by path. A built-in name wins over a file of the
    same name; write ``./NAME`` to mean the file.

    Files: ``.npy`` (1-D integer array), ``.csv`` (header with a ``length`` column), ``.jsonl`` (an
    object with an integer ``length`` field on every line), ``.json`` (a histogram in the
    ``nspsim-length-histogram/1`` layout), and anything else as text (one positive integer per line;
    blank lines and ``#`` comments are skipped). Text formats are UTF-8, or UTF-16/32 when the file
    starts with a byte-order mark (a UTF-8 mark is dropped). Any problem raises a one-line ``ValueError``.
    """
    if spec in BUILTIN_TRACES:
        return BUILTIN_TRACES[spec]()
    path = Path(spec)
    if not path.exists():
        raise ValueError(f"trace file not found: {spec} (built-in traces: {', '.join(builtin_trace_names())})")
    if path.is_dir():
        raise ValueError(f"{spec} is a directory, not a trace file")
    suffix = path.suffix.lower()
    if suffix == ".json":
        return HistogramTrace.from_json(path)
    readers = {".npy": _read_npy, ".csv": _read_csv, ".jsonl": _read_jsonl}
    lengths = readers.get(suffix, _read_text)(path)
    if lengths.size == 0:
        raise ValueError(f"{path}: empty trace (no lengths found)")
    return EmpiricalTrace(name=path.name, source=str(path), lengths=lengths)


def _positive_int(token: str) -> int | None:
    """The value of a decimal token if it is a positive integer that fits int64, else None."""
    token = token.strip()
    if not _INT_RE.fullmatch(token):
        return None
    value = int(token)
    return value if 0 < value < 2**63 else None


_SHOWN_TOKEN = 40
_SHOWN_NAMES = 8


def _names(names: Sequence[str]) -> str:
    """Column or field names for an error message: the first few, each cut to a readable length."""
    shown = ", ".join(repr(n if len(n) <= _SHOWN_TOKEN else n[:_SHOWN_TOKEN] + "...") for n in names[:_SHOWN_NAMES])
    return shown + (f", ... ({len(names)} in all)" if len(names) > _SHOWN_NAMES else "")


def _bad_value(where: str, token: str) -> ValueError:
    """The error for a token that is not a length; a long token (a binary file read as text) is cut."""
    shown = repr(token) if len(token) <= _SHOWN_TOKEN else f"{token[:_SHOWN_TOKEN]!r}... ({len(token):,} characters)"
    hint = (" (NUL characters: UTF-16 or UTF-32 text without a byte-order mark? Save it as UTF-8)"
            if "\x00" in token else "")
    return ValueError(f"{where}: {shown} is not a positive integer{hint}")


_BOMS = ((b"\xff\xfe\x00\x00", "utf-32"), (b"\x00\x00\xfe\xff", "utf-32"), (b"\xef\xbb\xbf", "utf-8-sig"),
         (b"\xff\xfe", "utf-16"), (b"\xfe\xff", "utf-16"))


def _encoding(path: Path) -> str:
    """UTF-8, unless the file starts with a byte-order mark (UTF-8, UTF-16 or UTF-32, as editors and
    spreadsheet exports on Windows write them); the codec then drops the mark."""
    with path.open("rb") as handle:
        head = handle.read(4)
    return next((codec for bom, codec in _BOMS if head.startswith(bom)), "utf-8")


def _open_text(path: Path, newline: str | None = None) -> TextIO:
    """``path`` opened as text in its :func:`_encoding`; undecodable bytes become U+FFFD (and then
    fail the line they are on with a readable error)."""
    return path.open(encoding=_encoding(path), errors="replace", newline=newline)


@contextmanager
def _loadtxt_source(path: Path, newline: str | None = None) -> Iterator[Path | TextIO]:
    """What ``np.loadtxt`` should read: the path itself for plain UTF-8 (its fastest path), else the
    file opened in its encoding."""
    if _encoding(path) == "utf-8":
        yield path
        return
    with _open_text(path, newline) as handle:
        yield handle


def _read_text(path: Path) -> IntArray:
    """Fast path: ``np.loadtxt`` (C parser). On any failure, ``_scan_text`` names the bad line; if
    every line is fine (undecodable bytes inside ``#`` comments), read the decoded text instead."""
    with _loadtxt_source(path) as source:
        arr = _loadtxt_lengths(source)
    if arr is None:
        _scan_text(path)
        with _open_text(path) as decoded:
            arr = _loadtxt_lengths(decoded)
    if arr is None:
        raise ValueError(f"{path}: could not read lengths (expected one positive integer per line)")
    return arr


def _loadtxt_lengths(source: Path | TextIO) -> IntArray | None:
    """``np.loadtxt`` of one positive integer per line, or None if ``source`` is not that."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # loadtxt warns on empty input; emptiness is checked by the caller
            arr = np.loadtxt(source, dtype=np.int64, comments="#", ndmin=1)
    except (ValueError, OverflowError):
        return None
    if arr.ndim != 1 or (arr.size and int(arr.min()) < 1):
        return None
    return np.asarray(arr, dtype=np.int64)


def _scan_text(path: Path) -> None:
    """Slow path: raise for the first line that is not a single positive integer."""
    with _open_text(path) as lines:
        for number, line in enumerate(lines, start=1):
            body = line.split("#", 1)[0].strip()
            if body and _positive_int(body) is None:
                raise _bad_value(f"{path} line {number}", body)


def _read_npy(path: Path) -> IntArray:
    try:
        arr = np.load(path, allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise ValueError(f"{path}: not a readable .npy array ({exc})") from None
    if arr.ndim != 1 or arr.dtype.kind not in "iu":
        raise ValueError(f"{path}: need a 1-D integer array, got shape {arr.shape} dtype {arr.dtype}")
    if arr.size and (int(arr.min()) < 1 or int(arr.max()) >= 2**63):
        bad = int(np.argmax((arr < 1) | (arr >= 2**63)))
        raise _bad_value(f"{path} index {bad}", str(arr[bad]))
    return np.asarray(arr, dtype=np.int64)


def _csv_header(path: Path) -> tuple[int, int]:
    """(line number of the header, index of the ``length`` column); skips blank and ``#`` lines."""
    with _open_text(path, newline="") as handle:
        for number, line in enumerate(handle, start=1):
            if line.strip() and not line.lstrip().startswith("#"):
                columns = [c.strip() for c in next(csv.reader([line]))]
                if "length" not in columns:
                    found = _names(columns)
                    raise ValueError(f"{path} line {number}: no 'length' column in the CSV header "
                                     f"(columns found: {found})")
                return number, columns.index("length")
    raise ValueError(f"{path}: empty trace (no CSV header)")


def _read_csv(path: Path) -> IntArray:
    header_line, column = _csv_header(path)
    try:
        with warnings.catch_warnings(), _loadtxt_source(path, newline="") as source:
            warnings.simplefilter("ignore")
            arr = np.loadtxt(source, dtype=np.int64, delimiter=",", skiprows=header_line, usecols=column,
                             comments="#", quotechar='"', ndmin=1)
    except (ValueError, OverflowError):
        arr = None
    if arr is None or (arr.size and int(arr.min()) < 1):
        _scan_csv(path, header_line, column)
        raise ValueError(f"{path}: could not read the 'length' column")
    return np.asarray(arr, dtype=np.int64)


def _scan_csv(path: Path, header_line: int, column: int) -> None:
    with _open_text(path, newline="") as handle:
        rows = csv.reader(handle)
        for row in rows:
            if rows.line_num <= header_line or not any(c.strip() for c in row) or row[0].lstrip().startswith("#"):
                continue
            if column >= len(row):
                raise ValueError(f"{path} line {rows.line_num}: no value in the 'length' column ({len(row)} fields)")
            if _positive_int(row[column]) is None:
                raise _bad_value(f"{path} line {rows.line_num}", row[column].strip())


def _jsonl_length(path: Path, number: int, line: str) -> int:
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path} line {number}: invalid JSON ({exc.msg})") from None
    except RecursionError:
        raise ValueError(f"{path} line {number}: not an object with a 'length' field (JSON nested too deeply)") from None
    if not isinstance(obj, dict) or "length" not in obj:
        found = _names(list(obj)) if isinstance(obj, dict) else type(obj).__name__
        raise ValueError(f"{path} line {number}: no 'length' field (fields found: {found})")
    value = obj["length"]
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value < 2**63:
        raise _bad_value(f"{path} line {number}", json.dumps(value))
    return value


def _read_jsonl(path: Path) -> IntArray:
    """One ``json.loads`` per line (about 1-2 us a line). Prefer text or ``.npy`` for huge traces."""
    with _open_text(path) as handle:
        values = [_jsonl_length(path, n, line) for n, line in enumerate(handle, start=1) if line.strip()]
    return np.asarray(values, dtype=np.int64)
