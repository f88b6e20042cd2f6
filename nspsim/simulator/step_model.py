"""Step model: turn a plan's per-layer work into the task program of one training step.

Per micro-batch: the token ids' layout all-to-all in (plans with several degrees; issued once the
previous micro-batch is done, as the runtime's blocking all-to-all is), ``layers`` decoder
layers forward, the hidden states' layout all-to-all out, output head forward and backward, their
gradient's all-to-all back in, the layers backward; after the last micro-batch the optimizer step.
Per layer and GPU:

* forward: attention stage over the GPU's active nodes, then non-attention (with expert-parallel
  all-to-alls around the expert compute when EP > 1);
* backward: non-attention backward, attention backward stage in reverse issue order, then the FSDP
  gradient reduce-scatter. A recompute-marked node recomputes inside its own backward, right before
  its backward phases (as the runtime does): its prologue re-sends Q, K, V, its kernel reruns the
  forward (no epilogue: the sequence-layout output is kept), charged to ``attn_remat``;
* FSDP: with ``TrainingSpec.fsdp_prefetch_layers`` = d, the parameter all-gather of layer l is issued
  once the gathers before it are and the buffer of layer l-d-1 is free (d layers ahead, d+1 gathered
  layers in memory, as :mod:`nspsim.specs.memory` counts them; d = 0: gathered when the layer before it
  is done); backward gathers likewise in reverse. Gathers are not prefetched across micro-batches
  (FSDP reshards after each backward).

Attention stage (inter-level phase streaming, docs/simulator.md): for nodes in issue order the SP
queue carries every prologue, then every epilogue; the compute queue every attention kernel. So
prologues of later nodes run during earlier nodes' compute and epilogues overlap later compute,
while every queue keeps one global order (no deadlock between nested groups). Modes:

* ``stream`` - the above;
* ``no-stream`` - streaming off: within an attention stage a GPU's kernels wait for all its
  prologues and its epilogues for all its kernels (same order, no overlap); FSDP still overlaps;
* ``serial`` - no overlap between queues at all: every task of a GPU runs alone in program order
  and FSDP gathers are not prefetched.

Each mode's dependencies contain the previous mode's, so (without link sharing) stream <= no-stream
<= serial task by task.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import NamedTuple

from nspsim.cost.interface import Phases
from nspsim.simulator.hardware import CollectiveFactory
from nspsim.simulator.modes import MODES, SimMode, prefetch_layers
from nspsim.simulator.program import (
    AG,
    ATTN_BWD,
    ATTN_FWD,
    ATTN_REMAT,
    COMPUTE,
    EP_COMM,
    FSDP_COMM,
    NON_ATTN,
    OTHER,
    RS,
    SP,
    SP_COMM,
    Program,
    SharedTask,
    Task,
)
from nspsim.simulator.work import MicroBatchWork, StepWork


class Pass(NamedTuple):
    """One attention pass of a node in a stage: its phases and the categories of its comm and kernel."""

    label: str
    phases: Phases
    comm_cat: int
    compute_cat: int


class StagedPass(NamedTuple):
    """One pass of one node in an attention stage, as every layer creates it: the node's units and
    degree, its kernel, and its prologue and epilogue (0 s: none, e.g. a single-GPU node)."""

    units: tuple[int, int]
    degree: int
    compute_s: float
    compute_cat: int
    comm_cat: int
    pro_s: float
    epi_s: float
    pro_name: str
    epi_name: str
    compute_name: str


Deps = list[Task | None]
PerGpu = list[Task | None]
_NO_TASKS: dict[int, Task] = {}  # shared and never modified: a pass without that collective


class StepModel:
    """Builds the :class:`Program` of one step with ``layers`` decoder layers per micro-batch."""

    def __init__(
        self,
        work: StepWork,
        colls: CollectiveFactory,
        *,
        mode: SimMode = SimMode.STREAM,
        layers: int | None = None,
        noise: Callable[[float], float] | None = None,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"unknown simulation mode {mode!r} (known: {', '.join(MODES)})")
        self.work, self.colls, self.mode = work, colls, SimMode(mode)
        self.layers = work.num_layers if layers is None else min(layers, work.num_layers)
        self.noise = noise
        self.U = work.num_units
        self.prog = Program(self.U)
        self.last_compute: PerGpu = [None] * self.U
        self._last_shared: dict[int, SharedTask] = {}

    @property
    def serial(self) -> bool:
        """Whether every task of a GPU runs alone (one queue per GPU)."""
        return self.mode == SimMode.SERIAL

    @property
    def prefetch(self) -> int:
        """Layers whose FSDP all-gather runs ahead of the layer being computed."""
        return prefetch_layers(self.mode, self.work.fsdp_prefetch_layers)

    def build(self) -> Program:
        """The whole step's program."""
        final: list[Deps] = [[] for _ in range(self.U)]
        for m, mbw in enumerate(self.work.micro_batches):
            final = MicroBatchModel(self, m, mbw).build()
        seg = self.prog.segment("opt", len(self.work.micro_batches))
        for g in range(self.U):
            self.compute(g, self.work.optimizer_s, OTHER, seg, "optimizer", final[g])
        return self.prog

    # ---- task helpers ----------------------------------------------------------------------------
    def queue(self, preferred: int) -> int:
        """The queue a task goes to in this mode."""
        return COMPUTE if self.serial else preferred

    def compute(self, gpu: int, seconds: float, cat: int, seg: int, name: str, deps: Deps) -> Task:
        """A kernel on ``gpu``'s compute queue."""
        if self.noise is not None and seconds > 0:
            seconds = self.noise(seconds)
        task = Task(gpu, COMPUTE, cat, seg, name, seconds, None, deps)
        self.prog.add_kernel(task)
        self.last_compute[gpu] = task
        return task

    def collective(
        self,
        name: str,
        units: tuple[int, int],
        size: int,
        seconds: float,
        pattern: str,
        queue: int,
        cat: int,
        seg: int,
        deps: Callable[[int], Deps],
    ) -> dict[int, Task]:
        """A collective of ``size`` ranks over units ``range(*units)``; one member task per unit."""
        first, end = units
        coll = self.prog.add_collective(
            self.colls.make(len(self.prog.collectives), name, first, end, seconds, pattern, size)
        )
        q = self.queue(queue)
        members, add = {}, self.prog.add
        for g in range(first, end):
            members[g] = task = add(Task(g, q, cat, seg, name, 0.0, coll, deps(g)))
            if q == COMPUTE:
                self.last_compute[g] = task
        return members

    def world(
        self, name: str, seconds: float, pattern: str, queue: int, cat: int, seg: int, deps: Callable[[int], Deps]
    ) -> PerGpu:
        """A collective over every GPU; ``[None] * P`` when it takes no time."""
        if seconds <= 0 or self.work.num_gpus <= 1:
            return [None] * self.U
        members = self.collective(name, (0, self.U), self.work.num_gpus, seconds, pattern, queue, cat, seg, deps)
        return [members[g] for g in range(self.U)]

    def fsdp(self, name: str, seconds: float, queue: int, seg: int, deps: Callable[[int], Deps]) -> PerGpu:
        """An FSDP collective over every GPU in its own queue: one :class:`SharedTask` for all units
        (member tasks on the compute queue in serial mode)."""
        if self.serial or seconds <= 0 or self.work.num_gpus <= 1:
            return self.world(name, seconds, "ring", queue, FSDP_COMM, seg, deps)
        coll = self.prog.add_collective(
            self.colls.make(len(self.prog.collectives), name, 0, self.U, seconds, "ring", self.work.num_gpus)
        )
        task = SharedTask(
            queue, FSDP_COMM, seg, name, coll, [deps(g) for g in range(self.U)], self._last_shared.get(queue)
        )
        self.prog.add(task)
        self._last_shared[queue] = task
        return [task] * self.U

    def gather(self, name: str, seg: int, deps: Callable[[int], Deps]) -> PerGpu:
        """An FSDP parameter all-gather of one layer."""
        return self.fsdp(name, self.work.fsdp.allgather, AG, seg, deps)

    def reduce_scatter(self, name: str, seg: int, deps: Callable[[int], Deps]) -> PerGpu:
        """An FSDP gradient reduce-scatter of one layer."""
        return self.fsdp(name, self.work.fsdp.reduce_scatter, RS, seg, deps)


class MicroBatchModel:
    """Forward and backward of one micro-batch (see the module docstring)."""

    def __init__(self, step: StepModel, m: int, mbw: MicroBatchWork) -> None:
        self.s, self.m, self.mbw = step, m, mbw
        self.U, self.n = step.U, step.layers
        prog = step.prog
        self.seg_pre = prog.segment("pre", m)
        self.seg_fwd = [prog.segment("fwd", m, layer) for layer in range(self.n)]
        self.seg_head = prog.segment("head", m)
        self.seg_bwd = {layer: prog.segment("bwd", m, layer) for layer in reversed(range(self.n))}
        self._stages: dict[str, list[StagedPass]] = {}

    def build(self) -> list[Deps]:
        """Create every task of the micro-batch; return what the optimizer must wait for, per GPU."""
        grad_in, last_forward = self.forward()
        return self.backward(grad_in, last_forward)

    # ---- forward ---------------------------------------------------------------------------------
    def forward(self) -> tuple[PerGpu, PerGpu]:
        """Every forward task; returns the gradient entering the backward and the last forward task."""
        s = self.s
        if s.work.micro_batch_s > 0:  # the micro-batch's fixed set-up runs before its first collective
            for g in range(self.U):
                s.compute(g, s.work.micro_batch_s, OTHER, self.seg_pre, "micro-batch set-up", [s.last_compute[g]])
        prev_mb = list(s.last_compute)
        # The runtime changes a micro-batch's layout once the previous one is done (a blocking all-to-all).
        x = s.world(
            "layout-in (token ids)", self.mbw.ids_layout_s, "a2a", SP, SP_COMM, self.seg_pre, lambda g: [prev_mb[g]]
        )
        ag: list[PerGpu] = []
        done: list[PerGpu] = []
        for layer in range(self.n):
            while len(ag) <= min(layer + s.prefetch, self.n - 1):
                ag.append(self.forward_gather(len(ag), done, prev_mb))
            x = self.layer_forward(layer, x, ag[layer])
            done.append(x)
        return self.head(x), x

    def forward_gather(self, k: int, done: list[PerGpu], prev_mb: PerGpu) -> PerGpu:
        """All-gather of layer k, issued once the buffer of layer k - prefetch - 1 is free (layer 0: once
        the previous micro-batch is done; gathers are not prefetched across micro-batches)."""
        d = self.s.prefetch
        free = prev_mb if k == 0 else done[k - d - 1] if k > d else [None] * self.U
        return self.s.gather("allgather", self.seg_fwd[k], lambda g: [free[g]])

    def layer_forward(self, layer: int, x: PerGpu, ag: PerGpu) -> PerGpu:
        seg = self.seg_fwd[layer]
        epi = self.attention("fwd", seg, lambda g: [x[g], ag[g]])
        return self.non_attention(seg, lambda g: [epi[g], ag[g]], backward=False)

    def head(self, x: PerGpu) -> PerGpu:
        s, seg = self.s, self.seg_head
        out = s.world("layout-out (hidden)", self.mbw.hidden_layout_s, "a2a", SP, SP_COMM, seg, lambda g: [x[g]])
        heads = [s.compute(g, sum(self.mbw.head[g]), NON_ATTN, seg, "output head", [out[g]]) for g in range(self.U)]
        grad = s.world(
            "layout-in (hidden grad)", self.mbw.hidden_layout_s, "a2a", SP, SP_COMM, seg, lambda g: [heads[g]]
        )
        return [grad[g] or heads[g] for g in range(self.U)]

    # ---- backward ----------------------------------------------------------------------------------
    def backward(self, grad_in: PerGpu, last_forward: PerGpu) -> list[Deps]:
        s = self.s
        rs: PerGpu = [None] * self.U
        ag: dict[int, PerGpu] = {}
        done: dict[int, PerGpu] = {}
        next_gather = self.n - 1
        for layer in reversed(range(self.n)):
            seg = self.seg_bwd[layer]
            while next_gather >= max(layer - s.prefetch, 0):
                ag[next_gather] = self.backward_gather(next_gather, done, last_forward)
                next_gather -= 1
            grad_in = self.layer_backward(seg, grad_in, ag.pop(layer))
            done[layer] = list(s.last_compute)
            # the dependency callback runs inside reduce_scatter, within this iteration
            rs = s.reduce_scatter("reduce-scatter", seg, lambda g: [grad_in[g], done[layer][g]])  # noqa: B023
        last = list(s.last_compute)
        return [[rs[g], grad_in[g], last[g]] for g in range(self.U)]

    def backward_gather(self, k: int, done: dict[int, PerGpu], last_forward: PerGpu) -> PerGpu:
        """Backward all-gather of layer k, issued once layer k + prefetch + 1's backward has freed its
        buffer (the last layer: once the forward is done)."""
        free = last_forward if k == self.n - 1 else done.get(k + self.s.prefetch + 1, [None] * self.U)
        return self.s.gather("allgather (bwd)", self.seg_bwd[k], lambda g: [free[g]])

    def layer_backward(self, seg: int, grad_in: PerGpu, ag: PerGpu) -> PerGpu:
        na = self.non_attention(seg, lambda g: [ag[g], grad_in[g]], backward=True)
        epi = self.attention("bwd", seg, lambda g: [na[g]])
        return [epi[g] or na[g] for g in range(self.U)]

    # ---- attention stage -------------------------------------------------------------------------
    def attention(self, phase: str, seg: int, inputs: Callable[[int], Deps]) -> PerGpu:
        """One attention stage ("fwd" or "bwd"); returns each GPU's last task of the stage (its last
        epilogue, else ``None``). In backward a recompute-marked node first re-sends its Q, K, V and
        reruns its forward kernel (:data:`REMAT`) right before its own backward phases."""
        staged = self._stage(phase)
        pros = [self._node_comm(sp, sp.pro_name, sp.pro_s, seg, inputs) for sp in staged]
        stream = self.s.mode == SimMode.STREAM
        last_pro = self._last_per_gpu(pros) if not stream else {}
        comps = [self._node_compute(sp, seg, pro, inputs, last_pro) for sp, pro in zip(staged, pros)]
        last_comp = self._last_per_gpu(comps) if not stream else {}
        epis = [
            self._node_comm(sp, sp.epi_name, sp.epi_s, seg, self._after_compute(comp, last_comp))
            for sp, comp in zip(staged, comps)
        ]
        last_epi = self._last_per_gpu(epis)
        return [last_epi.get(g) for g in range(self.U)]

    def _stage(self, phase: str) -> list[StagedPass]:
        """The stage's passes in issue order (built once per micro-batch; every layer repeats them):
        forward as planned; backward reversed, a marked node's recompute pass right before its backward
        pass (as the runtime does inside the node's backward)."""
        if phase not in self._stages:
            nodes = self.mbw.nodes
            if phase == "fwd":
                passes = [(i, Pass("fwd", nw.fwd, SP_COMM, ATTN_FWD)) for i, nw in enumerate(nodes)]
            else:
                passes = []
                for i, nw in reversed(list(enumerate(nodes))):
                    if nw.remat is not None:
                        passes.append((i, Pass("remat", nw.remat, ATTN_REMAT, ATTN_REMAT)))
                    passes.append((i, Pass("bwd", nw.bwd, SP_COMM, ATTN_BWD)))
            self._stages[phase] = [self._staged(i, p) for i, p in passes]
        return self._stages[phase]

    def _staged(self, i: int, p: Pass) -> StagedPass:
        node = self.mbw.nodes[i].node
        comm = node.degree > 1
        return StagedPass(
            units=self.mbw.node_units[i],
            degree=node.degree,
            compute_s=p.phases.compute,
            compute_cat=p.compute_cat,
            comm_cat=p.comm_cat,
            pro_s=p.phases.prologue if comm else 0.0,
            epi_s=p.phases.epilogue if comm else 0.0,
            pro_name=f"{p.label} pro {node}",
            epi_name=f"{p.label} epi {node}",
            compute_name=f"attn {p.label} {node}",
        )

    def _node_comm(
        self, sp: StagedPass, name: str, seconds: float, seg: int, deps: Callable[[int], Deps]
    ) -> dict[int, Task]:
        if seconds <= 0:
            return _NO_TASKS
        return self.s.collective(name, sp.units, sp.degree, seconds, "a2a", SP, sp.comm_cat, seg, deps)

    def _node_compute(
        self, sp: StagedPass, seg: int, pro: dict[int, Task], inputs: Callable[[int], Deps], last_pro: dict[int, Task]
    ) -> dict[int, Task]:
        out, compute = {}, self.s.compute
        secs, cat, name = sp.compute_s, sp.compute_cat, sp.compute_name
        for g in range(*sp.units):
            # ``last_pro`` is empty when streaming; a ``None`` dependency is ignored either way
            deps = [pro[g], last_pro.get(g)] if g in pro else [*inputs(g), last_pro.get(g)]
            out[g] = compute(g, secs, cat, seg, name, deps)
        return out

    @staticmethod
    def _after_compute(comps: dict[int, Task], last_comp: dict[int, Task]) -> Callable[[int], Deps]:
        return lambda g: [comps[g], last_comp.get(g)]

    @staticmethod
    def _last_per_gpu(groups: Iterable[dict[int, Task]]) -> dict[int, Task]:
        last: dict[int, Task] = {}
        for tasks in groups:
            last.update(tasks)
        return last

    # ---- non-attention ---------------------------------------------------------------------------
    def non_attention(self, seg: int, deps: Callable[[int], Deps], backward: bool) -> PerGpu:
        """Projections and FFN/MoE; with EP > 1 an all-to-all before and after the expert compute."""
        s, ep = self.s, self.s.work.expert_parallel
        name = f"non-attn {'bwd' if backward else 'fwd'}"
        costs = self.mbw.non_attn
        comm = [c.bwd_comm if backward else c.fwd_comm for c in costs]
        use_ep = ep > 1 and max(comm) > 0
        before = self._expert_alltoall(f"ep a2a {name}", seg, comm, deps) if use_ep else {}
        out: PerGpu = []
        for g in range(self.U):
            secs = costs[g].bwd_compute if backward else costs[g].fwd_compute
            dep: Deps = [before[g]] if use_ep else deps(g)
            out.append(s.compute(g, secs, NON_ATTN, seg, name, dep))
        if use_ep:
            after = self._expert_alltoall(f"ep a2a {name} (combine)", seg, comm, lambda g: [out[g]])
            out = [after[g] for g in range(self.U)]
        return out

    def _expert_alltoall(self, name: str, seg: int, comm: list[float], deps: Callable[[int], Deps]) -> dict[int, Task]:
        """Half of the layer's EP all-to-all time, per EP group (paced by its busiest member)."""
        ep, out = self.s.work.expert_parallel, {}
        for first, end in self.s.work.ep_units:
            secs = max(comm[first:end]) / 2
            out.update(self.s.collective(name, (first, end), ep, secs, "a2a", COMPUTE, EP_COMM, seg, deps))
        return out
