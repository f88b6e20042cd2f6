"""A routed placement becomes a validated :class:`~nspsim.plan.Plan`: :func:`finish` maps it back to
batch order, derives the issue order of every micro-batch (roots first, then by rank), evaluates the
estimate ladder on it (:mod:`nspsim.planners.estimate`) and builds the Plan through
:func:`nspsim.plan.make_plan`. Every planner ends here, so every plan carries the same metadata.
"""

from __future__ import annotations

import numpy as np

from nspsim.plan import Plan, make_plan
from nspsim.planners.base import Context, IntArray, Metadata, Placement, Stopwatch
from nspsim.planners.estimate import estimates
from nspsim.sp_tree import Node
from nspsim.specs.training import training_label


def _nodes_and_orders(degrees: IntArray, firsts: IntArray, mbs: IntArray) -> tuple[list[Node], list[list[Node]]]:
    """Node of every sample (one shared object per distinct node) and the active nodes of every
    micro-batch, roots first then by rank; vectorised through integer keys."""
    width = int(firsts.max()) + int(degrees.max()) + 1
    node_key = degrees * width + firsts
    distinct, inverse = np.unique(node_key, return_inverse=True)
    objects = [Node(int(k // width), int(k % width) // int(k // width)) for k in distinct.tolist()]
    nodes = [objects[i] for i in inverse.tolist()]
    top = int(degrees.max()) + 1
    order_key = (mbs * top + (top - degrees)) * width + firsts  # micro-batch, larger degree first, rank
    orders: list[list[Node]] = [[] for _ in range(int(mbs.max()) + 1)]
    for key in np.unique(order_key).tolist():
        mb, rest = divmod(key, top * width)
        degree, first = top - rest // width, rest % width
        orders[mb].append(Node(degree, first // degree))
    return nodes, orders


def finish(
    name: str,
    ctx: Context,
    placement: Placement,
    started: Stopwatch,
    extra: Metadata | None = None,
    *,
    chosen_by: str,
) -> Plan:
    """Validated Plan (batch order) with metadata: timing, the :class:`~nspsim.plan.estimates.Estimates`
    (lower bound, Load, step estimate, and ``chosen_by``, the rung that chose the placement, with its
    value: the placement's ``chosen_s`` when the planner has it, else evaluated), and what
    ``max_context`` dropped from the batch (``dropped_samples``, ``dropped_tokens``; metadata is outside
    the content hash, so plans hash as before)."""
    elapsed, cpu = started.elapsed()
    table = ctx.table
    metadata: dict[str, float | int | str] = {
        "planning_time_s": elapsed,
        "planning_cpu_s": cpu,
        **estimates(ctx, placement, chosen_by, placement.chosen_s).to_metadata(),
        "micro_batches": placement.num_micro_batches,
        "dropped_samples": ctx.batch.dropped_samples,
        "dropped_tokens": ctx.batch.dropped_tokens,
        "training": training_label(ctx.workload.training),
    }
    if ctx.budget != ctx.workload.token_budget:
        metadata["effective_token_budget"] = ctx.budget
    metadata.update(placement.metadata)
    metadata.update(extra or {})
    inverse = np.empty_like(table.order)
    inverse[table.order] = np.arange(table.order.size)
    deg, first, mbs = (a[inverse] for a in (placement.degrees, placement.firsts, placement.micro_batches))
    nodes, orders = _nodes_and_orders(deg, first, mbs)
    return make_plan(
        planner=name,
        cluster=ctx.workload.cluster,
        model=ctx.workload.model,
        batch=ctx.batch,
        spmax=ctx.workload.tree.spmax,
        token_budget=ctx.workload.token_budget,
        nodes=nodes,
        micro_batches=mbs.tolist(),
        backend=ctx.workload.config.backend,
        issue_order=orders,
        metadata=metadata,
        profile=ctx.workload.profile_ref,
        cluster_file=ctx.workload.cluster_file,
    )
