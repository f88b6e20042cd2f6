"""The built-in traces, by name: ``wikipedia`` (real data, as a histogram) and three synthetic presets.

``wikipedia`` is the FlexSP artifact's Wikipedia trace, binned into the histogram shipped as
nspsim_traces/data/wikipedia_hist.json. ``longtail-paper``, ``code`` and ``commoncrawl`` are Burr XII traces
whose fitted constants are stored here, with the target figures they were fitted to (nspsim_traces/README.md
gives the reasons; tests/trace/test_trace.py re-fits them). Trade-off: shipping constants instead of fitting
at load time keeps loading instant and free of scipy, at the price of a test that checks they still fit.
"""

from __future__ import annotations

import importlib.resources
import json
from collections.abc import Callable, Mapping
from types import MappingProxyType

from nspsim.trace.base import LengthTrace
from nspsim.trace.histogram import HistogramTrace
from nspsim.trace.parametric import Burr12, ParametricTrace

_NSP_PAPER = "NSP paper (arXiv 2609.22755) section 3.1"
WIKIPEDIA_SOURCE = (
    "FlexSP artifact (ASPLOS'25): github.com/PKU-DAIR/Hetu-Galvatron, branch flexsp @ b4666892601f, "
    "galvatron/datasets/wikipedia.txt, Apache-2.0; binned as nspsim_traces/data/wikipedia_hist.json"
)

# Fitted constants: fit_burr12(median=..., share_lt_8k=..., share_gt_128k=..., max_length=2**21).
# nspsim_traces/README.md gives the figures and the reasons for them. test_trace.py re-fits the constants.
LONGTAIL_PAPER_TARGETS = {"median": 518, "share_lt_8k": 0.940, "share_gt_128k": 0.0012}
LONGTAIL_PAPER_FIT = Burr12(scale=2787.5480684606, c=0.67856566251675, k=2.5021684772748)
CODE_TARGETS = {"median": 1024, "share_lt_8k": 0.880, "share_gt_128k": 0.0030}
CODE_FIT = Burr12(scale=5761.5757379252, c=0.68240492006038, k=2.5841601102707)
COMMONCRAWL_TARGETS = {"median": 512, "share_lt_8k": 0.956, "share_gt_128k": 0.00055}
COMMONCRAWL_FIT = Burr12(scale=2299.1618140118, c=0.7446628417499, k=2.4513859378821)


def wikipedia_trace() -> HistogramTrace:
    """The real FlexSP Wikipedia trace, as a 149-bin histogram (nspsim_traces/data/wikipedia_hist.json).

    It has 8 log-spaced bins per octave and a fitted power law inside each bin. Built by
    nspsim_traces/build_wikipedia_hist.py from the artifact's 1,000,000 lengths (median 347, p99 10,919,
    98.4 % < 8K, 49 > 128K, max 1,823,777). ``materialize()`` matches the file's percentiles to <0.1 %.
    """
    resource = importlib.resources.files("nspsim_traces").joinpath("data/wikipedia_hist.json")
    return HistogramTrace.from_json_dict(
        json.loads(resource.read_text(encoding="utf-8")), where="nspsim_traces/data/wikipedia_hist.json"
    )


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


BUILTIN_TRACES: Mapping[str, Callable[[], LengthTrace]] = MappingProxyType(
    {
        "wikipedia": wikipedia_trace,
        "longtail-paper": longtail_paper_trace,
        "code": code_trace,
        "commoncrawl": commoncrawl_trace,
    }
)


def builtin_trace_names() -> tuple[str, ...]:
    """Names accepted by ``load_trace`` besides file paths, sorted."""
    return tuple(sorted(BUILTIN_TRACES))
