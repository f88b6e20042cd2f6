"""Gradient-accumulation windows in the runtime (``nspsim_runtime.train --accumulate W``).

The gloo checks at 2 and 4 ranks run a window of two passes whose assignment moves samples between
the passes (the window planner's grouped candidate, routed by NSP), and its per-step twin, under FSDP2
synchronising every pass, FSDP2 synchronising once per window (``--accumulate-sync window``) and the
flat all-reduce; the gradients accumulated over the passes must equal the single-process gradient of
the mean loss over all the window's tokens in one pass (fp32, the multi-rank parity tolerance, 1e-5
absolute). A 2-rank run of the entry point checks the records, the plan log and that the window's
loss does not depend on the assignment or the synchronisation.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import rt_workers
import torch

from nspsim.plan.window import WindowPlan, pass_batches, per_step_assignment, window_plan
from nspsim.planners import get_planner
from nspsim.planners.window import WindowPlanner
from nspsim.planners.window.assign import assign
from nspsim.planners.window.planner import sample_work
from nspsim.specs.model import get_model
from nspsim.workload import Workload, WorkloadConfig, build_workload
from nspsim_runtime.data import pass_streams, synthetic_stream
from nspsim_runtime.exec_options import ExecOptions, pass_syncs
from nspsim_runtime.kernels import select_kernel
from nspsim_runtime.launch import run_ranks
from nspsim_runtime.model import DecoderLM, LocalAttention
from nspsim_runtime.records import WINDOW_FIELDS, read_records
from nspsim_runtime.training.args import parse_args
from nspsim_runtime.training.outputs import output_paths

TOL = 1e-5
SEED = 3


def window_workload(world: int, seed: int = 1) -> Workload:
    per_rank = 256
    return build_workload(
        WorkloadConfig(
            model="tiny",
            cluster="cpu",
            gpus=world,
            trace="longtail-paper",
            tokens_per_batch=per_rank * world,
            max_context=min(512, per_rank * world),
            token_budget=int(per_rank * 1.3),
            seed=seed,
        )
    )


def windows(world: int) -> tuple[WindowPlan, WindowPlan]:
    """A window of batches 0 and 1 routed by the grouped assignment (which moves samples between the
    passes), each pass planned by NSP, and the window planner's per-step window of the same batches."""
    wl = window_workload(world)
    sources = [wl.sampler.batch(i) for i in (0, 1)]
    sizes = [len(b.lengths) for b in sources]
    lengths = np.concatenate([b.lengths_array() for b in sources])
    ids = assign("grouped", sizes, lengths, sample_work(wl, lengths), sources[0].tokens_per_batch)
    assert ids is not None
    nsp = get_planner("nsp")
    moved = window_plan(sources, ids, [nsp.plan(b, wl) for b in pass_batches(sources, ids)])
    per_step = WindowPlanner(step=nsp, candidates=("per-step",)).plan(sources, wl)
    assert moved.moved_samples() > 0 and per_step.is_per_step
    return moved, per_step


def window_reference(window: WindowPlan) -> tuple[float, dict[str, torch.Tensor]]:
    """Single process, one pass over all the window's samples (each with its source batch's tokens):
    the mean loss over the window's tokens and its gradients."""
    spec = get_model("tiny")
    streams = [
        synthetic_stream(lengths, seed=SEED, index=ref.index, vocab=spec.vocab)
        for ref, lengths in zip(window.sources, window.source_lengths)
    ]
    ids, pos, tgt = (
        torch.as_tensor(np.concatenate([getattr(s, f) for s in streams])) for f in ("ids", "positions", "targets")
    )
    lengths = [x for src in window.source_lengths for x in src]
    model = DecoderLM(spec, seed=SEED)
    attention = LocalAttention(select_kernel("cpu-flash", torch.device("cpu")), lengths)
    loss = model(ids, pos, tgt, attention=attention)
    (loss / len(ids)).backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
    return float(loss.item()) / len(ids), grads


CASES = (("fsdp", "pass"), ("fsdp", "window"), ("allreduce", "pass"))


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("world", [2, 4], ids=["2ranks", "4ranks"])
def test_a_window_accumulates_the_gradient_of_its_mean_loss(world: int) -> None:
    moved, per_step = windows(world)
    cases = [
        rt_workers.WindowCase(
            window_json=w.to_json(), seed=SEED, options=ExecOptions(grad_sync=sync), accumulate_sync=mode
        )
        for w in (moved, per_step)
        for sync, mode in CASES
    ]
    results = run_ranks(rt_workers.window_parity, world, cases, timeout_s=240, comm_timeout_s=60)
    for window, offset in ((moved, 0), (per_step, len(CASES))):
        ref_loss, ref_grads = window_reference(window)
        for i, (sync, mode) in enumerate(CASES):
            label = f"{'moved' if offset == 0 else 'per-step'} {sync} {mode}"
            got = results[0][offset + i]
            assert got["loss"] == pytest.approx(ref_loss, abs=TOL), label
            assert set(got["grads"]) == set(ref_grads), label
            for name, grad in ref_grads.items():
                torch.testing.assert_close(got["grads"][name], grad, atol=TOL, rtol=0, msg=f"{label}: {name}")
    # FSDP2 synchronising every pass holds sharded gradients after the first; once per window, none (the
    # unsharded sum waits for the last pass); the flat all-reduce sets every gradient locally.
    params = len(list(DecoderLM(get_model("tiny"), seed=SEED).parameters()))
    expected = [0 if case == ("fsdp", "window") else params for case in CASES] * 2
    assert [[r["with_grad"] for r in rank] for rank in results] == [expected] * world


def test_pass_streams_give_every_sample_its_source_batchs_tokens() -> None:
    lengths = [(5, 3, 7), (2, 9)]
    sources = [synthetic_stream(x, seed=1, index=4 + k, vocab=50) for k, x in enumerate(lengths)]
    same = pass_streams(lengths, per_step_assignment([3, 2]), seed=1, first_index=4, vocab=50)
    for got, want in zip(same, sources):
        for f in ("ids", "targets", "positions"):
            assert np.array_equal(getattr(got, f), getattr(want, f))
    moved = pass_streams(lengths, ((4, 0), (1, 2, 3)), seed=1, first_index=4, vocab=50)
    assert [s.ids.size for s in moved] == [9 + 5, 3 + 7 + 2]
    assert np.array_equal(moved[0].ids[:9], sources[1].ids[2:]) and np.array_equal(moved[0].ids[9:], sources[0].ids[:5])
    assert np.array_equal(moved[1].targets[:10], sources[0].targets[5:])
    assert np.array_equal(moved[1].positions, np.concatenate([np.arange(3), np.arange(7), np.arange(2)]))


def test_only_the_last_pass_all_reduces() -> None:
    assert pass_syncs(last=False, accumulate_sync="pass", grad_sync="fsdp")
    assert not pass_syncs(last=False, accumulate_sync="window", grad_sync="fsdp")
    assert not pass_syncs(last=False, accumulate_sync="pass", grad_sync="allreduce")
    assert all(
        pass_syncs(last=True, accumulate_sync=m, grad_sync=g) for m in ("pass", "window") for g in ("fsdp", "allreduce")
    )


BAD = (
    (["--accumulate", "0"], "argument --accumulate: must be an integer from 1 to 256, got '0'"),
    (["--accumulate", "1.5"], "argument --accumulate: must be a positive integer, got '1.5'"),
    (["--accumulate", "two"], "argument --accumulate: must be a positive integer"),
    (["--accumulate", "4", "--steps", "2"], "--accumulate 4 exceeds --steps 2"),
    (["--accumulate", "2", "--steps", "5"], "--steps 5 is not a multiple of --accumulate 2"),
    (["--accumulate-sync", "window"], "--accumulate-sync applies to accumulation windows"),
    (["--accumulate-sync", "some"], "argument --accumulate-sync: invalid choice: 'some'"),
    (["--window-candidates", "per-step"], "--window-candidates applies to accumulation windows"),
    (["--accumulate", "2", "--steps", "2", "--window-candidates", "grouped"], "must include per-step"),
    (["--accumulate", "2", "--steps", "2", "--window-candidates", "per-step,nope"], "distinct names among"),
    (
        ["--accumulate", "2", "--steps", "2", "--accumulate-sync", "window", "--grad-sync", "allreduce"],
        "--accumulate-sync window applies to --grad-sync fsdp",
    ),
)


@pytest.mark.parametrize("argv, message", BAD, ids=[m for _, m in BAD])
def test_bad_window_arguments_raise_a_one_line_value_error(argv: list[str], message: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_args(["--planner", "nsp", *argv])
    assert message in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize("argv, message", [BAD[0], BAD[3]], ids=["zero", "above-steps"])
def test_the_entry_point_refuses_a_bad_window_in_one_line(argv: list[str], message: str) -> None:
    from test_runtime_train import _train

    proc = _train(["--planner", "nsp", *argv], timeout=120)
    lines = proc.stderr.splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert lines[0].startswith("nspsim_runtime.train: error:") and message in lines[0], proc.stderr


def test_a_window_run_config_reads_back(tmp_path: Path) -> None:
    from nspsim_runtime.training.distributed import Dist
    from nspsim_runtime.training.outputs import resolved_config

    argv = ["--planner", "nsp", "--accumulate", "2", "--steps", "4", "--window-candidates", "per-step,grouped"]
    args = parse_args(argv)
    d = Dist(rank=0, world=1, local_rank=0, device=torch.device("cpu"), control_group=None)
    config = tmp_path / "r.config.json"
    config.write_text(
        json.dumps(resolved_config(args, d, build_workload(args.workload_on(world=1, device_type="cpu"))))
    )
    back = parse_args(["--config", str(config)])
    assert (back.accumulate, back.accumulate_sync, back.window_candidates) == (2, "pass", ("per-step", "grouped"))
    assert parse_args(["--config", str(config), "--accumulate", "4"]).accumulate == 4


# ---- the entry point, 2 ranks ------------------------------------------------------------------
TRAIN = [
    "--planner",
    "nsp",
    "--trace",
    "longtail-paper",
    "--model",
    "tiny",
    "--steps",
    "4",
    "--accumulate",
    "2",
    "--tokens-per-batch",
    "1k",
    "--max-context",
    "512",
    "--seed",
    "1",
    "--token-budget",
    "650",
    "--comm-timeout",
    "60",
]
RUNS = {
    "window": [],
    "per-step": ["--window-candidates", "per-step"],
    "once": ["--accumulate-sync", "window"],
    "allreduce": ["--grad-sync", "allreduce"],
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("accumulate")
    argvs = [[*TRAIN, *extra, "--records", str(out / f"{name}.jsonl")] for name, extra in RUNS.items()]
    results = run_ranks(rt_workers.train_runs, 2, argvs, timeout_s=240, comm_timeout_s=60)
    return {"dir": out, **{name: [json.loads(line) for line in lines] for name, lines in zip(RUNS, results[0])}}


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_train_records_one_pass_per_step_and_the_window_plans(runs: dict) -> None:
    recs = runs["window"]
    assert [(r["step"], r["batch_index"], r["window"], r["window_pass"]) for r in recs] == [
        (0, 0, 0, 0),
        (1, 1, 0, 1),
        (2, 2, 1, 0),
        (3, 3, 1, 1),
    ]
    assert [r["optimizer_step"] for r in recs] == [False, True, False, True]
    assert [r["window_loss"] is None for r in recs] == [True, False, True, False]
    assert all(r["simulated_step_time_s"] > 0 and r["simulated_mode"] == "stream" for r in recs)
    records, _, plans = output_paths(str(runs["dir"] / "window.jsonl"))
    assert read_records(records.read_text()) == recs
    logged = [WindowPlan.from_json(line) for line in plans.read_text().splitlines()]
    assert [w.content_hash for w in logged] == [recs[0]["window_hash"], recs[2]["window_hash"]]
    assert [p.content_hash for w in logged for p in w.plans] == [r["plan_hash"] for r in recs]
    for w, (a, b) in zip(logged, (recs[:2], recs[2:])):
        assert a["window_tokens"] == b["window_tokens"] == w.total_tokens == a["num_tokens"] + b["num_tokens"]
        assert b["window_loss"] == pytest.approx(
            (a["loss"] * a["num_tokens"] + b["loss"] * b["num_tokens"]) / w.total_tokens
        )
        assert a["window_candidate"] == str(w.metadata["window_candidate"])
    assert all(set(WINDOW_FIELDS) <= set(r) for name in RUNS for r in runs[name])


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_window_loss_does_not_depend_on_the_assignment_or_the_sync(runs: dict) -> None:
    per_step = [r["window_loss"] for r in runs["per-step"] if r["optimizer_step"]]
    assert all(r["window_candidate"] == "per-step" for r in runs["per-step"])
    assert any(r["window_candidate"] != "per-step" for r in runs["window"])  # samples moved: the check means something
    for name in ("window", "once", "allreduce"):
        assert [r["window_loss"] for r in runs[name] if r["optimizer_step"]] == pytest.approx(per_step, rel=1e-6), name
    assert per_step[1] < per_step[0]  # one optimizer step per window, and it trains
    for rec in runs["once"]:
        assert rec["simulated_step_time_s"] is None and "--accumulate-sync window" in rec["simulated_note"]
    for rec in runs["allreduce"]:
        assert rec["simulated_step_time_s"] is None and "--grad-sync allreduce" in rec["simulated_note"]
