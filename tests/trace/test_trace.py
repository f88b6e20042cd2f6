"""Tests for nspsim.trace: loading, the three trace kinds, the built-in traces and their fits."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from nspsim.trace import (
    BUILTIN_TRACES,
    CODE_FIT,
    CODE_TARGETS,
    COMMONCRAWL_FIT,
    COMMONCRAWL_TARGETS,
    LONGTAIL_PAPER_FIT,
    LONGTAIL_PAPER_TARGETS,
    Burr12,
    EmpiricalTrace,
    HistogramTrace,
    LogNormal,
    ParametricTrace,
    allocate_largest_remainder,
    builtin_trace_names,
    fit_burr12,
    fit_histogram,
    load_trace,
    log_bin_edges,
    powerlaw_cdf,
    powerlaw_quantile,
)
from nspsim.trace.stats import trace_stats

REPO_ROOT = Path(__file__).resolve().parents[2]

# Measured from /work/shared/traces/wikipedia.txt (FlexSP artifact, sha1 cb8af4de...) with
# nspsim.trace.stats; the same numbers are in nspsim_traces/README.md and the JSON's reference_stats.
WIKI_REAL = {
    "count": 1_000_000,
    "median": 347.0,
    "p90": 2112.0,
    "p99": 10919.02,
    "p999": 37353.014,
    "max": 1_823_777,
    "mean": 1013.64878,
    "share_lt_8k": 0.984008,
    "share_gt_128k": 49e-6,
}
FIT_KEYS = ("median", "p90", "p99", "p999", "share_lt_8k", "share_gt_128k")


def shared_wikipedia() -> Path | None:
    """The live artifact file, if this checkout can see it (NSPSIM_SHARED or ../shared)."""
    base = os.environ.get("NSPSIM_SHARED")
    path = (Path(base) if base else REPO_ROOT.parent / "shared") / "traces" / "wikipedia.txt"
    return path if path.exists() else None


# ----------------------------------------------------------------------------- helpers


def test_largest_remainder_hand_cases() -> None:
    assert allocate_largest_remainder([5, 3, 2], 7).tolist() == [4, 2, 1]  # 3.5, 2.1, 1.4
    assert allocate_largest_remainder([1, 1, 1], 10).tolist() == [4, 3, 3]  # ties: first group first
    assert allocate_largest_remainder([0, 2], 3).tolist() == [0, 3]
    with pytest.raises(ValueError, match="non-negative"):
        allocate_largest_remainder([1, -1], 3)


@given(st.lists(st.integers(0, 10**6), min_size=1, max_size=30).filter(any), st.integers(0, 10**6))
def test_largest_remainder_properties(weights: list[int], n: int) -> None:
    alloc = allocate_largest_remainder(weights, n)
    exact = np.asarray(weights, float) / sum(weights) * n
    assert int(alloc.sum()) == n
    assert np.all(np.abs(alloc - exact) < 1.0 + 1e-9)
    assert np.all(alloc[np.asarray(weights) == 0] == 0)


def test_log_bin_edges_hand_values() -> None:
    edges = log_bin_edges(1_823_777)
    assert edges[:15] == (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 15, 16)  # round(2**(k/8))
    assert 8192 in edges and 131072 in edges and edges[-1] == 2**21
    assert all(b > a for a, b in zip(edges, edges[1:]))
    assert log_bin_edges(8, bins_per_octave=1) == (1, 2, 4, 8, 16)


def test_powerlaw_hand_values() -> None:
    assert powerlaw_cdf(2, 4, 0.0, 3) == pytest.approx(0.5)  # uniform
    assert powerlaw_cdf(1, 4, -1.0, 2) == pytest.approx(0.5)  # log-uniform: log 2 / log 4
    assert powerlaw_cdf(1, 3, 1.0, 2) == pytest.approx(3 / 8)  # density x: (4 - 1) / (9 - 1)
    assert powerlaw_quantile(1, 3, 1.0, 3 / 8) == pytest.approx(2.0)
    assert powerlaw_cdf(1, 3, 1.0, [0.5, 5.0]).tolist() == [0.0, 1.0]


@given(st.integers(1, 10**6), st.floats(1.01, 2.0), st.floats(-40, 40), st.floats(0, 1))
@example(lo=1, ratio=2.0, alpha=-24.75, u=1.0)  # exp/log1p rounding once overshot hi by a few ulps
def test_powerlaw_quantile_inverts_cdf(lo: int, ratio: float, alpha: float, u: float) -> None:
    x = powerlaw_quantile(lo, lo * ratio, alpha, u)
    assert lo * (1 - 1e-12) <= x <= lo * ratio * (1 + 1e-12)
    assert float(powerlaw_cdf(lo, lo * ratio, alpha, x)) == pytest.approx(u, abs=1e-6)


# ----------------------------------------------------------------------------- histogram


def small_histogram() -> HistogramTrace:
    return HistogramTrace(name="h", source="hand", edges=(1, 2, 4), counts=(1, 3))


def test_histogram_materialize_hand_case() -> None:
    # bin [1,2) gets 2 draws, bin [2,4) gets 6, uniform there: strata of width 1/6 map to
    # [2, 2.33), [2.33, 2.67), [2.67, 3) -> 2 and [3, 3.33), [3.33, 3.67), [3.67, 4) -> 3
    assert sorted(small_histogram().materialize(8).tolist()) == [1, 1, 2, 2, 2, 3, 3, 3]


def test_histogram_share_and_max_hand_case() -> None:
    h = small_histogram()
    assert [h.share_at_most(x) for x in (0, 1, 2, 3, 99)] == pytest.approx([0, 0.25, 0.625, 1, 1])
    assert h.max_length == 3
    assert HistogramTrace(name="z", source="", edges=(1, 5, 9), counts=(4, 0)).max_length == 4


def test_histogram_validation_messages() -> None:
    with pytest.raises(ValueError, match=r"edges\[2\]=3 <= edges\[1\]=3"):
        HistogramTrace(name="h", source="", edges=(1, 3, 3), counts=(1, 1))
    with pytest.raises(ValueError, match="not all zero"):
        HistogramTrace(name="h", source="", edges=(1, 3), counts=(0,))
    with pytest.raises(ValueError, match=r"alpha\[0\]=99"):
        HistogramTrace(name="h", source="", edges=(1, 3), counts=(1,), alpha=(99.0,))
    with pytest.raises(ValueError, match=r"edges\[1\] = 2.5 is not an integer"):
        HistogramTrace(name="h", source="", edges=(1, 2.5), counts=(1,))  # type: ignore[arg-type]


Hist = tuple[tuple[int, ...], list[int], list[float]]
histograms = st.lists(st.integers(1, 10**6), min_size=2, max_size=12, unique=True).flatmap(
    lambda e: st.tuples(
        st.just(tuple(sorted(e))),
        st.lists(st.integers(0, 1000), min_size=len(e) - 1, max_size=len(e) - 1).filter(any),
        st.lists(st.floats(-6, 6), min_size=len(e) - 1, max_size=len(e) - 1),
    )
)


@settings(max_examples=60, deadline=None)
@given(histograms, st.integers(1, 3000), st.integers(0, 2**32))
def test_histogram_draws_stay_in_occupied_bins(hist: Hist, n: int, seed: int) -> None:
    edges, counts, alpha = hist
    h = HistogramTrace(name="h", source="", edges=edges, counts=tuple(counts), alpha=tuple(alpha))
    for draws in (h.sample(n, np.random.default_rng(seed)), h.materialize(n, seed=seed)):
        assert draws.dtype == np.int64 and draws.size == n
        bins = np.searchsorted(edges, draws, side="right") - 1
        assert np.all((bins >= 0) & (bins < len(counts)))
        assert np.all(np.asarray(counts)[bins] > 0)
        assert draws.max() <= h.max_length
    got = np.bincount(np.searchsorted(edges, h.materialize(n, seed=seed), side="right") - 1, minlength=len(counts))
    assert got.tolist() == allocate_largest_remainder(counts, n).tolist()  # shares exact to 1/n


@settings(max_examples=40, deadline=None)
@given(histograms, st.integers(0, 2**32), st.integers(1, 10**6))
def test_histogram_share_matches_materialized_cdf(hist: Hist, seed: int, x: int) -> None:
    edges, counts, alpha = hist
    h = HistogramTrace(name="h", source="", edges=edges, counts=tuple(counts), alpha=tuple(alpha))
    n = 4000
    empirical = float(np.count_nonzero(h.materialize(n, seed=seed) <= x)) / n
    assert empirical == pytest.approx(h.share_at_most(x), abs=(len(counts) + 2) / n)


def test_histogram_json_roundtrip_and_errors(tmp_path: Path) -> None:
    h = HistogramTrace(name="h", source="s", edges=(1, 4, 10), counts=(3, 1), alpha=(-1.5, 0.25))
    path = tmp_path / "h.json"
    path.write_text(json.dumps(h.to_json_dict()))
    assert load_trace(str(path)) == h
    path.write_text(json.dumps({**h.to_json_dict(), "counts": [3]}))
    with pytest.raises(ValueError, match=r"h\.json: .*3 edges need 2 counts"):
        load_trace(str(path))
    path.write_text('{"format": "nspsim-length-histogram/1",\n "name": }')
    with pytest.raises(ValueError, match=r"h\.json line 2: invalid JSON"):
        load_trace(str(path))


def test_fit_histogram_recovers_a_power_law() -> None:
    # lengths with density ~ x**-2 on [1000, 64000): each wide bin should fit alpha near -2
    u = (np.arange(200_000) + 0.5) / 200_000
    lengths = np.floor(powerlaw_quantile(1000, 64000, -2.0, u)).astype(np.int64)
    edges, counts, alpha = fit_histogram(lengths)
    assert sum(counts) == lengths.size and edges[-1] == lengths.max() + 1
    dense = [a for a, c, lo in zip(alpha, counts, edges) if c >= 1000 and lo >= 1024]
    assert len(dense) > 30 and np.allclose(dense, -2.0, atol=0.1)


# ----------------------------------------------------------------------------- empirical


def test_empirical_hand_cases() -> None:
    t = EmpiricalTrace(name="e", source="", lengths=np.array([5, 6, 7]))
    assert t.materialize().tolist() == [5, 6, 7]
    m = t.materialize(7, seed=3)
    assert sorted(np.bincount(m)[5:].tolist()) == [2, 2, 3]
    assert set(t.sample(100, np.random.default_rng(0)).tolist()) <= {5, 6, 7}
    assert t.share_at_most(6) == pytest.approx(2 / 3) and t.max_length == 7
    with pytest.raises(ValueError, match=r"lengths\[1\] = 0"):
        EmpiricalTrace(name="e", source="", lengths=np.array([3, 0]))


@given(st.lists(st.integers(1, 10**6), min_size=1, max_size=50), st.integers(0, 500), st.integers(0, 2**32))
def test_empirical_materialize_is_balanced(lengths: list[int], n: int, seed: int) -> None:
    t = EmpiricalTrace(name="e", source="", lengths=np.array(lengths))
    m = t.materialize(n, seed=seed)
    uses = np.bincount(np.searchsorted(np.sort(lengths), m, side="left"), minlength=len(lengths))
    assert m.size == n and set(m.tolist()) <= set(lengths)
    assert np.array_equal(m, t.materialize(n, seed=seed))  # deterministic
    assert len(set(lengths)) < len(lengths) or uses.min() >= n // len(lengths)


# ----------------------------------------------------------------------------- parametric


def test_burr_and_lognormal_hand_values() -> None:
    loglogistic = Burr12(scale=1.0, c=1.0, k=1.0)  # S(x) = 1 / (1 + x)
    assert loglogistic.cdf(np.array([3.0]))[0] == pytest.approx(0.75)
    assert loglogistic.ppf(np.array([0.75]))[0] == pytest.approx(3.0)
    ln = LogNormal(median=1000.0, sigma=1.0)
    assert ln.cdf(np.array([1000.0 * math.e]))[0] == pytest.approx(0.5 * (1 + math.erf(1 / math.sqrt(2))))
    t = ParametricTrace(name="ln", source="", components=((1.0, ln),), truncate_at=10_000)
    expected = ln.cdf(np.array([999.5]))[0] / ln.cdf(np.array([10_000.0]))[0]  # rint(X) <= 999  <=>  X < 999.5
    assert t.share_at_most(999) == pytest.approx(expected)
    assert t.share_at_most(10_000) == 1.0 and t.max_length == 10_000


def test_parametric_mixture_shares_and_truncation() -> None:
    short, long_ = LogNormal(median=100.0, sigma=0.1), LogNormal(median=50_000.0, sigma=0.1)
    t = ParametricTrace(name="mix", source="", components=((3.0, short), (1.0, long_)), truncate_at=60_000)
    m = t.materialize(1000, seed=1)
    assert np.count_nonzero(m < 1000) == 750 and m.max() <= 60_000 and m.min() >= 1
    s = t.sample(20_000, np.random.default_rng(2))
    assert np.count_nonzero(s < 1000) / s.size == pytest.approx(0.75, abs=0.02)
    with pytest.raises(ValueError, match="weight must be > 0"):
        ParametricTrace(name="bad", source="", components=((0.0, short),))
    with pytest.raises(ValueError, match="truncate_at must be an integer"):
        ParametricTrace(name="bad", source="", components=((1.0, short),), truncate_at=0)


@pytest.mark.parametrize(
    ("fit", "targets"),
    [(LONGTAIL_PAPER_FIT, LONGTAIL_PAPER_TARGETS), (CODE_FIT, CODE_TARGETS), (COMMONCRAWL_FIT, COMMONCRAWL_TARGETS)],
)
def test_preset_constants_are_the_fit(fit: Burr12, targets: dict[str, float]) -> None:
    refit = fit_burr12(
        median=targets["median"], share_lt_8k=targets["share_lt_8k"], share_gt_128k=targets["share_gt_128k"]
    )
    for key in ("scale", "c", "k"):
        assert getattr(refit, key) == pytest.approx(getattr(fit, key), rel=1e-6)


def test_fit_burr12_rejects_inconsistent_figures() -> None:
    with pytest.raises(ValueError, match="share_lt_8k > 0.5"):
        fit_burr12(median=500, share_lt_8k=0.4, share_gt_128k=0.01)  # median < 8K needs > 50 % below 8K
    with pytest.raises(ValueError, match="share_gt_128k < 1 - share_lt_8k"):
        fit_burr12(median=500, share_lt_8k=0.99, share_gt_128k=0.02)


@pytest.mark.parametrize(
    ("name", "targets"),
    [("longtail-paper", LONGTAIL_PAPER_TARGETS), ("code", CODE_TARGETS), ("commoncrawl", COMMONCRAWL_TARGETS)],
)
def test_preset_materialize_hits_its_figures(name: str, targets: dict[str, float]) -> None:
    trace = load_trace(name)
    stats = trace_stats(trace.materialize())
    assert stats.median == targets["median"]
    assert stats.share_lt_8k == pytest.approx(targets["share_lt_8k"], abs=2e-6)
    assert stats.share_gt_128k == pytest.approx(targets["share_gt_128k"], abs=2e-6)
    assert stats.min >= 1 and stats.max <= 2**21
    assert trace.share_at_most(8191) == pytest.approx(targets["share_lt_8k"], abs=1e-9)
    assert 1 - trace.share_at_most(131072) == pytest.approx(targets["share_gt_128k"], rel=1e-7)


def test_equal_pool_of_flexsp_like_traces_reproduces_the_paper() -> None:
    """The paper's pooled figures (94.0% < 8K, 0.12% > 128K) from wikipedia + commoncrawl + code."""
    traces = [load_trace(n) for n in ("wikipedia", "commoncrawl", "code")]
    below_8k = sum(t.share_at_most(8191) for t in traces) / 3
    above_128k = sum(1 - t.share_at_most(131072) for t in traces) / 3
    assert below_8k == pytest.approx(0.940, abs=1e-5)
    assert above_128k == pytest.approx(0.0012, abs=1e-6)
    pooled_median = next(x for x in range(300, 800) if sum(t.share_at_most(x) for t in traces) / 3 >= 0.5)
    assert pooled_median == LONGTAIL_PAPER_TARGETS["median"]


# ----------------------------------------------------------------------------- built-in wikipedia


def test_builtin_registry() -> None:
    assert builtin_trace_names() == ("code", "commoncrawl", "longtail-paper", "wikipedia")
    for name in builtin_trace_names():
        trace = BUILTIN_TRACES[name]()
        assert trace.name == name and trace.source


def test_wikipedia_histogram_layout() -> None:
    wiki = load_trace("wikipedia")
    assert isinstance(wiki, HistogramTrace)
    assert "PKU-DAIR/Hetu-Galvatron" in wiki.source and "Apache-2.0" in wiki.source
    assert 8192 in wiki.edges and 131072 in wiki.edges
    assert sum(wiki.counts) == WIKI_REAL["count"] and wiki.max_length == WIKI_REAL["max"]
    data = json.loads((REPO_ROOT / "nspsim_traces" / "data" / "wikipedia_hist.json").read_text())
    assert data["provenance"]["license"] == "Apache-2.0" and data["provenance"]["commit"].startswith("b4666892")
    for key, value in WIKI_REAL.items():
        assert data["reference_stats"][key] == pytest.approx(value, rel=1e-9)


def test_wikipedia_materialize_reproduces_the_real_trace() -> None:
    stats = trace_stats(load_trace("wikipedia").materialize())
    for key in FIT_KEYS:
        assert getattr(stats, key) == pytest.approx(WIKI_REAL[key], rel=0.05), key
    assert stats.share_lt_8k == WIKI_REAL["share_lt_8k"]  # 8192 and 131072 are bin edges: exact
    assert stats.share_gt_128k == WIKI_REAL["share_gt_128k"]
    for key in ("median", "p90", "p99", "p999"):  # the measured fit is far tighter than 5 %
        assert getattr(stats, key) == pytest.approx(WIKI_REAL[key], rel=0.002), key
    assert stats.min >= 1 and stats.max <= WIKI_REAL["max"]


@pytest.mark.skipif(shared_wikipedia() is None, reason="FlexSP wikipedia.txt not present (set NSPSIM_SHARED)")
def test_wikipedia_against_the_live_file() -> None:
    from nspsim_traces.build_wikipedia_hist import build

    path = shared_wikipedia()
    assert path is not None
    real = trace_stats(load_trace(str(path)).materialize())
    fitted = trace_stats(load_trace("wikipedia").materialize())
    for key in FIT_KEYS:
        assert getattr(fitted, key) == pytest.approx(getattr(real, key), rel=0.05), key
        assert getattr(real, key) == pytest.approx(WIKI_REAL[key], rel=1e-9), key
    shipped = json.loads((REPO_ROOT / "nspsim_traces" / "data" / "wikipedia_hist.json").read_text())
    rebuilt = build(path)
    assert rebuilt["edges"] == shipped["edges"] and rebuilt["counts"] == shipped["counts"]
    assert np.allclose(rebuilt["alpha"], shipped["alpha"], atol=1e-3)


def test_sampling_ten_million_reproduces_the_short_share() -> None:
    draws = load_trace("wikipedia").sample(10_000_000, np.random.default_rng(0))
    assert float(np.count_nonzero(draws < 8192)) / draws.size == pytest.approx(0.984008, abs=3e-4)


def test_sampling_is_deterministic_per_generator_state() -> None:
    for name in builtin_trace_names():
        trace = load_trace(name)
        a = trace.sample(5000, np.random.default_rng(7))
        assert np.array_equal(a, trace.sample(5000, np.random.default_rng(7)))
        assert not np.array_equal(a, trace.sample(5000, np.random.default_rng(8)))
        assert np.array_equal(trace.materialize(5000, seed=4), trace.materialize(5000, seed=4))


# ----------------------------------------------------------------------------- loading files
