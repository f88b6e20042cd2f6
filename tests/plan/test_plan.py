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
from nspsim.specs.clusters import get_cluster


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
    from nspsim.specs.clusters import get_cluster

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


# ---- files that lie (issue 15, items 13 and 14) ----------------------------------------------------------


def _forged(plan: Plan, edit: object) -> str:
    """``plan``'s JSON after ``edit(body)``, its content hash left as it was."""
    body = json.loads(plan.to_json())
    edit(body)  # type: ignore[operator]
    return json.dumps(body)


def test_old_plan_files_load_and_keep_their_hash() -> None:
    """A file written before specs, dropped counts and profiles were recorded loads with the same hash;
    the hash of new plans is unchanged too (pinned: computed before those fields existed; re-pinned
    when the cluster spec itself gained ``gemm_tile_rows``, and again when it gained the GPU's kernel
    family and stream efficiency and the all-to-all peer latency: each changes every cluster fingerprint)."""
    plan = nested()
    assert plan.content_hash == "d6ce9bf17df64bc5"
    body = json.loads(plan.to_json())
    for ref in ("cluster", "model"):
        del body[ref]["spec"]
    del body["batch"]["dropped_count"], body["batch"]["dropped_tokens"]
    old = Plan.from_json(json.dumps(body))
    assert old.content_hash == plan.content_hash and old.model.spec is None and old.batch.dropped_count is None


def test_edited_lengths_with_a_recomputed_hash_are_refused() -> None:
    plan = nested()
    edited = replace(plan, lengths=(4000, 1000, 299, 50))  # a valid plan: its hash is recomputed
    assert edited.content_hash != plan.content_hash
    with pytest.raises(ValueError, match="lengths do not match the batch fingerprint .*: they were edited"):
        Plan.from_json(edited.to_json(), "p.json")
    dropped = replace(plan, batch=replace(plan.batch, dropped_count=1, dropped_tokens=90_000))
    with pytest.raises(ValueError, match="lengths do not match the batch fingerprint"):
        Plan.from_json(dropped.to_json(), "p.json")  # the dropped counts are covered by the fingerprint too
    plan.check_batch()


def _marked() -> Plan:
    return _plan([Node(4, 0), Node(2, 1), Node(1, 0)], [4000, 223, 300], recompute=[True, False, True])


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda b: b["samples"]["length"].__setitem__(1, 223.7), r"samples.length\[1\] must be an integer, got 223.7"),
        (lambda b: b["samples"]["length"].__setitem__(1, 223.0), r"samples.length\[1\] must be an integer, got 223.0"),
        (lambda b: b["samples"]["length"].__setitem__(1, "223"), r"samples.length\[1\] must be an integer, got '223'"),
        (lambda b: b["samples"]["recompute"].__setitem__(0, 5), r"samples.recompute\[0\] must be 0, 1, true or false"),
        (lambda b: b["samples"]["recompute"].__setitem__(0, 1.0), r"samples.recompute\[0\] must be 0, 1"),
        (lambda b: b["samples"]["degree"].__setitem__(2, True), r"samples.degree\[2\] must be an integer, got True"),
        (lambda b: b["samples"]["micro_batch"].__setitem__(0, 0.0), r"samples.micro_batch\[0\] must be an integer"),
        (lambda b: b.update(spmax=4.0), "spmax must be an integer, got 4.0"),
        (lambda b: b.update(token_budget="10000"), "token_budget must be an integer, got '10000'"),
        (lambda b: b.update(planner=["manual"]), "planner must be a string"),
        (lambda b: b["issue_order"][0].__setitem__(0, "sp04#0"), "node name 'sp04#0' is not canonical"),
        (lambda b: b["issue_order"][0].__setitem__(0, "sp+4#0"), "node name 'sp\\+4#0' is not canonical"),
        (lambda b: b.update(metadata={"load_s": [1]}), "metadata 'load_s' must be a number or a string"),
    ],
)
def test_values_are_never_coerced(edit: object, message: str) -> None:
    """Each edit would read, after coercion, as the original plan and match its content hash: it must be
    refused for its type instead."""
    plan = _marked()
    with pytest.raises(ValueError, match=message):
        Plan.from_json(_forged(plan, edit), "p.json")


def test_marks_read_as_written() -> None:
    plan = _marked()
    assert json.loads(plan.to_json())["samples"]["recompute"] == [1, 0, 1]
    as_bools = _forged(plan, lambda b: b["samples"].update(recompute=[True, False, True]))
    assert Plan.from_json(as_bools) == plan


def test_a_model_or_cluster_mismatch_says_what_differs() -> None:
    plan = nested()
    model, cluster = toy_model(), toy_cluster()
    with pytest.raises(ValueError, match="made for model toy, not tiny$"):
        plan.check_compatible(cluster, replace(model, name="tiny"))
    with pytest.raises(
        ValueError, match="another spec of model toy .*: dense_ffn 128 in the plan, 256 now; hidden 64 in the plan"
    ):
        plan.check_compatible(cluster, replace(model, hidden=128, dense_ffn=256))
    with pytest.raises(ValueError, match="another spec of cluster toyx8 .*: gpu.hbm_bytes .* nic_bw 100000000.0 in"):
        plan.check_compatible(replace(cluster, nic_bw=2e8, gpu=replace(cluster.gpu, hbm_bytes=1e12)), model)
    old = replace(plan, model=replace(plan.model, spec=None))
    with pytest.raises(ValueError, match="does not record the spec, so which fields changed is unknown"):
        old.check_compatible(cluster, replace(model, hidden=128))


def test_a_recorded_spec_must_match_its_fingerprint() -> None:
    text = _forged(nested(), lambda b: b["model"]["spec"].update(hidden=65))
    with pytest.raises(ValueError, match="the recorded model spec does not match its fingerprint"):
        Plan.from_json(text, "p.json")


def test_the_profile_is_recorded_and_hashed_only_when_there_is_one() -> None:
    from nspsim.cost.profile import Profile
    from nspsim.plan.refs import ProfileRef

    plan = nested()
    ref = ProfileRef.of(Profile(name="lab", nonattn_flops=1e14), "lab.json")
    profiled = _plan([Node(4, 0), Node(2, 1), Node(1, 0), Node(1, 5)], [4000, 1000, 300, 50], profile=ref)
    assert json.loads(profiled.to_json())["profile"] == {
        "name": "lab",
        "source": "lab.json",
        "fingerprint": ref.fingerprint,
    }
    assert "profile" not in json.loads(plan.to_json())
    assert profiled.content_hash != plan.content_hash
    assert Plan.from_json(profiled.to_json()).profile == ref
    other = ProfileRef.of(Profile(name="lab", nonattn_flops=2e14), "lab.json")
    assert other.fingerprint != ref.fingerprint  # the coefficients, not the name, identify a profile


# ---- plan logs (issue 15, item 4) --------------------------------------------------------------------------


def test_load_plans_reads_a_plan_file_and_a_plan_log(tmp_path: Path) -> None:
    from nspsim.plan.log import load_plans

    one, two = nested(), _marked()
    (tmp_path / "p.json").write_text(one.to_json(indent=1))
    (tmp_path / "run.plans.jsonl").write_text(f"{one.to_json()}\n\n{two.to_json()}\n")
    assert load_plans(tmp_path / "p.json") == (one,)
    assert load_plans(tmp_path / "run.plans.jsonl") == (one, two)
    (tmp_path / "log.json").write_text(f"{one.to_json()}\n{two.to_json()}\n")
    with pytest.raises(ValueError, match=r"log.json line 2: invalid JSON \(Extra data\) \(it looks like a plan log"):
        load_plans(tmp_path / "log.json")
    (tmp_path / "bad.jsonl").write_text(f"{one.to_json()}\n{two.to_json().replace('manual', 'forged')}\n")
    with pytest.raises(ValueError, match="bad.jsonl line 2 is corrupt: content hash"):
        load_plans(tmp_path / "bad.jsonl")
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(ValueError, match="holds no plans"):
        load_plans(tmp_path / "empty.jsonl")
