"""The prediction in a record describes the executed configuration; records report the critical rank.

Single-process, no torch.distributed: the planning thread's work (plan, prepare, simulate) and the
record assembly are plain functions of the options and every rank's times.
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from helpers import make_batch
from nspsim.plan import make_plan
from nspsim.records import BREAKDOWN_CATEGORIES
from nspsim.simulator import SimOptions, Simulator
from nspsim.sp_tree import Node
from nspsim.specs.clusters import get_cluster
from nspsim.specs.model import get_model
from nspsim.workload import WorkloadConfig, build_workload
from nspsim_runtime.prediction import Prediction, executed_plan, simulated_mode
from nspsim_runtime.training.args import parse_args
from nspsim_runtime.training.outputs import RankTimes, critical_rank, measured_record
from nspsim_runtime.training.plan_ahead import PlanAhead, Planned

BASE = [
    "--trace",
    "longtail-paper",
    "--model",
    "tiny",
    "--tokens-per-batch",
    "1k",
    "--max-context",
    "512",
    "--seed",
    "1",
    "--token-budget",
    "650",
]


@pytest.fixture(scope="module")
def workload():  # type: ignore[no-untyped-def]
    return build_workload(
        WorkloadConfig(
            trace="longtail-paper",
            model="tiny",
            cluster="cpu",
            gpus=2,
            tokens_per_batch=1024,
            max_context=512,
            seed=1,
            token_budget=650,
        )
    )


def _plan(nodes: list[Node], world: int = 4):  # type: ignore[no-untyped-def]
    return make_plan(
        planner="hand",
        cluster=get_cluster("cpu", world),
        model=get_model("tiny"),
        batch=make_batch([8] * len(nodes)),
        spmax=world,
        token_budget=10**6,
        nodes=nodes,
    )


def test_lookahead_and_grad_sync_map_to_the_simulator_mode_or_to_no_prediction() -> None:
    plan = _plan([Node(4, 0), Node(2, 0), Node(2, 1), Node(1, 3)])  # issue order of 4 nodes
    assert simulated_mode(plan, lookahead=None, grad_sync="fsdp", world=4) == ("stream", "")
    assert simulated_mode(plan, lookahead=0, grad_sync="fsdp", world=4) == ("no-stream", "")
    assert simulated_mode(plan, lookahead=3, grad_sync="fsdp", world=4) == ("stream", "")  # window holds all
    mode, note = simulated_mode(plan, lookahead=1, grad_sync="fsdp", world=4)
    assert mode is None and "--lookahead 1" in note
    mode, note = simulated_mode(plan, lookahead=None, grad_sync="allreduce", world=4)
    assert mode is None and "--grad-sync allreduce" in note
    assert simulated_mode(plan, lookahead=None, grad_sync="allreduce", world=1) == ("stream", "")


def test_forced_recompute_marks_become_part_of_the_executed_plan() -> None:
    plan = _plan([Node(2, 0), Node(1, 2)])
    assert executed_plan(plan, "plan") is plan
    assert executed_plan(plan, "all").recompute == (True, True)
    assert executed_plan(plan, "none").recompute == (False, False)
    assert executed_plan(plan, "all").content_hash != plan.content_hash


@pytest.mark.parametrize(
    "argv, mode",
    [
        (["--lookahead", "0", "--recompute", "all"], "no-stream"),
        (["--recompute", "none", "--prepare", "order"], "stream"),
        (["--prepare", "recompute"], "stream"),
        ([], "stream"),  # nsp's declared preparation: marks and issue order
    ],
)
def test_the_prediction_is_the_simulation_of_the_executed_plan_in_the_matching_mode(workload, argv, mode) -> None:  # type: ignore[no-untyped-def]
    args = parse_args(["--planner", "nsp", *BASE, *argv])
    ahead = PlanAhead(args, workload)
    try:
        planned = ahead.get(0)
    finally:
        ahead.close()
    want = Simulator.for_workload(workload, SimOptions(mode=mode)).simulate(planned.plan)
    assert planned.prediction.mode == mode and planned.prediction.step_time_s == want.step_time_s
    assert planned.prediction.breakdown_s == dict(want.breakdown_s)
    if args.execution.recompute != "plan":
        assert set(planned.plan.recompute or ()) == {args.execution.recompute == "all"}
    rec = measured_record(
        step=0,
        index=0,
        planned=planned,
        plan_wait_s=0.0,
        loss=1.0,
        spec=args.planner_spec,
        ranks=[_times(1.0, 0.0), _times(1.0, 0.1)],
        memory=workload.memory,
    )
    assert (rec.recompute_policy, rec.remat_share) == (want.recompute_policy, want.remat_share)
    assert rec.simulated_mode == mode and rec.simulated_note == ""


def test_options_without_a_simulator_counterpart_record_no_prediction_and_why(workload) -> None:  # type: ignore[no-untyped-def]
    for argv, words in ((["--grad-sync", "allreduce"], "--grad-sync allreduce"), (["--no-simulate"], "--no-simulate")):
        ahead = PlanAhead(parse_args(["--planner", "nsp2l", *BASE, *argv]), workload)
        try:
            pred = ahead.get(0).prediction
        finally:
            ahead.close()
        assert pred.mode is None and pred.step_time_s is None and pred.breakdown_s == {}, (argv, pred)
        assert words in pred.note, (argv, pred)


def _times(step_s: float, wait: float) -> RankTimes:
    br = dict.fromkeys(BREAKDOWN_CATEGORIES, 0.0)
    br["comm_wait"], br["non_attn"] = wait, step_s - wait
    return RankTimes(step_s=step_s, breakdown_s=br, sp_comm_s=wait)


def test_the_record_reports_the_critical_ranks_breakdown_and_every_ranks() -> None:
    ranks = [_times(2.0, 0.5), _times(2.1, 0.0), _times(1.9, 0.3)]  # rank 1 arrived last at the barrier
    assert critical_rank(ranks) == 1
    busy = _times(2.0, 0.5)
    busy.breakdown_s["attn_bwd"], busy.breakdown_s["non_attn"] = 1.0, 0.5
    assert critical_rank([*ranks, busy]) == 3  # the most attention work decides before the barrier wait
    plan = _plan([Node(2, 0), Node(1, 2), Node(1, 3)])
    planned = Planned(
        plan=plan,
        planning_time_s=0.1,
        prediction=Prediction(mode=None, note="not simulated: test"),
        dropped_samples=2,
        dropped_tokens=1500,
    )
    memory = build_workload(WorkloadConfig(model="tiny", cluster="cpu", gpus=4)).memory
    rec = measured_record(
        step=3,
        index=7,
        planned=planned,
        plan_wait_s=0.0,
        loss=2.0,
        ranks=[*ranks, ranks[0]],
        spec="static:degree=2",
        memory=memory,
    )
    assert rec.critical_gpu == 1 and rec.step_time_s == 2.1 and rec.breakdown_s == ranks[1].breakdown_s
    assert rec.per_gpu_step_time_s == [2.0, 2.1, 1.9, 2.0]
    assert rec.per_gpu_breakdown_s["comm_wait"] == [0.5, 0.0, 0.3, 0.5]
    assert rec.per_gpu_sp_comm_s == [0.5, 0.0, 0.3, 0.5] and rec.sp_comm_s == 0.0
    assert rec.planner_spec == "static:degree=2" and rec.planner == "hand"
    assert rec.simulated_step_time_s is None and rec.simulated_note == "not simulated: test"
    assert (rec.dropped_samples, rec.dropped_tokens) == (2, 1500)


def test_records_count_the_samples_the_batch_draw_dropped(workload) -> None:  # type: ignore[no-untyped-def]
    """``--max-context`` drops samples from the draw; the record says how many and their tokens."""
    ahead = PlanAhead(parse_args(["--planner", "nsp", *BASE]), workload)
    try:
        planned = ahead.get(3)
    finally:
        ahead.close()
    batch = workload.sampler.batch(3)
    assert batch.dropped_count > 0  # the case is real
    rec = measured_record(
        step=0,
        index=3,
        planned=planned,
        plan_wait_s=0.0,
        loss=1.0,
        spec="nsp",
        ranks=[_times(1.0, 0.0), _times(1.0, 0.1)],
        memory=workload.memory,
    )
    body = json.loads(rec.to_json())
    assert (body["dropped_samples"], body["dropped_tokens"]) == (batch.dropped_count, batch.dropped_tokens)
    assert body["num_samples"] == batch.num_samples and body["schema_version"] == 3
    with pytest.raises(ValueError, match="zero together"):
        replace(rec, dropped_tokens=0)


def test_planner_specs_use_the_compare_label_format() -> None:
    assert parse_args(["--planner", "nsp"]).planner_spec == "nsp"
    args = parse_args(["--planner", "static:degree=2"])
    assert (args.planner, args.planner_options, args.planner_spec) == ("static", {"degree": 2}, "static:degree=2")
    both = parse_args(["--planner", "nsp:beam_width=4", "--planner-option", "proxy=attn-fwd"])
    assert both.planner_spec == "nsp:beam_width=4+proxy=attn-fwd"
