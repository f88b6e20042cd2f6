"""The compiled prefix beam search equals its numpy reference bit for bit: loads, tokens, idle nodes and
every state's assignment (or both find no state), on random prefixes with ties (integer costs), tight
token budgets, the memory side on and off, monotone and lookahead on and off, widths 1-4, and GPU
counts on both sides of numpy's pairwise-sum block (128)."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nspsim.planners.nsp.beam import Prefix, Searched, node_layout, search_reference
from nspsim.planners.nsp.beam_kernel import search_compiled


@st.composite
def searches(draw: st.DrawFn) -> tuple[Prefix, int, tuple[int, ...], int, int, bool, bool]:
    num_gpus = draw(st.sampled_from([1, 2, 4, 8, 16, 64, 256, 512]))
    powers = [d for d in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512) if d <= num_gpus]
    levels = tuple(sorted(draw(st.sets(st.sampled_from(powers), min_size=1)), reverse=True))
    k = draw(st.integers(0, 12))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    lengths = np.sort(rng.integers(1, 400, size=k))[::-1].astype(np.int64)
    if draw(st.booleans()):  # many exact ties
        cost = rng.integers(1, 5, size=(k, len(levels))).astype(np.float64)
        latency = rng.integers(0, 2, size=len(levels)).astype(np.float64)
    else:
        cost = rng.uniform(0.01, 3.0, size=(k, len(levels)))
        latency = rng.uniform(0.0, 0.2, size=len(levels))
    rest = np.sort(rng.uniform(0.0, 50.0, size=k))[::-1].copy()
    memory = draw(st.booleans())
    attn = rng.uniform(0.0, 10.0, size=(k, len(levels))) if memory else None
    remat = rng.integers(0, 3, size=(k, len(levels))).astype(np.float64) if memory else None
    prefix = Prefix(lengths, cost, latency, rest, attn, remat, float(draw(st.integers(0, 30))))
    budget = draw(st.integers(1, 2 * max(int(lengths.sum()) if k else 1, 1)))
    return prefix, num_gpus, levels, budget, draw(st.integers(1, 4)), draw(st.booleans()), draw(st.booleans())


def _same(a: Searched | None, b: Searched | None) -> None:
    assert (a is None) == (b is None)
    if a is None or b is None:
        return
    for x, y in zip((a.loads, a.tokens, a.idle, a.degrees, a.firsts), (b.loads, b.tokens, b.idle, b.degrees, b.firsts)):
        assert x.shape == y.shape and x.dtype == y.dtype and np.array_equal(x, y)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(searches())
def test_compiled_search_equals_the_numpy_reference(
    case: tuple[Prefix, int, tuple[int, ...], int, int, bool, bool],
) -> None:
    prefix, num_gpus, levels, budget, width, monotone, lookahead = case
    layout = node_layout(num_gpus, levels)
    _same(
        search_compiled(prefix, layout, budget, width, monotone, lookahead),
        search_reference(prefix, layout, budget, width, monotone, lookahead),
    )


def test_symmetric_copies_are_kept_once() -> None:
    """Eight empty GPUs and one sample: every degree-1 node is a symmetric copy, so a width-4 beam
    keeps one state per level that differs (here degrees 8, 4, 2, 1: four distinct states)."""
    layout = node_layout(8, (8, 4, 2, 1))
    prefix = Prefix(np.array([10], dtype=np.int64), np.array([[1.0, 2.0, 4.0, 8.0]]), np.zeros(4), np.zeros(1))
    found = search_compiled(prefix, layout, 100, 4, False, False)
    assert found is not None
    assert found.degrees[:, 0].tolist() == [8, 4, 2, 1]
    _same(found, search_reference(prefix, layout, 100, 4, False, False))
