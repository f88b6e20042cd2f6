"""A floor under every assignment of a gradient-accumulation window: however the window's samples are
assigned to its W passes, split into micro-batches and placed, the passes' summed step estimates (hence
their recompute-aware estimates, the rung a window candidate is scored by) are at least
:func:`window_floor`. It depends on the window's samples only, not on the assignment, so a per-step
plan whose estimate is within x of it leaves at most x for any window assignment to gain (by estimate).

Proof. Take any plan of the window: passes k = 1..W, each a list of micro-batches, m micro-batches in
all. Each micro-batch j's step estimate is at least :func:`~nspsim.planners.estimate.stage_step` of its
mean stages f_j = (1/P) sum over its samples of min_d d fwd_s(d) + min(0, intercept_fwd), likewise b_j
(:func:`~nspsim.planners.estimate.micro_batch_floor`'s proof), where d ranges over the tree's degrees
that hold the sample within the token budget: a plan keeps every GPU at most B_tok (1 + slack) tokens
(:class:`~nspsim.plan.Plan` validates it), and a sample on a node of degree d puts L / d on each of its
GPUs. So the window's estimate is at least

    sum_j [max(f_j, G) + max(b_j, R) + O] >= max(F + m i_f, m G) + max(B + m i_b, m R) + m O = g(m),

(sum_j max(f_j, G) >= max(sum_j f_j, m G)), with F, B the window's cheapest feasible forward and
backward work over P, i_f, i_b = min(0, intercept), G and R the forward and backward FSDP floors and O
the fixed cost per micro-batch. m is unknown but bounded: every pass has a micro-batch (m >= W), a
micro-batch holds at most P B_tok (1 + slack) tokens (m >= ceil(T / (P B_tok (1 + slack)))), and every
micro-batch holds a sample (m <= N). g is convex (a sum of maxima of affine functions), so the floor is
min g(m) over that range, found by evaluating it at every m (N is a few thousand at most).

Trade-off: the floor pools the whole window's work, so it ignores packing integrality, the longest
sample's own cost, recomputation and what the simulator adds (overlap, stragglers); a plan far above it
may not have that much to gain, but a plan near it certainly has little. It bounds estimates, not
simulated times: the simulator is not proved above the ladder, so a study reports the two side by side.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from nspsim.planners.estimate import step_floors
from nspsim.planners.proxy import CostTable
from nspsim.trace.batching import Batch
from nspsim.workload import Workload

TOKEN_SLACK = 1e-9
"""The relative slack :class:`~nspsim.plan.Plan` allows over B_tok on a GPU (``_BUDGET_SLACK`` there): a
degree holds a sample when L / d <= B_tok (1 + slack)."""


@dataclass(frozen=True, kw_only=True)
class WindowFloor:
    """The floor of a window (module docstring) and the terms it is made of, in seconds."""

    floor_s: float
    micro_batches: int  # the m that attains the floor
    min_micro_batches: int  # max(W, ceil(T / (P B_tok (1 + slack))))
    work_fwd_s: float  # F: the cheapest feasible forward work over P
    work_bwd_s: float  # B: likewise backward


def feasible_cheapest_work(table: CostTable) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Per sorted sample, min over the tree's degrees d that hold it within the table's token budget of
    d x its forward cost and d x its backward cost (:meth:`CostTable.cheapest_work` restricted to
    memory-feasible degrees; ``inf`` for a sample no degree holds)."""
    levels = sorted(table.tree.degrees)
    fwd = np.full((len(levels), table.num_samples), np.inf)
    bwd = np.full((len(levels), table.num_samples), np.inf)
    lengths = table.lengths.astype(np.float64)
    for row, d in enumerate(levels):
        holds = lengths / d <= table.token_budget * (1 + TOKEN_SLACK)
        f, b = table.sample_costs(d)
        fwd[row, holds], bwd[row, holds] = d * f[holds], d * b[holds]
    return fwd.min(axis=0), bwd.min(axis=0)


def window_floor(workload: Workload, batches: Sequence[Batch]) -> WindowFloor:
    """The floor of the window of ``batches`` on ``workload`` (module docstring); ``ValueError`` for an
    empty window or a sample no degree holds."""
    if not batches:
        raise ValueError("a window needs at least one batch")
    lengths = np.concatenate([b.lengths_array() for b in batches])
    table = CostTable(workload.cost, workload.tree, lengths, workload.token_budget)
    fwd, bwd = feasible_cheapest_work(table)
    if not (np.isfinite(fwd).all() and np.isfinite(bwd).all()):
        raise ValueError(
            f"a sample of {int(lengths.max()):,} tokens fits no SP degree of the tree under "
            f"B_tok={workload.token_budget:,}: the window has no plan, hence no floor"
        )
    p = workload.tree.num_gpus
    per_micro_batch = p * workload.token_budget * (1 + TOKEN_SLACK)
    least = max(len(batches), int(np.ceil(float(lengths.sum()) / per_micro_batch)))
    m = np.arange(least, max(least, lengths.size) + 1, dtype=np.float64)
    gather, bwd_comm, overhead = step_floors(workload.cost)
    i_fwd, i_bwd = (min(0.0, i) for i in table.intercept)
    work_fwd, work_bwd = float(fwd.sum()) / p, float(bwd.sum()) / p
    g = np.maximum(work_fwd + m * i_fwd, m * gather) + np.maximum(work_bwd + m * i_bwd, m * bwd_comm) + m * overhead
    best = int(np.argmin(g))
    return WindowFloor(
        floor_s=float(g[best]),
        micro_batches=int(m[best]),
        min_micro_batches=least,
        work_fwd_s=work_fwd,
        work_bwd_s=work_bwd,
    )
