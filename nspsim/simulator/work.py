"""What a plan asks of the hardware: uncontended phase times per tree node, GPU and micro-batch.

Everything here comes from the :class:`~nspsim.cost.interface.CostModel` interface, once per step:
per active node the attention phases (forward, backward and, for its recompute-marked samples, the
recomputed forward), per GPU the non-attention work for its sharded tokens and the output head, and
once the FSDP collectives, the layout-change all-to-all and the optimizer step. The step model
(:mod:`nspsim.simulator.step_model`) replays these numbers layer by layer; identical decoder layers
reuse them.

Layout change (docs/simulator.md), as the runtime executes it (``nspsim_runtime.executor``): plans whose
samples do not all share one SP degree move each micro-batch from the input layout (every GPU holds
an equal slice of the batch) to the plan's execution layout and back. Three world all-to-alls: the
token ids in, before the embedding (``TOKEN_ID_BYTES`` per token; integers, so no backward); the
final hidden states out, to the input layout where the output head and loss run; and in backward the
gradient of those hidden states back in. We assume a uniform scatter: the busiest GPU sends or
receives (P-1)/P of its tokens. Static SP plans (one degree) are already in the conventional layout
and pay nothing (FlexSP, BASP and NSP plans do).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TypeVar

import numpy as np

from nspsim.cost.interface import CostModel, FsdpCost, NonAttentionCost, Phases
from nspsim.plan import Plan
from nspsim.sp_tree import Node
from nspsim.specs.model import ModelSpec
from nspsim.specs.training import TrainingSpec

T = TypeVar("T")

TOKEN_ID_BYTES = 16  # an int64 token id and an int64 position per token, as nspsim_runtime.executor sends them


@dataclass(frozen=True, kw_only=True)
class NodeWork:
    """One active tree node of a micro-batch: per-GPU phase times of one layer; ``remat`` is the
    recompute pass of its marked samples in backward (:meth:`CostModel.recompute_attention`), ``None`` if none."""

    node: Node
    fwd: Phases
    bwd: Phases
    remat: Phases | None


@dataclass(frozen=True, kw_only=True)
class MicroBatchWork:
    """Per-layer work of one micro-batch, per *unit* (a GPU, or GPUs with identical programs, see
    :func:`reduce_to_units`). ``chains[u]`` indexes ``nodes`` (issue order) for unit u, and the units of
    node i are ``range(*node_units[i])``."""

    nodes: tuple[NodeWork, ...]
    chains: tuple[tuple[int, ...], ...]
    non_attn: tuple[NonAttentionCost, ...]
    head: tuple[tuple[float, float], ...]
    ids_layout_s: float
    hidden_layout_s: float
    node_units: tuple[tuple[int, int], ...]


@dataclass(frozen=True, kw_only=True)
class StepWork:
    """Everything the step model needs, in seconds (uncontended). ``gpu_unit[g]`` is GPU g's unit,
    ``ep_units`` the unit range of each expert-parallel group, ``fsdp_prefetch_layers`` how many layers
    the FSDP all-gathers run ahead."""

    num_gpus: int
    num_layers: int
    expert_parallel: int
    fsdp_prefetch_layers: int
    micro_batches: tuple[MicroBatchWork, ...]
    fsdp: FsdpCost
    optimizer_s: float
    gpu_unit: tuple[int, ...]
    micro_batch_s: float = 0.0
    ep_units: tuple[tuple[int, int], ...]

    @property
    def num_units(self) -> int:
        """Number of distinct simulated units."""
        return max(self.gpu_unit) + 1

    def unit_members(self) -> list[list[int]]:
        """The GPUs of every unit."""
        out: list[list[int]] = [[] for _ in range(self.num_units)]
        for g, u in enumerate(self.gpu_unit):
            out[u].append(g)
        return out


def step_work(
    plan: Plan,
    cost: CostModel,
    model: ModelSpec,
    training: TrainingSpec,
    remat: np.ndarray,
    *,
    optimizer_step: bool = True,
) -> StepWork:
    """Phase times of every micro-batch of ``plan``; ``remat[j]`` marks samples recomputed in backward;
    without ``optimizer_step`` the step ends after its gradients (a pass a later pass of its window ends)."""
    layout = not _uniform_degree(plan)
    mbs = tuple(
        _micro_batch_work(plan, cost, model, training, mb, remat, layout) for mb in range(plan.num_micro_batches)
    )
    p, ep = plan.cluster.num_gpus, training.expert_parallel
    return StepWork(
        num_gpus=p,
        num_layers=cost.num_layers,
        expert_parallel=ep,
        fsdp_prefetch_layers=training.fsdp_prefetch_layers,
        micro_batches=mbs,
        fsdp=cost.fsdp(),
        optimizer_s=(cost.optimizer_time() if optimizer_step else 0.0) + cost.step_overhead(),
        micro_batch_s=cost.micro_batch_overhead(),
        gpu_unit=tuple(range(p)),
        ep_units=tuple((b, b + ep) for b in range(0, p, ep)) if ep > 1 else (),
    )


def reduce_to_units(work: StepWork) -> StepWork:
    """Merge GPUs whose programs are identical into one simulated unit each (exact).

    Two GPUs merge when, in every micro-batch, they take part in the same nodes and hold the same
    non-attention and head work, and (with EP > 1) sit in the same expert-parallel group. Such GPUs
    issue, wait and finish identically, and every node, EP group or the world contains all or none
    of a unit, so the units of any such group are a contiguous range of unit ids. Disjoint plans
    (Static SP, FlexSP, BASP) shrink from P GPUs to about one unit per group; nested plans barely.
    """
    ep = work.expert_parallel
    signature = [
        tuple((mb.chains[g], mb.non_attn[g], mb.head[g]) for mb in work.micro_batches) + ((g // ep,) if ep > 1 else ())
        for g in range(work.num_gpus)
    ]
    ids: dict[tuple[object, ...], int] = {}
    unit = tuple(ids.setdefault(sig, len(ids)) for sig in signature)
    first = [unit.index(u) for u in range(len(ids))]
    mbs = tuple(_reduce_micro_batch(mb, unit, first) for mb in work.micro_batches)
    ep_units = tuple(_unit_range(unit, b, b + ep) for b, _ in work.ep_units)
    return replace(work, micro_batches=mbs, gpu_unit=unit, ep_units=ep_units)


def _reduce_micro_batch(mb: MicroBatchWork, unit: tuple[int, ...], first: list[int]) -> MicroBatchWork:
    return replace(
        mb,
        chains=tuple(mb.chains[g] for g in first),
        non_attn=tuple(mb.non_attn[g] for g in first),
        head=tuple(mb.head[g] for g in first),
        node_units=tuple(_unit_range(unit, a, b) for a, b in mb.node_units),
    )


def _unit_range(unit: tuple[int, ...], first_gpu: int, end_gpu: int) -> tuple[int, int]:
    """Units of GPUs [first_gpu, end_gpu): a contiguous range (see :func:`reduce_to_units`)."""
    inside = unit[first_gpu:end_gpu]
    lo, hi = min(inside), max(inside) + 1
    if hi - lo != len(set(inside)):
        raise RuntimeError("units of a group are not contiguous (a symmetry-reduction bug; please report)")
    return lo, hi


def _uniform_degree(plan: Plan) -> bool:
    return len({node.degree for node in plan.nodes}) == 1


def _micro_batch_work(
    plan: Plan, cost: CostModel, model: ModelSpec, training: TrainingSpec, mb: int, remat: np.ndarray, layout: bool
) -> MicroBatchWork:
    lengths = np.asarray(plan.lengths, dtype=np.int64)
    mask = plan.sample_mask(mb)
    order = plan.issue_order[mb]
    members = _samples_by_node(plan, mask)
    picks = [members.get(key, np.zeros(0, dtype=np.int64)) for key in _node_keys(order, plan.cluster.num_gpus)]
    nodes = tuple(_node_work(cost, node, lengths[pick], remat[pick]) for node, pick in zip(order, picks))
    chains: list[list[int]] = [[] for _ in range(plan.cluster.num_gpus)]
    for i, node in enumerate(order):
        for rank in node.ranks:
            chains[rank].append(i)
    tokens = plan.tokens_per_gpu(mb)
    non_attn = _per_value(cost.non_attention, tokens)
    head_tokens = np.full_like(tokens, float(lengths[mask].sum()) / plan.cluster.num_gpus) if layout else tokens
    ids_s, hidden_s = _layout_times(cost, model, training, tokens) if layout else (0.0, 0.0)
    return MicroBatchWork(
        nodes=nodes,
        chains=tuple(tuple(c) for c in chains),
        non_attn=non_attn,
        head=_per_value(cost.head, head_tokens),
        ids_layout_s=ids_s,
        hidden_layout_s=hidden_s,
        node_units=tuple((n.first_rank, n.end_rank) for n in order),
    )


def _node_keys(nodes: Sequence[Node], num_gpus: int) -> list[int]:
    """One integer per node: ``degree * P + first rank`` (distinct for distinct tree nodes)."""
    return [node.degree * num_gpus + node.first_rank for node in nodes]


def _samples_by_node(plan: Plan, mask: np.ndarray) -> dict[int, np.ndarray]:
    """Sample indices of each node (by :func:`_node_keys`) among ``mask``, ascending (one stable sort
    instead of hashing a Node per sample)."""
    _, degrees, firsts, _ = plan.arrays
    chosen = np.flatnonzero(mask)
    keys = degrees[chosen].astype(np.int64) * plan.cluster.num_gpus + firsts[chosen]
    by_key = np.argsort(keys, kind="stable")
    unique, starts = np.unique(keys[by_key], return_index=True)
    return dict(zip(unique.tolist(), np.split(chosen[by_key], starts[1:])))


def _node_work(cost: CostModel, node: Node, lengths: np.ndarray, remat: np.ndarray) -> NodeWork:
    full = cost.attention(lengths, node.degree)
    marked = lengths[remat]
    redo = None
    if marked.size:
        redo = cost.recompute_attention(marked, node.degree)
    return NodeWork(node=node, fwd=full.fwd, bwd=full.bwd, remat=redo)


def _per_value(fn: Callable[[float], T], values: np.ndarray) -> tuple[T, ...]:
    """Apply ``fn`` once per distinct value (many GPUs hold equal token counts)."""
    cache: dict[float, T] = {}
    for v in set(values.tolist()):
        cache[v] = fn(float(v))
    return tuple(cache[v] for v in values.tolist())


def _layout_times(cost: CostModel, model: ModelSpec, training: TrainingSpec, tokens: np.ndarray) -> tuple[float, float]:
    """(token ids in, hidden states out) world all-to-all times, each moving (P-1)/P of the busiest
    GPU's tokens; the hidden-state gradient in backward takes as long as the hidden states out."""
    world = tokens.size
    if world <= 1:
        return 0.0, 0.0
    moved = float(tokens.max()) * (world - 1) / world
    return (
        cost.alltoall_time(moved * TOKEN_ID_BYTES, world),
        cost.alltoall_time(moved * model.hidden * training.act_bytes, world),
    )
