"""Multi-rank gloo tests: NSP execution equals single-process execution.

One launch per world size (2, 4, 8 ranks) runs every check; the tests below assert on its results.
Plans come from every registered planner on random variable-length batches (lengths not divisible
by the group sizes), plus hand-made plans that nest overlapping groups, split micro-batches and mark
samples for recomputation. Tolerance: 1e-5 absolute on fp32 losses and gradients.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
import rt_workers
import torch

from helpers import make_batch
from nspsim.execution.layout import rank_layout
from nspsim.execution.schedule import COMPUTE, EPILOGUE, PROLOGUE, Step, order_conflicts, rank_steps
from nspsim.plan import Plan, make_plan
from nspsim.planners import PLANNER_NAMES, get_planner
from nspsim.sp_tree import Node
from nspsim.specs.clusters import get_cluster
from nspsim.specs.model import get_model
from nspsim.workload import WorkloadConfig, build_workload
from nspsim_runtime.executor import ExecOptions
from nspsim_runtime.launch import run_ranks

WORLDS = [2, 4, 8]
TOL = 1e-5
pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def planner_plans(world: int) -> list[Plan]:
    """A plan from every registered planner for random long-tail batches (two, one at 8 ranks)."""
    per_rank = 256
    wl = build_workload(
        WorkloadConfig(
            model="tiny",
            cluster="cpu",
            gpus=world,
            trace="longtail-paper",
            tokens_per_batch=per_rank * world,
            max_context=min(512, per_rank * world),
            token_budget=int(per_rank * 1.3),
            seed=world,
        )
    )
    batches = (0, 1) if world <= 4 else (0,)
    return [get_planner(name).plan(wl.sampler.batch(i), wl) for name in PLANNER_NAMES for i in batches]


def hand_plans(world: int, seed: int) -> list[Plan]:
    """Nested (overlapping) and disjoint multi-micro-batch plans, Ulysses and Ring, with recompute marks."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 60, size=12).tolist()
    degrees = rng.choice([d for d in (1, 2, world // 2, world) if d >= 1], size=12)
    nodes = [Node(int(d), int(rng.integers(0, world // d))) for d in degrees]
    marks = (rng.random(12) < 0.5).tolist()
    common = dict(
        cluster=get_cluster("cpu", world),
        model=get_model("tiny"),
        batch=make_batch(lengths),
        spmax=world,
        token_budget=10**6,
    )
    nested = [
        make_plan(planner="hand-nested", nodes=nodes, recompute=marks, backend=b, **common) for b in ("ulysses", "ring")
    ]
    half = world // 2 if world > 2 else 1
    disjoint_nodes = [Node(half, j % (world // half)) for j in range(12)]
    micro = [j % 2 for j in range(12)]
    disjoint = make_plan(planner="hand-disjoint", nodes=disjoint_nodes, micro_batches=micro, **common)
    return [*nested, disjoint]


def attention_cases(world: int) -> list[rt_workers.AttentionCase]:
    """Both backends on a nested plan with random recompute marks, streamed and serial (8 ranks: one
    of each backend, to bound the launch time on small machines)."""
    cases = []
    for i, plan in enumerate(hand_plans(world, seed=100 + world)[:2]):
        rng = np.random.default_rng(i)
        for lookahead in (None, 0) if world <= 4 else ((None,) if i == 0 else (0,)):
            marks = tuple(bool(x) for x in rng.random(plan.num_samples) < 0.5)
            cases.append(rt_workers.AttentionCase(plan_json=plan.to_json(), marks=marks, lookahead=lookahead, seed=i))
    return cases


UNUSED_EXPERTS = "moe-unused-experts"


def unused_expert_plan(world: int) -> Plan:
    """tiny-moe (top-2 of 4 experts) on lengths [40, 30, 1] with rank 1 holding only the 1-token sample,
    so rank 1 routes rows to two experts at most and leaves the others without rows (ranks >= 2 hold
    no rows at all)."""
    return make_plan(
        planner=UNUSED_EXPERTS,
        cluster=get_cluster("cpu", world),
        model=get_model("tiny-moe"),
        batch=make_batch([40, 30, 1]),
        spmax=world,
        token_budget=10**6,
        nodes=[Node(1, 0), Node(1, 0), Node(1, 1)],
    )


def parity_cases(world: int) -> list[rt_workers.Case]:
    cases = [rt_workers.Case(plan_json=p.to_json(), seed=3) for p in planner_plans(world)]
    cases += [
        rt_workers.Case(
            plan_json=unused_expert_plan(world).to_json(), seed=8, model="tiny-moe", options=ExecOptions(grad_sync=sync)
        )
        for sync in ("fsdp", "allreduce")
    ]
    nested_u, nested_r, disjoint = hand_plans(world, seed=world)
    cases += [
        rt_workers.Case(plan_json=nested_u.to_json(), seed=4),
        rt_workers.Case(plan_json=nested_r.to_json(), seed=5, options=ExecOptions(grad_sync="allreduce", lookahead=1)),
        rt_workers.Case(plan_json=disjoint.to_json(), seed=6, options=ExecOptions(lookahead=0)),
        rt_workers.Case(plan_json=nested_u.to_json(), seed=7, model="tiny-moe", options=ExecOptions(recompute="all")),
    ]
    return cases


def repeat_plans(world: int) -> list[str]:
    """Four different nested plans with recompute marks, then the first again."""
    plans = [hand_plans(world, seed=50 + i)[0].to_json() for i in range(4)]
    return [*plans, plans[0]]


@pytest.fixture(scope="module", params=WORLDS, ids=[f"{w}ranks" for w in WORLDS])
def run(request: pytest.FixtureRequest) -> dict:
    world = request.param
    payload = {"attention": attention_cases(world), "parity": parity_cases(world), "repeat": repeat_plans(world)}
    results = run_ranks(rt_workers.suite, world, payload, timeout_s=240, comm_timeout_s=60)
    return {"world": world, "payload": payload, "results": results}


def test_ulysses_and_ring_match_single_device_attention(run: dict) -> None:
    for i, case in enumerate(run["payload"]["attention"]):
        plan = Plan.from_json(case.plan_json)
        ref = rt_workers.attention_reference(case)
        covered = torch.cat([res["attention"][i]["rows"] for res in run["results"]])
        assert sorted(covered.tolist()) == list(range(sum(plan.lengths)))
        for rank, res in enumerate(run["results"]):
            rep = res["attention"][i]
            for name, got, want in zip(("out", "dq", "dk", "dv"), [rep["out"], *rep["grads"]], ref):
                err = float((got - want.index_select(0, rep["rows"])).abs().max()) if got.numel() else 0.0
                assert err < TOL, (rank, plan.backend, case.lookahead, name, err)


def _assert_matches_reference(run: dict, i: int, case: rt_workers.Case) -> None:
    """Every rank's loss and rank 0's summed gradients of parity case ``i`` equal the reference."""
    plan = Plan.from_json(case.plan_json)
    ref_loss, ref_grads = rt_workers.reference(case)
    reps = [res["parity"][i] for res in run["results"]]
    for rank, rep in enumerate(reps):
        assert abs(rep["loss"] - ref_loss) < TOL, (rank, plan.planner, rep["loss"], ref_loss)
        assert rep["checksum"] == reps[0]["checksum"], (rank, plan.planner)
    grads = reps[0]["grads"]
    assert grads.keys() == ref_grads.keys()
    diffs = {name: float((grads[name] - ref).abs().max()) for name, ref in ref_grads.items()}
    worst = max(diffs, key=diffs.__getitem__)
    assert diffs[worst] < TOL, (plan.planner, plan.backend, case.options.grad_sync, worst, diffs[worst])


def test_loss_and_every_gradient_match_the_single_process_reference(run: dict) -> None:
    seen_planners = set()
    for i, case in enumerate(run["payload"]["parity"]):
        seen_planners.add(Plan.from_json(case.plan_json).planner)
        _assert_matches_reference(run, i, case)
    assert set(PLANNER_NAMES) <= seen_planners


def test_moe_gradients_sync_when_a_rank_leaves_experts_unused(run: dict) -> None:
    """Regression: a rank whose rows reach only some experts used to all-reduce (or reduce-scatter) a
    gradient buffer of a different size than its peers."""
    cases = [
        (i, c) for i, c in enumerate(run["payload"]["parity"]) if Plan.from_json(c.plan_json).planner == UNUSED_EXPERTS
    ]
    assert sorted(c.options.grad_sync for _, c in cases) == ["allreduce", "fsdp"]
    assert rank_layout(Plan.from_json(cases[0][1].plan_json), 0, 1).num_rows == 1
    for i, case in cases:
        _assert_matches_reference(run, i, case)


def test_cases_cover_nesting_uneven_shards_micro_batches_and_recompute(run: dict) -> None:
    plans = [Plan.from_json(c.plan_json) for c in run["payload"]["parity"]]
    assert any(not p.is_disjoint() for p in plans)
    assert any(p.num_micro_batches > 1 for p in plans)
    assert any(p.recompute is not None and any(p.recompute) for p in plans)
    assert any(length % node.degree for p in plans for length, node in zip(p.lengths, p.nodes) if node.degree > 1)


def _sp_log(log: list) -> list:
    return [(tuple(g), label) for g, label in log if not label.startswith(("layout", "plan", "loss", "grad"))]


def test_every_rank_issues_shared_collectives_in_one_order(run: dict) -> None:
    for section in ("attention", "parity"):
        for i in range(len(run["payload"][section])):
            logs = {r: [tuple(e) for e in res[section][i]["log"]] for r, res in enumerate(run["results"])}
            logs = {r: [(tuple(g), label) for g, label in log] for r, log in logs.items()}
            assert order_conflicts(logs) == [], (section, i)


def _forward_log(log: list[tuple[tuple[int, ...], str]]) -> list[tuple[tuple[int, ...], str]]:
    """The SP collectives a rank issued before its first backward one (Ring's recompute walk reuses
    the forward hop label ``kv``, so forward entries are told apart by position, not by label)."""
    sp = _sp_log(log)
    end = next((i for i, (_, label) in enumerate(sp) if label.split(":")[1].startswith(("bwd-", "remat-"))), len(sp))
    return sp[:end]


def _forward_labels(backend: str, step: Step) -> list[str]:
    """The collectives one forward phase of an SP node issues. Ulysses: Q, K, V in the prologue, the
    output in the epilogue. Ring has no output collective (its forward epilogue is empty: the output
    is already local); its prologue issues the first of the ``k - 1`` K/V hops and its compute phase
    the other ``k - 2`` (each overlapping a block kernel)."""
    if backend == "ulysses":
        return {PROLOGUE: ["fwd-qkv"], COMPUTE: [], EPILOGUE: ["fwd-out"]}[step.phase]
    return {PROLOGUE: ["kv"], COMPUTE: ["kv"] * (step.node.degree - 2), EPILOGUE: []}[step.phase]


def test_collectives_follow_the_streamed_schedule(run: dict) -> None:
    """The executor issues exactly the forward collectives the pure schedule predicts, in its order,
    for both backends."""
    world = run["world"]
    backends = set()
    for case, *per_rank in zip(run["payload"]["attention"], *[r["attention"] for r in run["results"]]):
        plan = Plan.from_json(case.plan_json)
        backends.add(plan.backend)
        for rank, rep in enumerate(per_rank):
            expected = [
                (tuple(step.node.ranks), f"{step.node}:{label}")
                for step in rank_steps(plan.issue_order[0], rank, case.lookahead)
                if step.node.degree > 1
                for label in _forward_labels(plan.backend, step)
            ]
            assert _forward_log(rep["log"]) == expected, (world, plan.backend, case.lookahead, rank)
            assert rank_layout(plan, 0, rank).num_rows == rep["rows"].numel()
    assert backends == {"ulysses", "ring"}


def test_recompute_marks_rerun_exactly_the_marked_nodes_in_backward(run: dict) -> None:
    """SP nodes (degree > 1) with marked samples re-send their inputs in backward (Ulysses: Q, K, V,
    ``remat-qkv``; Ring: the first K/V hop of the recompute walk, ``remat-kv``); no other node does,
    and only ranks with marked samples spend time recomputing. Ring's recompute walk sends its other
    ``k - 2`` hops under the forward label ``kv``: exactly those of the marked nodes appear in backward."""
    remat_label = {"ulysses": ":remat-qkv", "ring": ":remat-kv"}
    for case, *per_rank in zip(run["payload"]["attention"], *[r["attention"] for r in run["results"]]):
        plan = Plan.from_json(case.plan_json)
        marked = {node for node, m in zip(plan.nodes, case.marks) if m}
        for rank, rep in enumerate(per_rank):
            mine = [n for n in marked if n.degree > 1 and n.contains_rank(rank)]
            remat = sorted(
                {label.split(":")[0] for _, label in rep["log"] if label.endswith(remat_label[plan.backend])}
            )
            assert remat == sorted(str(n) for n in mine), (rank, plan.backend, remat)
            backward = _sp_log(rep["log"])[len(_forward_log(rep["log"])) :]
            rewalk = Counter(label.split(":")[0] for _, label in backward if label.endswith(":kv"))
            want = {str(n): n.degree - 2 for n in mine if n.degree > 2} if plan.backend == "ring" else {}
            assert rewalk == want, (rank, plan.backend, rewalk, want)
            has_marks = any(n.contains_rank(rank) for n in marked)
            assert (rep["seconds"]["attn_remat"] > 0) == has_marks, (rank, plan.backend, rep["seconds"])


def test_groups_are_created_once_in_one_global_order_on_every_rank(run: dict) -> None:
    """``GroupCache`` creates each non-root SP group once (the root reuses the world group, leaves need
    none), every step's new groups in (degree desc, index) order, the same sequence on every rank
    (``new_group`` is a world collective). The order holds per ``ensure`` call: a later step may add a
    larger group than an earlier step's, so the whole run's list is not sorted."""
    world = run["world"]
    per_rank = [[s["created"] for s in res["repeat"]] for res in run["results"]]
    assert all(steps == per_rank[0] for steps in per_rank), per_rank
    steps = per_rank[0]
    created = [dn for step in steps for dn in step]
    assert len(created) == len(set(created)), created
    assert all(step == sorted(step, key=lambda dn: (-dn[0], dn[1])) for step in steps), steps
    assert steps[4] == [], steps
    wanted = {
        (n.degree, n.index) for p in run["payload"]["repeat"] for n in Plan.from_json(p).nodes if 1 < n.degree < world
    }
    assert set(created) == wanted and (world == 2 or wanted), (created, wanted)


def test_per_step_state_does_not_grow_over_a_run(run: dict) -> None:
    """The index cache and the collective log hold the current step only: after four other plans,
    the first plan leaves exactly the state it left the first time."""
    for rank, res in enumerate(run["results"]):
        steps = res["repeat"]
        assert len(steps) == 5 and all(s["first"] == "plan-hash" for s in steps), rank
        assert steps[4]["memo"] == steps[0]["memo"] > 0 and steps[4]["log"] == steps[0]["log"], (rank, steps)
