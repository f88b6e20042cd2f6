"""Single-process checks of the leaf backend and the executor's pure helpers."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from helpers import make_batch
from nspsim.execution.activation import plan_activations
from nspsim.execution.layout import Slot
from nspsim.execution.recompute import RECOMPUTE_CHOICES, RecomputeMode, recompute_marks
from nspsim.execution.shards import NodeShards
from nspsim.plan import make_plan
from nspsim.sp_tree import Node
from nspsim.specs.backend import SPBackend
from nspsim.specs.clusters import get_cluster
from nspsim.specs.memory import MemoryModel
from nspsim.specs.model import get_model
from nspsim.workload import WorkloadConfig, build_workload
from nspsim_runtime.backends import RUNTIME_BACKENDS, sp_backends
from nspsim_runtime.backends.base import ExecContext, LocalBackend, NodeTask
from nspsim_runtime.executor import ExecOptions
from nspsim_runtime.kernels import Segments, select_kernel
from nspsim_runtime.timing import PhaseClock, breakdown

CPU = torch.device("cpu")


def _task(lengths: list[int], marks: list[bool]) -> NodeTask:
    shards = NodeShards(
        node=Node(1, 0), backend="ulysses", samples=np.arange(len(lengths)), lengths=np.asarray(lengths, dtype=np.int64)
    )
    n = sum(lengths)
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(n, h, 8, generator=gen) for h in (8, 2, 2))
    return NodeTask(
        slot=Slot(shards=shards, group_rank=0, start=0, stop=n), q=q, k=k, v=v, recompute=np.asarray(marks, dtype=bool)
    )


def test_leaf_backend_keeps_only_unmarked_samples_and_recomputes_the_rest() -> None:
    ctx = ExecContext(comm=None, kernel=select_kernel("cpu-flash", CPU), clock=PhaseClock())  # type: ignore[arg-type]
    lengths, marks = [5, 9, 3, 7], [False, True, False, True]
    task, backend = _task(lengths, marks), LocalBackend()
    backend.fwd_compute(task, ctx)
    assert task.state["out"].shape[0] == 5 + 3 and task.state["lse"].shape[0] == 5 + 3
    task.dout = torch.ones_like(task.q)
    backend.bwd_compute(task, ctx)
    assert ctx.clock.seconds["attn_remat"] > 0
    full = _task(lengths, [False] * 4)
    backend.fwd_compute(full, ctx)
    full.dout = torch.ones_like(full.q)
    backend.bwd_compute(full, ctx)
    for got, want in zip(task.grads, full.grads):
        torch.testing.assert_close(got, want)


class _RecordingKernel:
    """The CPU kernel, recording the Segments object of every call."""

    def __init__(self) -> None:
        self.inner, self.segments = select_kernel("cpu-flash", CPU), []

    def forward(self, q, k, v, seg, causal):  # type: ignore[no-untyped-def]
        self.segments.append(seg)
        return self.inner.forward(q, k, v, seg, causal)

    def backward(self, dout, q, k, v, out, lse, seg, causal):  # type: ignore[no-untyped-def]
        self.segments.append(seg)
        return self.inner.backward(dout, q, k, v, out, lse, seg, causal)


def test_index_arrays_are_derived_once_per_node_and_reused_by_every_layer() -> None:
    kernel = _RecordingKernel()
    ctx = ExecContext(comm=None, kernel=kernel, clock=PhaseClock())  # type: ignore[arg-type]
    backend, lengths = LocalBackend(), [5, 9, 3, 7]
    for _layer in range(3):
        task = _task(lengths, [False, True, False, True])
        backend.fwd_compute(task, ctx)
        task.dout = torch.ones_like(task.q)
        backend.bwd_compute(task, ctx)
    whole = {id(seg) for seg in kernel.segments if seg.total_q == sum(lengths)}
    assert len(kernel.segments) == 9 and len(whole) == 1  # 3 forward + 3 backward share one Segments
    assert len({id(seg) for seg in kernel.segments}) == 2  # plus one for the recomputed samples
    assert len(ctx.memo) == 1
    backend.fwd_compute(_task(lengths, [False] * 4), ctx)  # other marks: another entry, not a stale hit
    assert len(ctx.memo) == 2
    ctx.enter("next step")
    assert ctx.memo == {}


def test_recompute_marks_follow_the_plan_or_the_mode() -> None:
    cl, m = get_cluster("cpu", 2), get_model("tiny")
    plan = make_plan(
        planner="hand",
        cluster=cl,
        model=m,
        batch=make_batch([4, 6]),
        spmax=2,
        token_budget=100,
        nodes=[Node(2, 0), Node(1, 1)],
        recompute=[True, False],
    )
    assert recompute_marks(plan, "plan").tolist() == [True, False]
    assert recompute_marks(plan, "all").tolist() == [True, True]
    assert recompute_marks(plan, "none").tolist() == [False, False]
    unmarked = make_plan(
        planner="hand",
        cluster=cl,
        model=m,
        batch=make_batch([4, 6]),
        spmax=2,
        token_budget=100,
        nodes=[Node(2, 0), Node(1, 1)],
    )
    memory = build_workload(WorkloadConfig(model="tiny", cluster="cpu", gpus=2)).memory
    assert recompute_marks(unmarked, "plan", memory).tolist() == [False, False]
    assert recompute_marks(unmarked, "plan").tolist() == [False, False]  # no memory model: keep everything


def test_unmarked_plans_recompute_per_micro_batch_exactly_as_the_simulator_decides() -> None:
    """Two micro-batches on one GPU; 1 byte per token kept plus 1 byte per token of attention, 1000
    bytes free: micro-batch 0 (100 tokens, 200 bytes with attention) keeps its attention, micro-batch 1
    (600 tokens, 1200 bytes) recomputes it. A whole-plan decision would recompute both."""
    memory = MemoryModel(
        usable_bytes=1000,
        state_bytes=0,
        buffer_bytes=0,
        keep_bytes_per_token=1,
        working_bytes_per_token=0,
        attn_bytes_per_token_layer=1,
        attn_kv_bytes_per_head_token=0,
        num_layers=1,
        num_kv_heads=2,
        token_budget=1000,
    )
    plan = make_plan(
        planner="hand",
        cluster=get_cluster("cpu", 2),
        model=get_model("tiny"),
        batch=make_batch([100, 600]),
        spmax=2,
        token_budget=1000,
        nodes=[Node(1, 0), Node(1, 0)],
        micro_batches=[0, 1],
    )
    simulator = plan_activations(plan, memory)
    assert simulator.policy == "full-recompute" and simulator.remat.tolist() == [False, True]
    assert recompute_marks(plan, "plan", memory).tolist() == simulator.remat.tolist()


def test_breakdown_adds_up_to_the_step_time() -> None:
    seconds = {
        "attn_fwd": 1.0,
        "attn_bwd": 2.0,
        "attn_remat": 0.5,
        "sp_exposed_comm": 0.25,
        "sp_comm": 9.0,
        "comm_wait": 0.1,
        "fsdp_exposed_comm": 0.2,
        "other": 0.0,
    }
    out = breakdown(seconds, fwd_bwd_s=5.0, step_s=6.0)
    assert out["non_attn"] == pytest.approx(1.25) and sum(out.values()) == pytest.approx(6.0)


def test_exec_options_reject_bad_values() -> None:
    with pytest.raises(ValueError, match="recompute must be one of"):
        ExecOptions(recompute="some")
    with pytest.raises(ValueError, match="lookahead"):
        ExecOptions(lookahead=-1)


def test_segments_reject_inconsistent_boundaries() -> None:
    with pytest.raises(ValueError, match="start at 0"):
        Segments((1, 2), (0, 2))
    with pytest.raises(ValueError, match="non-decreasing"):
        Segments((0, 3, 2), (0, 1, 2))


def test_every_sp_backend_has_a_registered_runtime_backend() -> None:
    """Adding an SPBackend member without a runtime backend fails here (recipe: nspsim.cost.backends)."""
    assert set(RUNTIME_BACKENDS) == set(SPBackend)
    built = sp_backends(get_model("tiny"))
    assert all(backend.name == name for name, backend in built.items())


def test_recompute_modes_are_the_cli_choices() -> None:
    assert RECOMPUTE_CHOICES == ("plan", "all", "none")
    assert ExecOptions(recompute="all").recompute is RecomputeMode.ALL


def test_the_ulysses_backend_admits_the_degrees_nspsim_plans_with() -> None:
    """One rule (nspsim.specs.model.ulysses_admits) for the planner's tree and the runtime's backend."""
    from nspsim.specs.model import ulysses_admits
    from nspsim_runtime.backends.ulysses import UlyssesBackend

    for heads, kv in [(28, 4), (6, 6), (48, 6), (32, 8)]:
        backend = UlyssesBackend(num_heads=heads, num_kv_heads=kv)
        for degree in (1, 2, 4, 8, 16):
            if ulysses_admits(heads, kv, degree):
                backend._check(degree)
            else:
                with pytest.raises(ValueError, match=f"Ulysses degree {degree} must divide"):
                    backend._check(degree)
