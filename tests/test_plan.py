"""Plan: validation on construction, JSON round trip, content hash, cluster checks, corruption."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import make_batch, toy_cluster, toy_model
from nspsim.plan import Plan, make_plan
from nspsim.sp_tree import Node, SPTree
from nspsim.specs.cluster import get_cluster


def _plan(nodes: list[Node], lengths: list[int], budget: int = 10_000, **kw: object) -> Plan:
    return make_plan(
        planner="manual",
        cluster=toy_cluster(),
        model=toy_model(),
        batch=make_batch(lengths),
        spmax=4,
        token_budget=budget,
        nodes=nodes,
        **kw,
    )  # type: ignore[arg-type]


def nested() -> Plan:
    return _plan(
        [Node(4, 0), Node(2, 1), Node(1, 0), Node(1, 5)],
        [4000, 1000, 300, 50],
        metadata={"planning_time_s": 0.00123, "note": "x"},
    )


def test_round_trip_and_hash_is_stable() -> None:
    plan = nested()
    again = Plan.from_json(plan.to_json())
    assert again == plan
    assert again.content_hash == plan.content_hash
    # Metadata does not enter the hash; routing does.
    assert replace(plan, metadata={}).content_hash == plan.content_hash
    moved = _plan([Node(4, 0), Node(2, 1), Node(1, 1), Node(1, 5)], [4000, 1000, 300, 50])
    assert moved.content_hash != plan.content_hash


def test_derived_views() -> None:
    plan = nested()
    assert plan.samples_per_degree() == {4: 1, 2: 1, 1: 2}
    assert plan.tokens_per_gpu().tolist() == [1300, 1000, 1500, 1500, 0, 50, 0, 0]
    assert not plan.is_disjoint()
    assert plan.issue_order == ((Node(4, 0), Node(2, 1), Node(1, 0), Node(1, 5)),)
    assert plan.num_micro_batches == 1


def test_disjoint_plan_with_micro_batches() -> None:
    plan = _plan([Node(4, 0), Node(2, 2), Node(4, 0), Node(4, 1)], [4000, 900, 3000, 100], micro_batches=[0, 0, 1, 1])
    assert plan.is_disjoint() and plan.num_micro_batches == 2
    assert Plan.from_json(plan.to_json()) == plan


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"nodes": [Node(8, 0)]}, "sample 0: node sp8#0 is not in the SP tree"),
        ({"nodes": [Node(2, 4)]}, "not in the SP tree"),
        ({"nodes": [Node(1, 0)], "budget": 500}, "GPU 0 holds 1000 sharded tokens, over the token budget B_tok=500"),
        ({"nodes": [Node(1, 0)], "micro_batches": [1]}, "micro-batch ids"),
        ({"nodes": [Node(1, 0)], "issue_order": [[Node(1, 1)]]}, "issue order of micro-batch 0"),
        ({"nodes": [Node(1, 0)], "budget": 0}, "token budget must be positive"),
        ({"nodes": [Node(1, 0)], "backend": "mesh"}, "backend"),
        ({"nodes": [Node(1, 0)], "recompute": [True, False]}, "entries in recompute"),
    ],
)
def test_invalid_plans(kwargs: dict[str, object], message: str) -> None:
    nodes = kwargs.pop("nodes")
    budget = kwargs.pop("budget", 10_000)
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        _plan(nodes, [1000], budget=budget, **kwargs)  # type: ignore[arg-type]


def test_wrong_cluster_is_refused(tmp_path: Path) -> None:
    plan = nested()
    path = tmp_path / "plan.json"
    plan.save(path)
    assert Plan.load(path, toy_cluster(), toy_model()) == plan
    with pytest.raises(ValueError, match="plan was made for cluster toyx8"):
        Plan.load(path, get_cluster("h100", 8))
    with pytest.raises(ValueError, match="not h100x64"):
        plan.check_compatible(get_cluster("h100", 64))


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda t: t[: len(t) // 2], "invalid JSON"),
        (lambda t: "[]", "not an nspsim plan"),
        (lambda t: t.replace('"schema_version": 1', '"schema_version": 99'), "schema version 99"),
        (lambda t: t.replace('"planner": "manual"', '"planner": "forged"'), "content hash"),
        (lambda t: t.replace('"samples"', '"sample"'), "missing or malformed field"),
        (lambda t: t.replace('"length": [', '"length": [-3, '), "invalid"),
    ],
)
def test_corrupt_plan_files(tmp_path: Path, mutate: object, message: str) -> None:
    text = mutate(nested().to_json())  # type: ignore[operator]
    with pytest.raises(ValueError, match=message):
        Plan.from_json(text, "p.json")
    json_ok = True
    try:
        json.loads(text)
    except json.JSONDecodeError:
        json_ok = False
    assert json_ok or message == "invalid JSON"


def test_missing_plan_file(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="cannot read plan"):
        Plan.load(tmp_path / "nope.json")


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_random_plans_round_trip(data: st.DataObject) -> None:
    tree = SPTree(num_gpus=8, spmax=4, gpus_per_node=2)
    n = data.draw(st.integers(1, 12))
    nodes = data.draw(st.lists(st.sampled_from(list(tree.nodes())), min_size=n, max_size=n))
    lengths = data.draw(st.lists(st.integers(1, 5000), min_size=n, max_size=n))
    marks = data.draw(st.one_of(st.none(), st.lists(st.booleans(), min_size=n, max_size=n)))
    plan = _plan(nodes, lengths, budget=10**6, recompute=marks)
    assert Plan.from_json(plan.to_json()) == plan
    assert plan.tokens_per_gpu().sum() == pytest.approx(sum(lengths))


def test_a_plan_refuses_lengths_above_max_context_and_another_node_size() -> None:
    import dataclasses

    from helpers import make_batch, toy_model
    from nspsim.plan import make_plan
    from nspsim.sp_tree import Node
    from nspsim.specs.cluster import get_cluster

    cluster = get_cluster("h100", 8)
    plan = make_plan(
        planner="manual",
        cluster=cluster,
        model=toy_model(),
        batch=make_batch([5000]),
        spmax=4,
        token_budget=10_000,
        nodes=[Node(1, 0)],
    )
    with pytest.raises(ValueError, match="above the batch's max context 5000"):
        dataclasses.replace(plan, lengths=(6000,))
    other = dataclasses.replace(plan, gpus_per_node=4)
    with pytest.raises(ValueError, match="plan assumes 4 GPUs per node but h100x8 has 8"):
        other.check_compatible(cluster)
