"""When the simulator tries a short run before simulating every layer (``periodic.settling_layers``).

The estimate only gates the short attempt; every repeat is still verified by ``find_repeats``, so
these tests check the hand-computable estimate and that the gate is actually applied."""

from __future__ import annotations

import math

import pytest

from nspsim.execution.activation import plan_activations
from nspsim.simulator.engine import Executor
from nspsim.simulator.periodic import _segment_times, settling_layers
from nspsim.simulator.simulator import Simulator
from nspsim.simulator.step_model import StepModel
from nspsim.simulator.work import reduce_to_units, step_work
from nspsim.sp_tree import Node
from nspsim.specs.training import TrainingSpec
from sim_helpers import Setup, StubCost


def _settling(setup: Setup, nodes: list[Node], lengths: list[int], prefetch: int = 1) -> float:
    sim, plan = setup.simulator(), setup.plan(nodes, lengths, spmax=8)
    work = step_work(plan, sim.cost, sim.model, sim.training, plan_activations(plan, sim.memory).remat)
    return settling_layers(reduce_to_units(work), prefetch)


ONE_PER_GPU = [Node(1, g) for g in range(8)]


def test_faster_gpus_settle_once_their_lead_is_used_up() -> None:
    """comp 1e-9 s/token^2: GPUs 0-3 take 1.0 ms forward (2.0 backward), GPUs 4-7 0.81 ms (1.62); gathers
    0.5 ms, one layer ahead. Forward: lead 1.0 - 0.5 = 0.5 ms gained at 1.0 - 0.81 = 0.19 ms per layer;
    backward: lead 2.0 - 0.5 = 1.5 ms at 0.38 ms per layer, 3.947 layers (the larger)."""
    setup = Setup(StubCost(layers=24, comp=1e-9, allgather=5e-4))
    n = _settling(setup, ONE_PER_GPU, [1000] * 4 + [900] * 4)
    assert n == pytest.approx(1.5e-3 / 0.38e-3, rel=1e-9)
    assert _settling(setup, ONE_PER_GPU, [1000] * 4 + [900] * 4, prefetch=2) == pytest.approx(
        3.5e-3 / 0.38e-3, rel=1e-9
    )


def test_a_collective_couples_its_gpus() -> None:
    """GPUs 0 and 1 share a degree-2 node (2 ms each forward) and GPU 1 also holds a 1 ms sample: their
    cluster runs at 3 ms forward (6 backward) against 1 ms (2) on GPUs 2-7; gathers 0.5 ms. Backward: lead
    6 - 0.5 ms at 4 ms per layer. Uncoupled, GPU 0 (4 ms backward) would drift at 2 ms per layer."""
    setup = Setup(StubCost(layers=24, comp=1e-9, allgather=5e-4))
    nodes = [Node(2, 0), Node(1, 1), *[Node(1, g) for g in range(2, 8)]]
    n = _settling(setup, nodes, [2000, 1000, *[1000] * 6])
    assert n == pytest.approx(5.5e-3 / 4e-3, rel=1e-9)


@pytest.mark.parametrize(
    ("allgather", "lengths", "prefetch", "expected"),
    [
        (5e-4, [1000] * 8, 1, 0.0),  # equal paces
        (3e-3, [1000] * 4 + [900] * 4, 1, 0.0),  # gathers slower than any GPU pace every layer
        (5e-4, [1000] * 4 + [900] * 4, 0, 0.0),  # gathered just in time: every layer synchronises
        (0.0, [1000] * 4 + [900] * 4, 1, math.inf),  # nothing couples GPUs 0-3 and 4-7
    ],
)
def test_settling_edge_cases(allgather: float, lengths: list[int], prefetch: int, expected: float) -> None:
    setup = Setup(StubCost(layers=24, comp=1e-9, allgather=allgather))
    assert _settling(setup, ONE_PER_GPU, lengths, prefetch) == expected


def _runs(monkeypatch: pytest.MonkeyPatch, setup: Setup, lengths: list[int]) -> tuple[list[int], bool]:
    """Layer counts the simulator built, and whether it extrapolated."""
    built: list[int] = []
    run = Simulator._run

    def counting(self: Simulator, work: object, layers: int, plan: object) -> object:
        built.append(layers)
        return run(self, work, layers, plan)  # type: ignore[arg-type]

    monkeypatch.setattr(Simulator, "_run", counting)
    result = setup.simulator().simulate(setup.plan(ONE_PER_GPU, lengths, spmax=8))
    return built, result.extrapolated


def test_the_short_attempt_is_skipped_only_when_it_cannot_settle(monkeypatch: pytest.MonkeyPatch) -> None:
    """1% apart, the faster GPUs need ~99 layers to use up their lead (more than the 48 there are):
    one full run. 10% apart they settle in ~5 layers: the 12-layer run is tried and extrapolated."""
    setup = Setup(StubCost(layers=48, comp=1e-9, allgather=5e-4), training=TrainingSpec(fsdp_prefetch_layers=1))
    slow_drift = [1000] * 4 + [995] * 4
    assert _settling(setup, ONE_PER_GPU, slow_drift) > 12
    assert _runs(monkeypatch, setup, slow_drift) == ([48], False)
    assert _runs(monkeypatch, setup, [1000] * 4 + [900] * 4) == ([12], True)


def test_the_repeat_check_sees_every_gpus_own_fsdp_issue_time() -> None:
    """A shared FSDP task stands for every GPU's member: the repeat check must still compare each
    GPU's issue time (what its comm wait is charged from), not only the collective's start. GPU 0 holds
    2000 tokens (2 ms of non-attention per layer), the others 1000 (1 ms); gathers 1 ms, no prefetch:
    layer 1's gather is issued at 2 ms by GPUs 1-7 and at 3 ms by GPU 0, and starts at 3 ms."""
    setup = Setup(StubCost(layers=2, nonattn=1e-6, allgather=1e-3), training=TrainingSpec(fsdp_prefetch_layers=0))
    sim, plan = setup.simulator(), setup.plan([Node(1, g) for g in range(8)], [2000] + [1000] * 7, spmax=8)
    work = step_work(plan, sim.cost, sim.model, sim.training, plan_activations(plan, sim.memory).remat)
    program = StepModel(reduce_to_units(work), sim.collectives).build()
    Executor(program).run()
    layer1 = program.layer_segments("fwd", 0)[1]
    rows = _segment_times(program)[layer1].tolist()
    assert rows[:8] == [pytest.approx([t, 3e-3, 4e-3], rel=1e-12) for t in [3e-3] + [2e-3] * 7]
