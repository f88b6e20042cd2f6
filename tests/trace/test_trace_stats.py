"""Tests for nspsim.trace.stats."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from nspsim.trace.stats import BUCKET_NAMES, TraceStats, format_stats, trace_stats

KEYS = {
    "count",
    "min",
    "median",
    "p90",
    "p99",
    "p999",
    "max",
    "mean",
    "total_tokens",
    "share_lt_8k",
    "share_gt_128k",
    "share_by_bucket",
    "token_share_by_bucket",
}


def test_hand_case_percentiles() -> None:
    s = trace_stats(np.array([4, 1, 3, 2]))
    # linear interpolation on sorted [1, 2, 3, 4]: position q * 3
    assert (s.count, s.min, s.max, s.total_tokens) == (4, 1, 4, 10)
    assert (s.median, s.p90, s.p99, s.p999, s.mean) == pytest.approx((2.5, 3.7, 3.97, 3.997, 2.5))
    assert (s.share_lt_8k, s.share_gt_128k) == (1.0, 0.0)
    assert s.share_by_bucket == {"0-8K": 1.0, "8-32K": 0.0, "32-128K": 0.0, "128K+": 0.0}


def test_hand_case_buckets_and_edges() -> None:
    lengths = [100, 8192, 40_000, 131_072, 200_000]  # 8192 is not < 8K; 131072 is 128K+ but not > 128K
    s = trace_stats(lengths)
    total = sum(lengths)
    assert (s.share_lt_8k, s.share_gt_128k) == (0.2, 0.2)
    assert s.share_by_bucket == {"0-8K": 0.2, "8-32K": 0.2, "32-128K": 0.2, "128K+": 0.4}
    assert s.token_share_by_bucket == pytest.approx(
        {"0-8K": 100 / total, "8-32K": 8192 / total, "32-128K": 40_000 / total, "128K+": 331_072 / total}
    )
    assert list(s.token_share_by_bucket) == list(BUCKET_NAMES)


def test_to_dict_keys_and_json() -> None:
    d = trace_stats([1, 5, 9000]).to_dict()
    assert set(d) == KEYS
    assert json.loads(json.dumps(d)) == d
    assert set(d["token_share_by_bucket"]) == set(BUCKET_NAMES)


@pytest.mark.parametrize(
    ("lengths", "message"),
    [
        ([], "non-empty 1-D"),
        ([[1, 2]], "non-empty 1-D"),
        ([3, 0, 2], r"lengths\[1\] = 0"),
        ([1.5, 2.0], "integer lengths"),
        ([-4, 2], r"lengths\[0\] = -4"),
    ],
)
def test_rejects_bad_input(lengths: list[float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        trace_stats(np.array(lengths))


def test_accepts_integral_floats() -> None:
    assert trace_stats(np.array([2.0, 4.0])).median == 3.0


def test_record_validation() -> None:
    good = trace_stats([1, 2, 3]).to_dict()
    with pytest.raises(ValueError, match="min <= median"):
        TraceStats(**{**good, "median": 10.0})
    with pytest.raises(ValueError, match="share_lt_8k=1.5 is not a fraction"):
        TraceStats(**{**good, "share_lt_8k": 1.5})
    with pytest.raises(ValueError, match="token_share_by_bucket needs keys"):
        TraceStats(**{**good, "token_share_by_bucket": {"0-8K": 1.0}})


def test_format_stats_table() -> None:
    text = format_stats(trace_stats([100] * 9 + [200_000]), "demo trace")
    lines = text.splitlines()
    assert lines[0] == "demo trace"
    assert any(line.split() == ["median", "100"] for line in lines)
    assert any(line.split() == ["share", ">", "128K", "10%"] for line in lines)
    assert any(line.split() == ["128K+", "10%", "99.6%"] for line in lines)  # 200000 / 200900 = 99.55 % of tokens


@given(st.lists(st.integers(1, 3_000_000), min_size=1, max_size=300))
def test_properties(lengths: list[int]) -> None:
    s = trace_stats(lengths)
    arr = np.asarray(lengths)
    assert s.median == pytest.approx(float(np.median(arr)))
    assert s.min <= s.median <= s.p90 <= s.p99 <= s.p999 <= s.max
    assert sum(s.share_by_bucket.values()) == pytest.approx(1.0)
    assert sum(s.token_share_by_bucket.values()) == pytest.approx(1.0)
    assert s.share_lt_8k == s.share_by_bucket["0-8K"]
    assert s.share_gt_128k <= s.share_by_bucket["128K+"]
    assert trace_stats(arr[::-1]) == s  # order does not matter
