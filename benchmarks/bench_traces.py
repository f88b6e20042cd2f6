"""Trace throughput (pytest-benchmark; never asserts times): 10M i.i.d. draws from the built-in
``wikipedia`` histogram and loading a 1M-line text trace."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from nspsim.trace import load_trace

pytestmark = pytest.mark.benchmark


def test_sample_ten_million_wikipedia(benchmark: Any) -> None:
    wiki = load_trace("wikipedia")
    draws = benchmark(lambda: wiki.sample(10_000_000, np.random.default_rng(0)))
    assert draws.size == 10_000_000


def test_load_one_million_line_text_trace(benchmark: Any, tmp_path: Path) -> None:
    path = tmp_path / "big.txt"
    path.write_text("\n".join(map(str, np.random.default_rng(0).integers(1, 2_000_000, 1_000_000).tolist())))
    trace = benchmark(lambda: load_trace(str(path)))
    assert trace.materialize().size == 1_000_000
