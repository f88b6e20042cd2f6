"""How much a per-batch ratio varies: its spread over the batches and a bootstrap interval of the
ratio of sums (the headline compare and sweep report: ``sum(planner) / sum(baseline)``).

The interval resamples the batches as pairs (scipy.stats.bootstrap, percentile method, a fixed seed so
a report is reproducible). Trade-off: with few batches (the default 8) the percentile interval is
narrow where the batches happen to agree and says nothing of batches never drawn; it describes the
drawn batches' spread, which is what the headline rests on.

With gradient-accumulation windows (:mod:`nspsim.compare.windows`) the unit of the spread and of the
resampling is the window, not the pass: two planners' k-th passes of a window may hold different
samples, so only a window's summed time compares like with like (:func:`per_window`).
"""

from __future__ import annotations

import numpy as np
from scipy import stats

CONFIDENCE = 0.95
BOOTSTRAP_RESAMPLES = 9_999
BOOTSTRAP_SEED = 0
INTERVAL = (
    f"{CONFIDENCE:.0%} paired bootstrap interval (percentile method, {BOOTSTRAP_RESAMPLES:,} resamples of the "
    f"batches, seed {BOOTSTRAP_SEED}) of the ratio of summed step times"
)
"""How ``normalized_ci_low`` / ``_high`` are computed (scipy.stats.bootstrap); reports print it."""


def spread(prefix: str, values: np.ndarray) -> dict[str, float | None]:
    """``{prefix}_min``, ``_median`` and ``_max`` of ``values`` (``None`` each when empty)."""
    keys = (f"{prefix}_min", f"{prefix}_median", f"{prefix}_max")
    if not values.size:
        return dict.fromkeys(keys)
    return dict(zip(keys, (float(np.min(values)), float(np.median(values)), float(np.max(values)))))


def per_window(
    iterations: np.ndarray, ours: np.ndarray, theirs: np.ndarray, window: int
) -> tuple[np.ndarray, np.ndarray]:
    """``ours`` and ``theirs`` (paired step times of ``iterations``) summed per window of ``window``
    consecutive iterations, keeping only the windows whose every pass is paired (both ran); unchanged
    for ``window`` 1."""
    if window <= 1:
        return ours, theirs
    ids = np.asarray(iterations, dtype=np.int64) // window
    keys, counts = np.unique(ids, return_counts=True)
    full = keys[counts == window]
    keep = np.isin(ids, full)
    index = np.searchsorted(full, ids[keep])
    return (
        np.bincount(index, weights=ours[keep], minlength=full.size),
        np.bincount(index, weights=theirs[keep], minlength=full.size),
    )


def _ratio_of_sums(ours: np.ndarray, theirs: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.asarray(np.sum(ours, axis=axis) / np.sum(theirs, axis=axis))


def ratio_interval(ours: np.ndarray, theirs: np.ndarray) -> tuple[float, float] | None:
    """The :data:`INTERVAL` of ``sum(ours) / sum(theirs)``, resampling the batches as pairs (scipy's
    bootstrap); ``None`` below two batches, where there is nothing to resample."""
    if len(ours) < 2:
        return None
    if np.allclose(ours / theirs, ours[0] / theirs[0], rtol=1e-12, atol=0.0):  # every resample gives the same ratio
        value = float(ours.sum() / theirs.sum())
        return value, value
    result = stats.bootstrap(
        (ours, theirs),
        _ratio_of_sums,
        paired=True,
        vectorized=True,
        n_resamples=BOOTSTRAP_RESAMPLES,
        confidence_level=CONFIDENCE,
        method="percentile",
        rng=np.random.default_rng(BOOTSTRAP_SEED),
    )
    low, high = result.confidence_interval
    return float(low), float(high)
