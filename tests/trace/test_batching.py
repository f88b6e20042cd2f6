"""Tests for nspsim.trace.batching: the Batch record and the deterministic, random-access BatchSampler."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nspsim.trace import EmpiricalTrace, HistogramTrace, IntArray, LengthTrace, batching, load_trace
from nspsim.trace.batching import Batch, BatchSampler


@dataclass(frozen=True, kw_only=True)
class CyclicTrace(LengthTrace):
    """Test double: draws repeat ``pattern`` from its start on every call and ignore the generator."""

    pattern: tuple[int, ...]

    def sample(self, n: int, rng: np.random.Generator) -> IntArray:
        return np.resize(np.asarray(self.pattern, dtype=np.int64), n)

    def materialize(self, n: int | None = None, seed: int = 0) -> IntArray:
        return self.sample(len(self.pattern) if n is None else n, np.random.default_rng(seed))

    def share_at_most(self, length: int) -> float:
        return sum(x <= length for x in self.pattern) / len(self.pattern)

    @property
    def max_length(self) -> int:
        return max(self.pattern)


def cyclic(*pattern: int) -> CyclicTrace:
    return CyclicTrace(name="cyc", source="test", pattern=pattern)


def reference_batch(
    trace: LengthTrace, seed: int, index: int, budget: int, max_context: int
) -> tuple[list[int], int, int]:
    """Oracle: the documented rule, one draw at a time in plain Python (same block schedule)."""
    rng, block, dropped, dropped_tokens = np.random.default_rng([seed, index]), 1024, 0, 0
    kept: list[int] = []
    while True:
        for x in trace.sample(block, rng).tolist():
            if x > max_context:
                dropped, dropped_tokens = dropped + 1, dropped_tokens + x
            elif sum(kept) + x > budget:
                return kept, dropped, dropped_tokens
            else:
                kept.append(x)
        block = min(2 * block, 1 << 20)


def test_hand_case_single_length() -> None:
    b = BatchSampler(cyclic(3), tokens_per_batch=10, max_context=5).batch(0)
    assert (b.lengths, b.total_tokens, b.num_samples, b.dropped_count, b.dropped_tokens) == ((3, 3, 3), 9, 3, 0, 0)


def test_hand_case_with_drops_stops_at_first_overflow() -> None:
    # 4 kept (4), 9 dropped, 3 kept (7), 5 would make 12 > 10: stop; the 9 after it is not counted
    b = BatchSampler(cyclic(4, 9, 3, 5, 9, 1), tokens_per_batch=10, max_context=5).batch(0)
    assert (b.lengths, b.dropped_count, b.dropped_tokens) == ((4, 3), 1, 9)


def test_hand_case_exact_fill_is_kept() -> None:
    b = BatchSampler(cyclic(6, 4, 1), tokens_per_batch=10, max_context=10).batch(0)
    assert b.lengths == (6, 4) and b.total_tokens == 10  # "stays <= budget" includes equality


def test_batch_spanning_several_blocks() -> None:
    # 5000 draws of 1 token: blocks 1024 + 2048 + 4096 before the budget runs out
    b = BatchSampler(cyclic(1), tokens_per_batch=5000, max_context=1).batch(3)
    assert b.num_samples == 5000 and b.index == 3


def test_random_access_and_determinism() -> None:
    sampler = BatchSampler(load_trace("wikipedia"), seed=11)
    listed = list(sampler.batches(2, 4))
    assert [b.index for b in listed] == [2, 3, 4, 5]
    assert sampler.batch(4) == listed[2]
    again = BatchSampler(load_trace("wikipedia"), seed=11).batch(4)
    assert again.fingerprint() == listed[2].fingerprint()
    assert len({b.fingerprint() for b in listed}) == 4
    assert BatchSampler(load_trace("wikipedia"), seed=12).batch(4).fingerprint() != again.fingerprint()


@settings(max_examples=40, deadline=None)
@given(
    st.sampled_from(["wikipedia", "longtail-paper", "code"]),
    st.integers(0, 2**31),
    st.integers(0, 10**6),
    st.integers(64 * 1024, 512 * 1024),
    st.integers(1024, 64 * 1024),
)
def test_sampler_matches_reference_oracle(name: str, seed: int, index: int, budget: int, max_context: int) -> None:
    trace = load_trace(name)
    b = BatchSampler(trace, tokens_per_batch=budget, max_context=max_context, seed=seed).batch(index)
    kept, dropped, dropped_tokens = reference_batch(trace, seed, index, budget, max_context)
    assert list(b.lengths) == kept
    assert (b.dropped_count, b.dropped_tokens) == (dropped, dropped_tokens)
    assert b.total_tokens <= budget and max(b.lengths) <= max_context


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**31), st.integers(0, 1000), st.integers(200_000, 2 * 1024**2), st.integers(0, 2 * 1024**2))
def test_smaller_budget_gives_a_prefix(seed: int, index: int, small: int, extra: int) -> None:
    trace = load_trace("longtail-paper")
    a = BatchSampler(trace, tokens_per_batch=small, max_context=192 * 1024, seed=seed).batch(index)
    b = BatchSampler(trace, tokens_per_batch=small + extra, max_context=192 * 1024, seed=seed).batch(index)
    assert b.lengths[: a.num_samples] == a.lengths
    assert a.dropped_count <= b.dropped_count


def test_paper_defaults_fill_the_budget() -> None:
    sampler = BatchSampler(load_trace("longtail-paper"))
    assert (sampler.tokens_per_batch, sampler.max_context, sampler.seed) == (2 * 1024**2, 192 * 1024, 0)
    for b in sampler.batches(0, 20):
        # the next kept sample overflowed, and it is at most max_context long
        assert sampler.tokens_per_batch - sampler.max_context < b.total_tokens <= sampler.tokens_per_batch


def test_sampler_validation_messages() -> None:
    trace = load_trace("wikipedia")
    with pytest.raises(ValueError, match=r"max_context \(300000\) must be <= tokens_per_batch \(200000\)"):
        BatchSampler(trace, tokens_per_batch=200_000, max_context=300_000)
    with pytest.raises(ValueError, match="tokens_per_batch must be a positive integer"):
        BatchSampler(trace, tokens_per_batch=0)
    with pytest.raises(ValueError, match="seed must be a non-negative integer"):
        BatchSampler(trace, seed=-1)
    with pytest.raises(ValueError, match="batch index must be a non-negative integer"):
        BatchSampler(trace).batch(-1)
    long_only = EmpiricalTrace(name="long", source="", lengths=np.array([100, 200]))
    with pytest.raises(ValueError, match=r"trace 'long' has no length <= max_context=50"):
        BatchSampler(long_only, tokens_per_batch=1000, max_context=50)


def test_rare_short_lengths_raise_instead_of_hanging(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(batching, "MAX_DRAWS_PER_BATCH", 1 << 14)  # blocks 1024+...+16384 = 31744 draws
    rare = HistogramTrace(name="rare", source="", edges=(1, 2, 10**6), counts=(1, 10**12))
    sampler = BatchSampler(rare, tokens_per_batch=1000, max_context=1)
    with pytest.raises(ValueError, match=r"batch 0: 31744 draws from trace 'rare' did not fill tokens_per_batch=1000"):
        sampler.batch(0)


def test_batch_record_validation_and_fingerprint() -> None:
    b = Batch(
        lengths=(5, 7),
        trace="t",
        seed=1,
        index=2,
        tokens_per_batch=20,
        max_context=10,
        dropped_count=1,
        dropped_tokens=11,
    )
    assert b.lengths_array().dtype == np.int64 and b.lengths_array().tolist() == [5, 7]
    # sha256 of {"dropped_count":1,"dropped_tokens":11,"index":2,"lengths":[5,7],...,"trace":"t"} (sorted keys)
    assert b.fingerprint() == "87a405d29f64c480"
    as_list: list[int] = [5, 7]  # a list is accepted and stored as a tuple
    from_list = Batch(
        lengths=as_list,
        trace="t",
        seed=1,
        index=2,  # type: ignore[arg-type]
        tokens_per_batch=20,
        max_context=10,
        dropped_count=1,
        dropped_tokens=11,
    )
    assert from_list == b and from_list.lengths == (5, 7)
    assert (
        b.fingerprint()
        != Batch(
            lengths=(7, 5),
            trace="t",
            seed=1,
            index=2,
            tokens_per_batch=20,
            max_context=10,
            dropped_count=1,
            dropped_tokens=11,
        ).fingerprint()
    )
    base = dict(trace="t", seed=0, index=0, tokens_per_batch=20, max_context=10)
    with pytest.raises(ValueError, match=r"every length must be in \[1, max_context=10\]"):
        Batch(lengths=(11,), **base)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="21 tokens exceed tokens_per_batch=20"):
        Batch(lengths=(10, 10, 1), **base)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="has no samples"):
        Batch(lengths=(), **base)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="2 dropped samples cannot hold 15 tokens"):
        Batch(lengths=(1,), dropped_count=2, dropped_tokens=15, **base)  # type: ignore[arg-type]
