"""Sequence-length traces: the built-in traces, trace files, and sampling lengths from them (docs/DESIGN.md).

A trace is a distribution of sequence lengths in tokens (``base.LengthTrace``). There are three kinds:
``EmpiricalTrace`` (the lengths read from a file, ``empirical``), ``HistogramTrace`` (binned lengths
with a fitted power law inside each bin, ``histogram``) and ``ParametricTrace`` (a mixture of truncated
continuous distributions, ``parametric``). ``sample`` draws i.i.d. lengths; ``materialize`` draws a
stratified, low-noise sample (``base``). ``load_trace`` (``loading``) resolves a built-in name
(``builtins``) or reads a file (``readers``, with ``encoding`` for byte-order marks). ``batching``
packs lengths into batches and ``stats`` summarises them.

This module re-exports the public names, so callers import them from ``nspsim.trace``.
"""

from __future__ import annotations

from nspsim.trace.base import (
    DEFAULT_MATERIALIZE,
    FloatArray,
    IntArray,
    LengthTrace,
    allocate_largest_remainder,
)
from nspsim.trace.builtins import (
    BUILTIN_TRACES,
    CODE_FIT,
    CODE_TARGETS,
    COMMONCRAWL_FIT,
    COMMONCRAWL_TARGETS,
    LONGTAIL_PAPER_FIT,
    LONGTAIL_PAPER_TARGETS,
    WIKIPEDIA_SOURCE,
    builtin_trace_names,
    code_trace,
    commoncrawl_trace,
    longtail_paper_trace,
    wikipedia_trace,
)
from nspsim.trace.empirical import EmpiricalTrace
from nspsim.trace.histogram import (
    ALPHA_LIMIT,
    HISTOGRAM_FORMAT,
    HistogramTrace,
    fit_histogram,
    log_bin_edges,
    powerlaw_cdf,
    powerlaw_quantile,
)
from nspsim.trace.loading import load_trace
from nspsim.trace.parametric import (
    DEFAULT_MAX_LENGTH,
    Burr12,
    LengthDistribution,
    LogNormal,
    ParametricTrace,
    fit_burr12,
)

__all__ = [
    "ALPHA_LIMIT",
    "BUILTIN_TRACES",
    "CODE_FIT",
    "CODE_TARGETS",
    "COMMONCRAWL_FIT",
    "COMMONCRAWL_TARGETS",
    "DEFAULT_MATERIALIZE",
    "DEFAULT_MAX_LENGTH",
    "HISTOGRAM_FORMAT",
    "LONGTAIL_PAPER_FIT",
    "LONGTAIL_PAPER_TARGETS",
    "WIKIPEDIA_SOURCE",
    "Burr12",
    "EmpiricalTrace",
    "FloatArray",
    "HistogramTrace",
    "IntArray",
    "LengthDistribution",
    "LengthTrace",
    "LogNormal",
    "ParametricTrace",
    "allocate_largest_remainder",
    "builtin_trace_names",
    "code_trace",
    "commoncrawl_trace",
    "fit_burr12",
    "fit_histogram",
    "load_trace",
    "log_bin_edges",
    "longtail_paper_trace",
    "powerlaw_cdf",
    "powerlaw_quantile",
    "wikipedia_trace",
]
