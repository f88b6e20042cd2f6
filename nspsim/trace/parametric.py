"""``ParametricTrace``: a mixture of continuous length distributions (Burr XII or lognormal).

Each component is truncated to ``[0, truncate_at]``; a draw is rounded to the nearest integer and
clipped at 1. Sampling uses the exact inverse CDF, so ``share_at_most`` is exact too. ``fit_burr12``
solves the three Burr XII parameters from a median, a body share and a tail share (used offline: the
built-in presets ship the fitted constants). Trade-off: a smooth closed form has no bumps a real
trace may have, but it extends to any truncation point and needs no data file.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from nspsim.trace.base import (
    DEFAULT_MATERIALIZE,
    MAX_LENGTH,
    FloatArray,
    IntArray,
    LengthTrace,
    _check_count,
    _chunked,
    _seeded,
    _stratified,
    allocate_largest_remainder,
)

DEFAULT_MAX_LENGTH = 2**21  # upper truncation of the synthetic presets (2,097,152 tokens)


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
        # Deferred: scipy.special takes about 0.1 s to import and no built-in trace is lognormal.
        from scipy.special import ndtr

        with np.errstate(divide="ignore"):
            z = np.log(np.maximum(np.asarray(x, float), 0.0) / self.median) / self.sigma
        return np.asarray(ndtr(z), dtype=np.float64)

    def ppf(self, u: FloatArray) -> FloatArray:
        """``median * exp(sigma * Phi^-1(u))``."""
        # Deferred: scipy.special takes about 0.1 s to import and no built-in trace is lognormal.
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
        if self.truncate_at > MAX_LENGTH:
            raise ValueError(
                f"{who}: lengths too large: truncate_at={self.truncate_at:,} is above the limit of "
                f"{MAX_LENGTH:,} = 2**36 tokens a sample may have"
            )
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


def fit_burr12(
    *, median: float, share_lt_8k: float, share_gt_128k: float, max_length: int = DEFAULT_MAX_LENGTH
) -> Burr12:
    """Solve the Burr XII whose truncated, rounded lengths have the given median, the given share
    below 8192 tokens and the given share above 131072 tokens. Three equations in three unknowns,
    solved in log-odds space by ``scipy.optimize.least_squares``. Used offline: the presets ship the
    fitted constants (tests/trace/test_trace.py re-fits them)."""
    # Deferred: scipy.optimize takes about 0.2 s to import and only offline fitting needs it.
    from scipy.optimize import least_squares

    if not (0 < share_gt_128k < 1 - share_lt_8k < 0.5 and 1 <= median < 8192):
        raise ValueError(
            f"need 1 <= median < 8192, share_lt_8k > 0.5 and 0 < share_gt_128k < 1 - share_lt_8k; "
            f"got {median}, {share_lt_8k}, {share_gt_128k}"
        )
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
