"""A round-number cost model and plan builders for exact simulator tests.

``StubCost`` implements the :class:`~nspsim.cost.interface.CostModel` protocol with hand-checkable
times: for a node of degree k holding samples with token sum S and square sum Q, per GPU

* forward: prologue = lat + pro * S / k, compute = comp * Q / k, epilogue = lat + epi * S / k
  (no communication at k = 1); backward doubles every term except the latency;
* non-attention: ``nonattn`` seconds per token forward, twice that backward;
* FSDP: ``allgather`` / ``reduce_scatter`` seconds per layer (0 = none);
* head and optimizer: ``head`` per token (fwd + bwd together) and ``optimizer`` seconds.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from helpers import make_batch, toy_cluster, toy_model
from nspsim.cost.interface import AttentionCost, FsdpCost, NonAttentionCost, Phases, SampleCosts, recompute_phases
from nspsim.plan import Plan, make_plan
from nspsim.simulator import SimOptions, Simulator
from nspsim.sp_tree import Node
from nspsim.specs.cluster import ClusterSpec
from nspsim.specs.memory import MemoryModel
from nspsim.specs.training import TrainingSpec


@dataclass(frozen=True)
class StubCost:
    """Round-number costs (see the module docstring)."""

    layers: int = 1
    lat: float = 0.0
    pro: float = 0.0
    comp: float = 0.0
    epi: float = 0.0
    nonattn: float = 0.0
    allgather: float = 0.0
    reduce_scatter: float = 0.0
    head_per_token: float = 0.0
    optimizer: float = 0.0
    a2a_bw: float = 1e9
    lockstep: Callable[[int, float], float] | None = None  # lockstep_waits(): None = ranks arrive together

    @property
    def num_layers(self) -> int:
        return self.layers

    def latency(self, group_size: int) -> float:
        return self.lat if group_size > 1 else 0.0

    def attention(self, lengths: np.ndarray, degree: int) -> AttentionCost:
        lengths = np.asarray(lengths, dtype=np.float64)
        s, q = float(lengths.sum()) / degree, float((lengths**2).sum()) / degree
        comm = degree > 1 and lengths.size > 0
        fwd = Phases(self.lat + self.pro * s if comm else 0.0, self.comp * q, self.lat + self.epi * s if comm else 0.0)
        bwd = Phases(
            self.lat + 2 * self.epi * s if comm else 0.0,
            2 * self.comp * q,
            self.lat + 2 * self.pro * s if comm else 0.0,
        )
        return AttentionCost(fwd, bwd)

    def recompute_attention(self, lengths: np.ndarray, degree: int) -> Phases:
        return recompute_phases(self.attention(lengths, degree).fwd)

    def attention_sample_costs(self, lengths: np.ndarray, degree: int) -> SampleCosts:
        lengths = np.asarray(lengths, dtype=np.float64)
        comm = (self.pro + self.epi) * lengths / degree if degree > 1 else 0 * lengths
        return SampleCosts(comm + self.comp * lengths**2 / degree, 2 * (comm + self.comp * lengths**2 / degree))

    def node_overhead(self, degree: int) -> tuple[float, float]:
        return (2 * self.lat, 2 * self.lat) if degree > 1 else (0.0, 0.0)

    def non_attention(self, tokens: float) -> NonAttentionCost:
        return NonAttentionCost(self.nonattn * tokens, 2 * self.nonattn * tokens, 0.0, 0.0)

    def fsdp(self) -> FsdpCost:
        return FsdpCost(allgather=self.allgather, reduce_scatter=self.reduce_scatter)

    def alltoall_time(self, bytes_per_gpu: float, group_size: int) -> float:
        return self.latency(group_size) + bytes_per_gpu / self.a2a_bw if group_size > 1 else 0.0

    def head(self, tokens: float) -> tuple[float, float]:
        return self.head_per_token * tokens / 3, 2 * self.head_per_token * tokens / 3

    def optimizer_time(self) -> float:
        return self.optimizer

    def micro_batch_overhead(self) -> float:
        return 0.0

    def step_overhead(self) -> float:
        return 0.0

    def compute_slots(self) -> float | None:
        return None

    def lockstep_waits(self) -> Callable[[int, float], float] | None:
        return self.lockstep


def roomy_memory(num_layers: int = 1) -> MemoryModel:
    """Memory where everything fits (1 TB free, tiny per-token bytes)."""
    return MemoryModel(
        usable_bytes=1e12,
        state_bytes=0.0,
        buffer_bytes=0.0,
        keep_bytes_per_token=1.0,
        working_bytes_per_token=1.0,
        attn_bytes_per_token_layer=1.0,
        attn_kv_bytes_per_head_token=0.0,
        num_layers=num_layers,
        num_kv_heads=4,
        token_budget=10**9,
    )


@dataclass
class Setup:
    """A stub cost on the toy cluster (8 GPUs, 2 per host unless told) and a simulator factory."""

    cost: StubCost = field(default_factory=StubCost)
    num_gpus: int = 8
    gpus_per_node: int = 2
    memory: MemoryModel | None = None
    training: TrainingSpec = field(default_factory=TrainingSpec)

    @property
    def cluster(self) -> ClusterSpec:
        return toy_cluster(self.num_gpus, self.gpus_per_node)

    def simulator(self, seed: int = 0, **options: object) -> Simulator:
        return Simulator(
            cost=self.cost,
            model=toy_model(self.cost.layers),
            cluster=self.cluster,
            training=self.training,
            memory=self.memory or roomy_memory(self.cost.layers),
            options=SimOptions(**options),
            seed=seed,
        )  # type: ignore[arg-type]

    def plan(self, nodes: Sequence[Node], lengths: Sequence[int], *, spmax: int = 4, **kw: object) -> Plan:
        return make_plan(
            planner="manual",
            cluster=self.cluster,
            model=toy_model(self.cost.layers),
            batch=make_batch(list(lengths)),
            spmax=spmax,
            token_budget=10**9,
            nodes=list(nodes),
            **kw,
        )  # type: ignore[arg-type]
