"""NSP's prefix beam search compiled (numba): the whole search of :mod:`~nspsim.planners.nsp.beam` in
one kernel call, every expansion a plain loop over (state, node) pairs.

The numpy form (:func:`~nspsim.planners.nsp.beam.search_reference`, ~40 array calls per expansion on
arrays of a few hundred floats) stays as the reference; ``tests/planners/test_beam_kernel.py`` checks
the two equal bit for bit (loads, tokens, idle nodes, assignments) on random prefixes, with and
without the memory side, monotone and lookahead, widths 1-4. Profiled before, the expansions were
27-48% of a memory-bound Qwen3-235B batch's planning (about a thousand per batch, 150 us each); here an
expansion is a few microseconds.

Exactness: every value is formed with the numpy form's operations in its order (block maxima are
order-free; delta, new block maximum, score and added work are element-wise); the lookahead's row sum
of the per-GPU loads is numpy's pairwise summation (8 accumulators over blocks of at most 128, halves
rounded to multiples of 8 above, :func:`_beam_search` replays it with a small explicit stack); the
selection is the numpy form's order - score, added work, new block maximum, then flat (state, node)
index - keeping one of each run of candidates equal in all three keys, by insertion into a sorted list
of at most ``width`` entries. Trade-off: a second implementation to keep in step with the first (the
tests are the contract), and a compilation cached on disk (:func:`nspsim.planners.compiled.warm`).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache

import numpy as np

from nspsim.planners.nsp.beam import BoolArray, FloatArray, IntArray, NodeLayout, Prefix, Searched, node_layout
from nspsim.planners.packing import BUDGET_RTOL

_PW_BLOCK = 128  # numpy's PW_BLOCKSIZE


def _beam_search(  # noqa: C901, PLR0912, PLR0915 - one kernel, its loops kept together for numba
    lengths: IntArray,
    cost: FloatArray,
    latency: FloatArray,
    rest: FloatArray,
    attn: FloatArray,
    remat: FloatArray,
    free: float,
    track: bool,
    degree: IntArray,
    first: IntArray,
    level_of: IntArray,
    share: FloatArray,
    budget: int,
    min_level: int,
    top_level: int,
    width: int,
    monotone: bool,
    lookahead: bool,
    out_loads: FloatArray,
    out_tokens: FloatArray,
    out_idle: BoolArray,
    out_nodes: IntArray,
) -> int:
    """Run the search; write the final states into the ``out_*`` arrays (rows: states; ``out_nodes``
    (width, k): each state's node per prefix sample) and return their count, 0 when a sample fits no
    state."""
    k = lengths.size
    num_gpus = out_loads.shape[1]
    nodes = degree.size
    limit = budget * (1 + BUDGET_RTOL)
    loads = np.zeros((width, num_gpus))
    tokens = np.zeros((width, num_gpus))
    saved = np.zeros((width, num_gpus))
    idle = np.ones((width, nodes), dtype=np.bool_)
    last = np.full(width, top_level, dtype=np.int64)
    nxt_loads, nxt_tokens, nxt_saved = np.zeros_like(loads), np.zeros_like(tokens), np.zeros_like(saved)
    nxt_idle, nxt_last = np.ones_like(idle), np.zeros_like(last)
    parents = np.zeros((max(k, 1), width), dtype=np.int64)
    chosen = np.zeros((max(k, 1), width), dtype=np.int64)
    score = np.empty((width, nodes))
    added = np.empty((width, nodes))
    block = np.empty((width, nodes))
    delta = np.empty((width, nodes))
    kept = np.zeros((width, nodes), dtype=np.bool_)
    ok = np.zeros((width, nodes), dtype=np.bool_)
    pick = np.empty(width, dtype=np.int64)
    stack_lo = np.empty(64, dtype=np.int64)
    stack_n = np.empty(64, dtype=np.int64)
    stack_phase = np.empty(64, dtype=np.int64)
    values = np.empty(64)
    count = 1
    for i in range(k):
        length = lengths[i]
        every_fits = length <= min_level * budget
        for s in range(count):
            top = loads[s, 0]
            for p in range(1, num_gpus):
                if loads[s, p] > top:
                    top = loads[s, p]
            base = 0.0
            if lookahead:  # numpy's pairwise sum of loads[s]
                depth, nv = 1, 0
                stack_lo[0], stack_n[0], stack_phase[0] = 0, num_gpus, 0
                while depth > 0:
                    depth -= 1
                    lo, n, phase = stack_lo[depth], stack_n[depth], stack_phase[depth]
                    if phase == 1:
                        values[nv - 2] = values[nv - 2] + values[nv - 1]
                        nv -= 1
                    elif n < 8:
                        acc = -0.0
                        for q in range(n):
                            acc += loads[s, lo + q]
                        values[nv] = acc
                        nv += 1
                    elif n <= _PW_BLOCK:
                        r0, r1, r2, r3 = loads[s, lo], loads[s, lo + 1], loads[s, lo + 2], loads[s, lo + 3]
                        r4, r5, r6, r7 = loads[s, lo + 4], loads[s, lo + 5], loads[s, lo + 6], loads[s, lo + 7]
                        q = 8
                        while q < n - (n % 8):
                            r0 += loads[s, lo + q]
                            r1 += loads[s, lo + q + 1]
                            r2 += loads[s, lo + q + 2]
                            r3 += loads[s, lo + q + 3]
                            r4 += loads[s, lo + q + 4]
                            r5 += loads[s, lo + q + 5]
                            r6 += loads[s, lo + q + 6]
                            r7 += loads[s, lo + q + 7]
                            q += 8
                        acc = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
                        while q < n:
                            acc += loads[s, lo + q]
                            q += 1
                        values[nv] = acc
                        nv += 1
                    else:
                        half = n // 2
                        half -= half % 8
                        stack_lo[depth], stack_n[depth], stack_phase[depth] = lo, n, 1
                        stack_lo[depth + 1], stack_n[depth + 1], stack_phase[depth + 1] = lo + half, n - half, 0
                        stack_lo[depth + 2], stack_n[depth + 2], stack_phase[depth + 2] = lo, half, 0
                        depth += 3
                base = (values[0] + rest[i]) / num_gpus
            for u in range(nodes):
                d, f, lv = degree[u], first[u], level_of[u]
                bl, bt, bs = loads[s, f], tokens[s, f], saved[s, f]
                for p in range(f + 1, f + d):
                    bl = max(bl, loads[s, p])
                    bt = max(bt, tokens[s, p])
                    bs = max(bs, saved[s, p])
                dl = cost[i, lv] + latency[lv] if idle[s, u] else cost[i, lv]
                if track:
                    kept[s, u] = bs + attn[i, lv] <= free
                    dl += 0.0 if kept[s, u] else remat[i, lv]
                delta[s, u] = dl
                nb = bl + dl
                block[s, u] = nb
                sc = max(top, nb)
                add = dl * share[u]
                added[s, u] = add
                if lookahead:
                    sc = max(sc, add + base)
                score[s, u] = sc
                fine = every_fits or length <= d * budget
                if monotone and d > last[s]:
                    fine = False
                if bt + length / d > limit:
                    fine = False
                ok[s, u] = fine and sc < np.inf
        picked = 0  # insertion into the sorted list of the best distinct candidates
        for s in range(count):
            for u in range(nodes):
                if not ok[s, u]:
                    continue
                sc, add, nb = score[s, u], added[s, u], block[s, u]
                at, dup = picked, False
                for q in range(picked):
                    qs, qu = pick[q] // nodes, pick[q] % nodes
                    ks, ka, kb = score[qs, qu], added[qs, qu], block[qs, qu]
                    if sc == ks and add == ka and nb == kb:
                        dup = True
                        break
                    if sc < ks or (sc == ks and (add < ka or (add == ka and nb < kb))):
                        at = q
                        break
                if dup or at >= width:
                    continue
                end = min(picked, width - 1)
                for q in range(end, at, -1):
                    pick[q] = pick[q - 1]
                pick[at] = s * nodes + u
                picked = min(picked + 1, width)
        if picked == 0:
            return 0
        for j in range(picked):
            s, u = pick[j] // nodes, pick[j] % nodes
            d, f = degree[u], first[u]
            step_tokens = length / d
            kept_bytes = attn[i, level_of[u]] if track and kept[s, u] else 0.0
            for p in range(num_gpus):
                nxt_loads[j, p] = loads[s, p]
                nxt_tokens[j, p] = tokens[s, p]
                nxt_saved[j, p] = saved[s, p]
            for p in range(f, f + d):
                nxt_loads[j, p] += delta[s, u]
                nxt_tokens[j, p] += step_tokens
                if track:
                    nxt_saved[j, p] += kept_bytes
            for v in range(nodes):
                nxt_idle[j, v] = idle[s, v]
            nxt_idle[j, u] = False
            nxt_last[j] = d
            parents[i, j], chosen[i, j] = s, u
        loads, nxt_loads = nxt_loads, loads
        tokens, nxt_tokens = nxt_tokens, tokens
        saved, nxt_saved = nxt_saved, saved
        idle, nxt_idle = nxt_idle, idle
        last, nxt_last = nxt_last, last
        count = picked
    for s in range(count):
        out_loads[s, :] = loads[s, :]
        out_tokens[s, :] = tokens[s, :]
        out_idle[s, :] = idle[s, :]
        state = s
        for i in range(k - 1, -1, -1):
            out_nodes[s, i] = chosen[i, state]
            state = parents[i, state]
    return count


@cache
def beam_kernel() -> Callable[..., int]:
    """The compiled search, built on first use and cached on disk as the fill is
    (:func:`nspsim.planners.compiled.fill_kernel`)."""
    from numba import njit

    try:
        kernel: Callable[..., int] = njit(cache=True, nogil=True)(_beam_search)
    except RuntimeError:
        kernel = njit(nogil=True)(_beam_search)
    return kernel


def search_compiled(
    prefix: Prefix, layout: NodeLayout, budget: int, width: int, monotone: bool, lookahead: bool
) -> Searched | None:
    """:func:`~nspsim.planners.nsp.beam.search_reference` compiled: the final beam of placing the
    ``prefix`` samples in order, or ``None`` when one of them fits no state."""
    k, num_gpus = prefix.lengths.size, int(layout.ranks.size)
    loads, tokens = np.zeros((width, num_gpus)), np.zeros((width, num_gpus))
    idle = np.ones((width, layout.size), dtype=bool)
    nodes = np.zeros((width, k), dtype=np.int64)
    track = prefix.attn is not None and prefix.remat is not None
    empty = np.zeros((k, len(layout.levels)))
    c = np.ascontiguousarray
    count = beam_kernel()(
        c(prefix.lengths, dtype=np.int64),
        c(prefix.cost, dtype=np.float64),
        c(prefix.latency, dtype=np.float64),
        c(prefix.rest, dtype=np.float64),
        c(prefix.attn if prefix.attn is not None else empty, dtype=np.float64),
        c(prefix.remat if prefix.remat is not None else empty, dtype=np.float64),
        float(prefix.free),
        track,
        layout.degree,
        layout.first,
        layout.level_of,
        layout.share,
        int(budget),
        int(min(layout.levels)),
        int(max(layout.levels)),
        int(width),
        bool(monotone),
        bool(lookahead),
        loads,
        tokens,
        idle,
        nodes,
    )
    if count == 0:
        return None
    chosen = nodes[:count]
    return Searched(loads[:count], tokens[:count], idle[:count], layout.degree[chosen], layout.first[chosen])


@cache
def warm_search() -> None:
    """Compile (or load from the disk cache) the search once per process, before a planner's clock starts."""
    one = np.ones((1, 2))
    prefix = Prefix(np.ones(1, dtype=np.int64), one, np.zeros(2), np.zeros(1), one, one, 1.0)
    layout = node_layout(2, (2, 1))
    search_compiled(prefix, layout, 4, 2, False, True)
