"""What a plan asks of the hardware: uncontended phase times per tree node, GPU and micro-batch.

Everything here comes from the :class:`~nspsim.cost_model.CostModel` interface, once per step:
per active node the attention phases (forward, backward and, for its recompute-marked samples, the
recomputed forward), per GPU the non-attention work for its sharded tokens and the output head, and
once the FSDP collectives, the layout-change all-to-all and the optimizer step. The step model
(:mod:`nspsim.simulator.step_model`) replays these numbers layer by layer; identical decoder layers
reuse them.

Layout change (SPEC section 5): plans whose samples do not all share one SP degree repartition the
batch from the conventional fixed-SP layout with one world all-to-all before the layers and one
after (mirrored in backward). We assume a uniform scatter: each GPU sends (P-1)/P of its hidden
states. Static SP plans are already in the conventional layout and pay nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from nspsim.cost_model import CostModel, FsdpCost, NonAttentionCost, Phases
from nspsim.model_spec import ModelSpec
from nspsim.plan import Plan
from nspsim.sp_tree import Node
from nspsim.training_spec import TrainingSpec

T = TypeVar("T")


@dataclass(frozen=True)
class NodeWork:
    """One active tree node of a micro-batch: per-GPU phase times of one layer."""

    node: Node
    fwd: Phases
    bwd: Phases
    remat: Phases | None


@dataclass(frozen=True)
class MicroBatchWork:
    """Per-layer work of one micro-batch. ``chains[g]`` indexes ``nodes`` (issue order) for GPU g."""

    nodes: tuple[NodeWork, ...]
    chains: tuple[tuple[int, ...], ...]
    non_attn: tuple[NonAttentionCost, ...]
    head: tuple[tuple[float, float], ...]
    layout_s: float


@dataclass(frozen=True)
class StepWork:
    """Everything the step model needs, in seconds (uncontended)."""

    num_gpus: int
    num_layers: int
    expert_parallel: int
    micro_batches: tuple[MicroBatchWork, ...]
    fsdp: FsdpCost
    optimizer_s: float


def step_work(plan: Plan, cost: CostModel, model: ModelSpec, training: TrainingSpec,
              remat: np.ndarray) -> StepWork:
    """Phase times of every micro-batch of ``plan``; ``remat[j]`` marks samples recomputed in backward."""
    layout = not _uniform_degree(plan)
    mbs = tuple(_micro_batch_work(plan, cost, model, training, mb, remat, layout)
                for mb in range(plan.num_micro_batches))
    return StepWork(num_gpus=plan.cluster.num_gpus, num_layers=cost.num_layers,
                    expert_parallel=training.expert_parallel, micro_batches=mbs, fsdp=cost.fsdp(),
                    optimizer_s=cost.optimizer_time())


def _uniform_degree(plan: Plan) -> bool:
    return len({node.degree for node in plan.nodes}) == 1


def _micro_batch_work(plan: Plan, cost: CostModel, model: ModelSpec, training: TrainingSpec, mb: int,
                      remat: np.ndarray, layout: bool) -> MicroBatchWork:
    lengths = np.asarray(plan.lengths, dtype=np.int64)
    mask = plan.sample_mask(mb)
    order = plan.issue_order[mb]
    members: dict[Node, list[int]] = {node: [] for node in order}
    for j in np.flatnonzero(mask):
        members[plan.nodes[j]].append(int(j))
    nodes = tuple(_node_work(cost, node, lengths[members[node]], remat[members[node]]) for node in order)
    chains: list[list[int]] = [[] for _ in range(plan.cluster.num_gpus)]
    for i, node in enumerate(order):
        for rank in node.ranks:
            chains[rank].append(i)
    tokens = plan.tokens_per_gpu(mb)
    non_attn = _per_value(cost.non_attention, tokens)
    head_tokens = np.full_like(tokens, float(lengths[mask].sum()) / plan.cluster.num_gpus) if layout else tokens
    layout_s = _layout_time(cost, model, training, tokens) if layout else 0.0
    return MicroBatchWork(nodes=nodes, chains=tuple(tuple(c) for c in chains), non_attn=non_attn,
                          head=_per_value(cost.head, head_tokens), layout_s=layout_s)


def _node_work(cost: CostModel, node: Node, lengths: np.ndarray, remat: np.ndarray) -> NodeWork:
    full = cost.attention(lengths, node.degree)
    marked = lengths[remat]
    redo = None
    if marked.size:
        redo = full.fwd if marked.size == lengths.size else cost.attention(marked, node.degree).fwd
    return NodeWork(node=node, fwd=full.fwd, bwd=full.bwd, remat=redo)


def _per_value(fn: Callable[[float], T], values: np.ndarray) -> tuple[T, ...]:
    """Apply ``fn`` once per distinct value (many GPUs hold equal token counts)."""
    cache: dict[float, T] = {}
    for v in set(values.tolist()):
        cache[v] = fn(float(v))
    return tuple(cache[v] for v in values.tolist())


def _layout_time(cost: CostModel, model: ModelSpec, training: TrainingSpec, tokens: np.ndarray) -> float:
    """One world all-to-all moving (P-1)/P of the busiest GPU's hidden states."""
    world = tokens.size
    if world <= 1:
        return 0.0
    sent = float(tokens.max()) * model.hidden * training.act_bytes * (world - 1) / world
    return cost.alltoall_time(sent, world)
