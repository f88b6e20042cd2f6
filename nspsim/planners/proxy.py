"""Planner-side arithmetic on the routing proxy (docs/simulator.md, NSP paper 4.1.2), vectorised per batch.

A planner scores thousands of candidate placements, so it cannot call the cost model per candidate.
:class:`CostTable` asks the :class:`~nspsim.cost.interface.CostModel` once per (distinct length, degree)
and keeps, for each sample j and admissible degree d, what the sample adds to *every* GPU of its
group, separately for the forward and backward pass:

    fwd_j(d) = layers * (attn_fwd_j(d) + O_fwd'(L_j / d)),  likewise bwd_j(d),

plus, per active node, the collective latency ``layers * node_overhead(d)``. ``O'`` is the
non-attention time per sharded token: the planners assume the cost model's non-attention time of a GPU
is affine in its token count (slope plus an intercept paid by every GPU that holds tokens), which is
exact for the analytic model (GEMMs are linear; the expert-parallel all-to-all is latency plus
bytes). :func:`fit_non_attention` checks the assumption at three points and refuses a cost model that
violates it, so the per-GPU sums below equal the direct per-GPU reference
(``tests/support/reference_load.py``) exactly (tested).

Two proxies exist: ``"full"`` (the paper's cost model) and ``"attn-fwd"`` (the "w/o cost model"
ablation: attention forward only, no backward, no non-attention work). Trade-off: tables cost one
cost-model call per degree, after which every score is array arithmetic.

Scoring a placement (:meth:`CostTable.evaluate`) is one compiled call over the per-degree tables
(:mod:`nspsim.planners.proxy_kernel`; the numpy form stays as :meth:`CostTable.evaluate_reference`).
The recompute pass of a node (:meth:`CostTable.recompute_pass`, for the recompute-aware estimate)
comes from the cost model's per-sample parts where it has them
(:meth:`~nspsim.cost.analytic.AnalyticCostModel.recompute_sample_parts`: Ulysses and degree-1 nodes
are numpy sums of element-wise parts, so a gather and two sums give the cost model's float), else
from ``recompute_attention`` per node; both memoised per table.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from nspsim.cost.interface import CostModel
from nspsim.planners.proxy_kernel import evaluate_kernel
from nspsim.sp_tree import SPTree

PROXIES = ("full", "attn-fwd")
FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
_AFFINE_RTOL = 1e-6


@dataclass(frozen=True)
class NonAttentionFit:
    """Per-layer non-attention time of a GPU with t > 0 tokens: ``intercept + slope * t`` (fwd, bwd)."""

    fwd_slope: float
    bwd_slope: float
    fwd_intercept: float
    bwd_intercept: float


def fit_non_attention(cost: CostModel, scale: float) -> NonAttentionFit:
    """Fit the affine non-attention model from three probes up to ``scale`` tokens.

    Raises ``ValueError`` when the cost model's non-attention time is not affine in the tokens.
    """
    probes = [cost.non_attention(t) for t in (1.0, scale / 2 + 1.0, scale + 1.0)]
    fits = []
    for part in ("fwd", "bwd"):
        y0, y1, y2 = (float(getattr(p, part)) for p in probes)
        slope = (y2 - y0) / scale
        predicted = y0 + slope * (scale / 2)
        if abs(predicted - y1) > _AFFINE_RTOL * max(abs(y1), 1e-30):
            raise ValueError(
                "the planners need a cost model whose non-attention time is affine in the token count; "
                f"{type(cost).__name__}.non_attention is not ({part}: {y1:.6g} vs affine {predicted:.6g})"
            )
        fits.append((slope, y0 - slope))
    (fs, fi), (bs, bi) = fits
    return NonAttentionFit(fwd_slope=fs, bwd_slope=bs, fwd_intercept=fi, bwd_intercept=bi)


@dataclass(frozen=True)
class ProxyLoad:
    """Per-GPU forward and backward stage times (seconds) of one micro-batch under a proxy."""

    d_fwd: FloatArray
    d_bwd: FloatArray
    tokens: FloatArray

    @property
    def per_gpu(self) -> FloatArray:
        """C_p = D_p^fwd + D_p^bwd."""
        return self.d_fwd + self.d_bwd

    @property
    def load(self) -> float:
        """Load = max_p D_p^fwd + max_p D_p^bwd."""
        return float(self.d_fwd.max() + self.d_bwd.max())


@runtime_checkable
class AdditiveRecompute(Protocol):
    """A cost model whose recompute pass is a numpy sum of per-sample parts
    (:meth:`~nspsim.cost.analytic.AnalyticCostModel.recompute_sample_parts`, which may still answer
    ``None`` for a degree)."""

    def recompute_sample_parts(self, lengths: np.ndarray, degree: int) -> tuple[np.ndarray, np.ndarray, float] | None:
        """Per-sample (prologue, compute) and the prologue latency of the recompute pass, or ``None``."""
        ...


def _distinct_sorted(values: IntArray) -> tuple[IntArray, IntArray]:
    """Distinct values of a sorted array and each element's index among them (what ``np.unique``
    returns, in the array's order, without sorting again)."""
    if values.size == 0:
        return values.copy(), np.zeros(0, dtype=np.int64)
    starts = np.empty(values.size, dtype=bool)
    starts[0] = True
    np.not_equal(values[1:], values[:-1], out=starts[1:])
    inverse: IntArray = np.cumsum(starts) - 1
    return values[starts], inverse


class CostTable:
    """Per-sample, per-degree proxy costs of one batch, samples sorted by non-increasing length.

    ``order[i]`` is the batch index of sorted sample ``i``; every array here is in sorted order.
    """

    def __init__(
        self, cost: CostModel, tree: SPTree, lengths: npt.ArrayLike, token_budget: int, kind: str = "full"
    ) -> None:
        if kind not in PROXIES:
            raise ValueError(f"unknown proxy {kind!r} (known: {', '.join(PROXIES)})")
        raw = np.asarray(lengths, dtype=np.int64)
        self.kind = kind
        self.tree = tree
        self.token_budget = int(token_budget)
        self.order: IntArray = np.argsort(-raw, kind="stable").astype(np.int64)
        self.lengths: IntArray = raw[self.order]
        self.layers = cost.num_layers
        self._cost = cost
        self.fit = fit_non_attention(cost, float(max(token_budget, 2)))
        self._intercept = (
            (0.0, 0.0)
            if kind == "attn-fwd"
            else (self.layers * self.fit.fwd_intercept, self.layers * self.fit.bwd_intercept)
        )
        self._distinct, self._inverse = _distinct_sorted(self.lengths)
        self._descending = -self._distinct  # ascending, for searchsorted
        self._tables: dict[int, tuple[FloatArray, FloatArray]] = {}
        self._totals: dict[int, FloatArray] = {}
        self._recompute: dict[tuple[int, str, bytes], float] = {}
        self._recompute_parts: dict[int, tuple[FloatArray, FloatArray, float] | None] = {}
        self._recompute_singles: dict[int, FloatArray] = {}
        self._stacked: dict[str, tuple[IntArray, IntArray, FloatArray, FloatArray, FloatArray, FloatArray]] = {}
        self._overheads: dict[int, tuple[float, float]] = {}
        self._cheapest: dict[str, tuple[FloatArray, FloatArray]] = {}
        self._recompute_rows: dict[str, tuple[FloatArray, FloatArray, FloatArray, FloatArray] | None] = {}
        self._attention_fwd: dict[int, FloatArray] = {}

    @property
    def num_samples(self) -> int:
        """Number of samples in the batch."""
        return int(self.lengths.size)

    def with_budget(self, token_budget: int) -> CostTable:
        """The same table routed under another per-GPU token budget (the cost caches are shared: no
        cost depends on the budget, and the non-attention fit is affine)."""
        other = copy.copy(self)
        other.token_budget = int(token_budget)
        return other

    def sample_costs(self, degree: int) -> tuple[FloatArray, FloatArray]:
        """(fwd, bwd) seconds each sorted sample adds to every GPU of a node of ``degree``."""
        if degree not in self._tables:
            self._tables[degree] = self._compute(degree)
        return self._tables[degree]

    def total(self, degree: int) -> FloatArray:
        """fwd + bwd per sorted sample at ``degree``: its contribution to C_p (cached, read-only)."""
        if degree not in self._totals:
            fwd, bwd = self.sample_costs(degree)
            total = fwd + bwd
            total.flags.writeable = False
            self._totals[degree] = total
        return self._totals[degree]

    def _compute(self, degree: int) -> tuple[FloatArray, FloatArray]:
        att = self._cost.attention_sample_costs(self._distinct, degree)
        layers = self.layers
        if self.kind == "attn-fwd":
            fwd = layers * np.asarray(att.fwd, dtype=np.float64)
            return fwd[self._inverse], np.zeros(self.num_samples)
        per_gpu_tokens = self._distinct / degree
        fwd = layers * (np.asarray(att.fwd, dtype=np.float64) + self.fit.fwd_slope * per_gpu_tokens)
        bwd = layers * (np.asarray(att.bwd, dtype=np.float64) + self.fit.bwd_slope * per_gpu_tokens)
        return fwd[self._inverse], bwd[self._inverse]

    def attention_fwd(self, degree: int) -> FloatArray:
        """Forward attention seconds of each sorted sample at ``degree``, one layer: the cost model's
        per-sample costs (element-wise, computed once per distinct length; cached, read-only)."""
        if degree not in self._attention_fwd:
            fwd = np.asarray(self._cost.attention_sample_costs(self._distinct, degree).fwd, dtype=np.float64)
            out = fwd[self._inverse]
            out.flags.writeable = False
            self._attention_fwd[degree] = out
        return self._attention_fwd[degree]

    def recompute_pass(self, lengths: npt.NDArray[np.generic], degree: int) -> float:
        """Seconds each GPU of a node of ``degree`` spends recomputing the attention of ``lengths``
        (in that order), all layers: the cost model's ``recompute_attention`` prologue and compute,
        memoised per table (shared by :meth:`with_budget` copies) on the exact array, its dtype
        included, so a repeated node costs a dictionary look-up and the same float."""
        key = (degree, lengths.dtype.str, lengths.tobytes())
        value = self._recompute.get(key)
        if value is None:
            value = self._recompute[key] = self._recompute_pass(lengths, degree)
        return value

    def _recompute_pass(self, lengths: npt.NDArray[np.generic], degree: int) -> float:
        """:meth:`recompute_pass` unmemoised: from the cost model's per-sample parts over the batch's
        distinct lengths when it has them and ``lengths`` are the batch's (a gather and two numpy sums
        of the same elements in the same order: the same float), else the cost model asked."""
        parts = self._parts(degree)
        if parts is not None and lengths.size and self._distinct.size:
            at = np.minimum(np.searchsorted(self._descending, np.negative(lengths)), self._distinct.size - 1)
            if np.array_equal(self._distinct[at], lengths):
                pro, comp, latency = parts
                return self._cost.num_layers * ((float(pro[at].sum()) + latency) + float(comp[at].sum()))
        redo = self._cost.recompute_attention(lengths, degree)
        return self._cost.num_layers * (redo.prologue + redo.compute)

    def _parts(self, degree: int) -> tuple[FloatArray, FloatArray, float] | None:
        """The cost model's per-sample recompute parts at ``degree`` over the distinct lengths (cached)."""
        if degree not in self._recompute_parts:
            cost = self._cost
            parts = cost.recompute_sample_parts(self._distinct, degree) if isinstance(cost, AdditiveRecompute) else None
            self._recompute_parts[degree] = parts
        return self._recompute_parts[degree]

    def recompute_rows(self) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray] | None:
        """Per tree degree (the rows of the compiled evaluation's tables, :meth:`level_rows`): each
        sorted sample's recompute prologue and compute parts, the degree's prologue latency, and each
        sample's forward attention (:meth:`attention_fwd`); ``None`` when a degree has no parts (built
        once per batch)."""
        if "levels" not in self._recompute_rows:
            levels = self.level_degrees.tolist()
            parts = [self._parts(d) for d in levels]
            rows = None
            if all(p is not None for p in parts):
                pro = np.stack([p[0][self._inverse] for p in parts if p is not None])
                comp = np.stack([p[1][self._inverse] for p in parts if p is not None])
                latency = np.array([p[2] for p in parts if p is not None], dtype=np.float64)
                rows = pro, comp, latency, np.stack([self.attention_fwd(d) for d in levels])
            self._recompute_rows["levels"] = rows
        return self._recompute_rows["levels"]

    def cheapest_work(self) -> tuple[FloatArray, FloatArray]:
        """Per sorted sample, min over the tree's degrees d of d x its forward cost and of d x its
        backward cost: the least it adds to the GPUs' summed stage times (built once per batch)."""
        if "cheapest" not in self._cheapest:
            _, levels, fwd, bwd, _, _ = self._kernel_tables()
            scale = levels.astype(np.float64)[:, None]
            self._cheapest["cheapest"] = ((scale * fwd).min(axis=0), (scale * bwd).min(axis=0))
        return self._cheapest["cheapest"]

    @property
    def level_degrees(self) -> IntArray:
        """The tree's degrees, ascending: the rows of the per-degree tables."""
        return self._kernel_tables()[1]

    def level_rows(self, degrees: IntArray) -> IntArray | None:
        """The row of each of ``degrees`` in the per-degree tables, or ``None`` if one is not a tree degree."""
        row_of = self._kernel_tables()[0]
        if degrees.size and (int(degrees.min()) < 1 or int(degrees.max()) >= row_of.size):
            return None
        rows = row_of[degrees]
        return None if rows.size and int(rows.min()) < 0 else rows

    def recompute_singles(self, degree: int) -> FloatArray:
        """:meth:`recompute_pass` of each sorted sample alone at ``degree`` (cached, read-only; equal to
        the one-sample calls: a one-element sum is its element)."""
        if degree not in self._recompute_singles:
            parts = self._parts(degree)
            if parts is None:
                one = [self.recompute_pass(self._distinct[i : i + 1], degree) for i in range(self._distinct.size)]
                each = np.array(one)
            else:
                pro, comp, latency = parts
                each = self._cost.num_layers * ((pro + latency) + comp)
            out = np.asarray(each, dtype=np.float64)[self._inverse]
            out.flags.writeable = False
            self._recompute_singles[degree] = out
        return self._recompute_singles[degree]

    def overhead(self, degree: int) -> tuple[float, float]:
        """(fwd, bwd) latency every GPU of an active node of ``degree`` pays, all layers (cached)."""
        if degree not in self._overheads:
            fwd, bwd = self._cost.node_overhead(degree)
            self._overheads[degree] = (self.layers * fwd, 0.0 if self.kind == "attn-fwd" else self.layers * bwd)
        return self._overheads[degree]

    def overhead_total(self, degree: int) -> float:
        """fwd + bwd node latency per GPU (what activating a node adds to C_p)."""
        fwd, bwd = self.overhead(degree)
        return fwd + bwd

    @property
    def intercept(self) -> tuple[float, float]:
        """(fwd, bwd) non-attention time every GPU holding tokens pays regardless of their number."""
        return self._intercept

    def min_degree(self, levels: tuple[int, ...]) -> IntArray:
        """Per sorted sample, the smallest degree in ``levels`` whose shard fits B_tok (0: none fits)."""
        out = np.zeros(self.num_samples, dtype=np.int64)
        for deg in sorted(levels, reverse=True):
            out[self.lengths <= deg * self.token_budget] = deg
        return out

    def evaluate(self, degrees: IntArray, firsts: IntArray, mask: npt.NDArray[np.bool_] | None = None) -> ProxyLoad:
        """Per-GPU stage times of the sorted samples placed on ``(degrees, firsts)`` (optionally a
        subset): one compiled call (:mod:`nspsim.planners.proxy_kernel`, equal to
        :meth:`evaluate_reference` bit for bit)."""
        gpus = self.tree.num_gpus
        sel = np.ones(self.num_samples, dtype=bool) if mask is None else np.ascontiguousarray(mask, dtype=bool)
        out = np.zeros(gpus), np.zeros(gpus), np.zeros(gpus)
        c = np.ascontiguousarray
        ints = c(degrees, dtype=np.int64), c(firsts, dtype=np.int64)
        if evaluate_kernel()(*ints, sel, self.lengths, *self._kernel_tables(), *out):
            return ProxyLoad(d_fwd=out[0], d_bwd=out[1], tokens=out[2])
        return self.evaluate_reference(degrees, firsts, mask)

    def _kernel_tables(self) -> tuple[IntArray, IntArray, FloatArray, FloatArray, FloatArray, FloatArray]:
        """The compiled evaluation's tables over the tree's degrees (built once per batch, shared by
        :meth:`with_budget` copies): row of each degree, the degrees, per-sample fwd and bwd costs,
        node latencies and the intercept."""
        if "levels" not in self._stacked:
            levels = sorted(self.tree.degrees)
            row_of = np.full(max(levels) + 1, -1, dtype=np.int64)
            row_of[levels] = np.arange(len(levels))
            fwd = np.stack([self.sample_costs(d)[0] for d in levels])
            bwd = np.stack([self.sample_costs(d)[1] for d in levels])
            overhead = np.array([self.overhead(d) for d in levels], dtype=np.float64)
            intercept = np.array(self.intercept, dtype=np.float64)
            self._stacked["levels"] = (row_of, np.array(levels, dtype=np.int64), fwd, bwd, overhead, intercept)
        return self._stacked["levels"]

    def evaluate_reference(
        self, degrees: IntArray, firsts: IntArray, mask: npt.NDArray[np.bool_] | None = None
    ) -> ProxyLoad:
        """:meth:`evaluate` in numpy (the reference the compiled form is tested against, and its
        fallback for degrees outside the tree)."""
        tree = self.tree
        sel = np.ones(self.num_samples, dtype=bool) if mask is None else mask
        d_fwd = np.zeros(tree.num_gpus)
        d_bwd = np.zeros(tree.num_gpus)
        tokens = np.zeros(tree.num_gpus)
        for deg in np.unique(degrees[sel]):
            d = int(deg)
            at = sel & (degrees == deg)
            blocks = firsts[at] // d
            nb = tree.num_gpus // d
            fwd, bwd = self.sample_costs(d)
            ofwd, obwd = self.overhead(d)
            active = np.bincount(blocks, minlength=nb) > 0
            d_fwd += np.repeat(np.bincount(blocks, weights=fwd[at], minlength=nb) + active * ofwd, d)
            d_bwd += np.repeat(np.bincount(blocks, weights=bwd[at], minlength=nb) + active * obwd, d)
            tokens += np.repeat(np.bincount(blocks, weights=self.lengths[at] / d, minlength=nb), d)
        held = tokens > 0
        ifwd, ibwd = self.intercept
        return ProxyLoad(d_fwd=d_fwd + held * ifwd, d_bwd=d_bwd + held * ibwd, tokens=tokens)

    def load(self, degrees: IntArray, firsts: IntArray, micro_batches: IntArray | None = None) -> float:
        """Proxy Load of a placement; micro-batch Loads summed when ``micro_batches`` is given."""
        if micro_batches is None:
            return self.evaluate(degrees, firsts).load
        return sum(
            self.evaluate(degrees, firsts, micro_batches == mb).load for mb in range(int(micro_batches.max()) + 1)
        )
