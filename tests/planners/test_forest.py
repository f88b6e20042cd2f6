"""GPU counts that are no power of two plan as a forest of SP trees (nspsim.sp_tree), on every planner.

Counts a real cluster has: 6 (one host of 6), 12 (three hosts of 4, a cluster file) and 96 (twelve
8-GPU hosts). Each planner's plan must name only nodes of the forest, give every sample a group,
use GPUs of every tree (but Megatron's dynamic CP, whose doubling step stops at spmax and leaves the
last ranks idle, as its card says), and simulate to a finite step; spmax is the largest tree that
tiles the GPUs.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nspsim.planners import PLANNER_NAMES, get_planner
from nspsim.simulator import Simulator
from nspsim.sp_tree import SPTree, largest_spmax, tiles_hosts
from nspsim.workload import Workload, WorkloadConfig, build_workload


@pytest.mark.parametrize(
    "gpus, per_host, spmax",
    [(96, 8, 32), (12, 4, 4), (12, 6, 2), (6, 6, 2), (24, 8, 8), (80, 8, 16), (64, 8, 64), (1, 1, 1), (48, 16, 16)],
)
def test_largest_spmax_by_hand(gpus: int, per_host: int, spmax: int) -> None:
    assert largest_spmax(gpus, per_host) == spmax


@given(hosts=st.integers(1, 40), per_host=st.integers(1, 16))
def test_largest_spmax_is_the_largest_tiling_tree(hosts: int, per_host: int) -> None:
    gpus = hosts * per_host
    d = largest_spmax(gpus, per_host)
    assert d & (d - 1) == 0 and gpus % d == 0 and tiles_hosts(d, per_host)
    assert gpus % (2 * d) or not tiles_hosts(2 * d, per_host)  # twice as large fails one rule
    SPTree(num_gpus=gpus, spmax=d, gpus_per_node=per_host)  # every smaller power of two is a valid tree too
    with pytest.raises(ValueError, match="power of two"):
        SPTree(num_gpus=gpus, spmax=2 * d, gpus_per_node=per_host)


def test_a_forest_of_three_trees_names_its_nodes_globally() -> None:
    tree = SPTree(num_gpus=96, spmax=32, gpus_per_node=8)
    assert (tree.num_trees, tree.num_nodes()) == (3, 3 * 63)
    assert [str(n) for n in tree.chain(95)] == ["sp1#95", "sp2#47", "sp4#23", "sp8#11", "sp16#5", "sp32#2"]
    assert {tree.tree_of(n) for n in tree.nodes(32)} == {0, 1, 2}
    assert [tree.spans_hosts(n) for n in tree.nodes(32)] == [4, 4, 4]


def _workload(gpus: int, cluster: str) -> Workload:
    return build_workload(
        WorkloadConfig(
            model="tiny",
            cluster=cluster,
            gpus=gpus,
            tokens_per_batch=4096 * gpus,
            max_context=min(32768, 4096 * gpus),
            token_budget=8192,
            trace="longtail-paper",
            seed=gpus,
        )
    )


@pytest.fixture(scope="module")
def four_gpu_hosts(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = Path(tmp_path_factory.mktemp("clusters")) / "hosts-of-4.toml"
    path.write_text('extends = "h100"\nname = "h100-hosts-of-4"\ngpus_per_node = 4\n')
    return str(path)


@pytest.mark.parametrize("gpus, cluster", [(6, "h100"), (12, "file"), (96, "h100")])
def test_every_planner_plans_and_simulates_a_forest(gpus: int, cluster: str, four_gpu_hosts: str) -> None:
    wl = _workload(gpus, four_gpu_hosts if cluster == "file" else cluster)
    trees = wl.tree.num_trees
    assert trees > 1 and wl.tree.spmax * trees == gpus
    sim = Simulator.for_workload(wl)
    batch = wl.sampler.batch(0)
    for name in PLANNER_NAMES:
        plan = get_planner(name).plan(batch, wl)
        assert plan.num_samples == len(batch.lengths) and plan.cluster.num_gpus == gpus, name
        assert all(wl.tree.has_node(n) for n in plan.nodes), name
        used = {wl.tree.tree_of(n) for n in plan.nodes}
        if name != "megatron-cp":  # its documented deviation: doubling stops at spmax, later ranks idle
            assert used == set(range(trees)), (name, used)  # no tree left idle
        result = sim.simulate(plan)
        assert result.step_time_s is not None and 0 < result.step_time_s < 1e3, name
