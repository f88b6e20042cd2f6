"""Rank functions for the multi-rank runtime tests (run in child processes by nspsim_runtime.launch)."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

import torch

from nspsim.plan import Plan
from nspsim.specs.model import get_model
from nspsim_runtime.data import rank_input, synthetic_stream
from nspsim_runtime.exec_options import ExecOptions
from nspsim_runtime.executor import NSPExecutor
from nspsim_runtime.groups import GroupCache
from nspsim_runtime.kernels import select_kernel
from nspsim_runtime.launch import RankEnv
from nspsim_runtime.model import DecoderLM, LocalAttention, fsdp_shard


@dataclass(frozen=True)
class Case:
    """One parity check: a plan (JSON), the executor options and the model."""

    plan_json: str
    model: str = "tiny"
    seed: int = 0
    options: ExecOptions = field(default_factory=ExecOptions)


def reference(case: Case) -> tuple[float, dict[str, torch.Tensor]]:
    """Single-process loss (mean over tokens) and gradients of a case's whole batch. The kernel is the
    CPU flash one (checked against a float64 dense reference in test_runtime_kernels; the attention
    parity test compares the distributed backends with the independent math kernel)."""
    plan = Plan.from_json(case.plan_json)
    return _reference(case.model, case.seed, plan.batch.index, plan.lengths)


@functools.lru_cache(maxsize=16)
def _reference(
    model_name: str, seed: int, index: int, lengths: tuple[int, ...]
) -> tuple[float, dict[str, torch.Tensor]]:
    spec = get_model(model_name)
    stream = synthetic_stream(lengths, seed=seed, index=index, vocab=spec.vocab)
    model = DecoderLM(spec, seed=seed)
    ids, pos, tgt = (torch.as_tensor(x) for x in (stream.ids, stream.positions, stream.targets))
    attention = LocalAttention(select_kernel("cpu-flash", torch.device("cpu")), list(lengths))
    loss = model(ids, pos, tgt, attention=attention)
    (loss / len(stream.ids)).backward()
    return float(loss.item()) / len(stream.ids), {n: p.grad.detach().clone() for n, p in model.named_parameters()}


def full_grads(model: torch.nn.Module, prefix: str = "") -> dict[str, torch.Tensor]:
    """Every parameter's whole gradient (FSDP shards gathered), named without ``prefix``."""
    out = {}
    for name, p in model.named_parameters():
        g = p.grad
        out[name.removeprefix(prefix)] = g.full_tensor() if hasattr(g, "full_tensor") else g
    return out


def run_case(
    env: RankEnv,
    groups: GroupCache,
    plan: Plan,
    model: torch.nn.Module,
    spec: Any,
    options: ExecOptions,
    seed: int,
    prefix: str = "",
) -> tuple[float, dict[str, Any]]:
    """Run ``plan`` on this rank with ``model`` (FSDP-sharded first when ``options`` ask for it), on
    the synthetic batch of ``seed``; the executor's seconds, and the parity report every
    case returns: loss, rank 0's gradients (named without ``prefix``), a gradient checksum, the
    collective log."""
    stream = synthetic_stream(plan.lengths, seed=seed, index=plan.batch.index, vocab=spec.vocab)
    if options.grad_sync == "fsdp":
        fsdp_shard(model, model.layers)
    ex = NSPExecutor(
        model=model, spec=spec, rank=env.rank, world=env.world, device=env.device, groups=groups, options=options
    )
    res = ex.run(plan, rank_input(stream, env.rank, env.world))
    grads = {name: g.cpu() for name, g in full_grads(model, prefix).items()}
    report = {
        "loss": res.loss,
        "grads": grads if env.rank == 0 else None,
        "checksum": float(sum(g.double().abs().sum() for g in grads.values())),
        "log": list(ex.comm.log),
    }
    return res.seconds, report


def parity(env: RankEnv, cases: list[Case]) -> list[dict[str, Any]]:
    """Execute every case with NSP. Rank 0 returns the summed gradients (the caller compares them
    with the single-process reference); every rank returns a checksum of its gradients."""
    from datetime import timedelta

    reports = []
    groups = GroupCache(world=env.world, backend=env.backend, timeout=timedelta(seconds=env.timeout_s))
    for case in cases:
        plan = Plan.from_json(case.plan_json)
        spec = get_model(case.model)
        model = DecoderLM(spec, seed=case.seed).to(env.device)
        seconds, report = run_case(env, groups, plan, model, spec, case.options, case.seed)
        reports.append({**report, "seconds": seconds})
    return reports


@dataclass(frozen=True)
class AttentionCase:
    """One backend check: a plan (JSON), per-sample recompute marks, streaming lookahead."""

    plan_json: str
    marks: tuple[bool, ...]
    lookahead: int | None = None
    seed: int = 0
    kernel: str = "cpu-flash"
    dtype: str = "float32"


def attention_inputs(case: AttentionCase) -> tuple[torch.Tensor, ...]:
    """Random q, k, v and output gradient of a case's whole batch (identical on every rank)."""
    spec = get_model("tiny")
    n = sum(Plan.from_json(case.plan_json).lengths)
    gen = torch.Generator().manual_seed(case.seed)
    heads = (spec.num_heads, spec.num_kv_heads, spec.num_kv_heads, spec.num_heads)
    return tuple(torch.randn(n, h, spec.head_dim, generator=gen) for h in heads)


def attention_reference(case: AttentionCase) -> tuple[torch.Tensor, ...]:
    """Single-device output and q, k, v gradients (math kernel, whole samples)."""
    q, k, v, dout = attention_inputs(case)
    ref = [t.clone().requires_grad_() for t in (q, k, v)]
    lengths = list(Plan.from_json(case.plan_json).lengths)
    out = LocalAttention(select_kernel("math", torch.device("cpu")), lengths)(*ref)
    out.backward(dout)
    return (out.detach(), *(t.grad for t in ref))


def attention_parity(env: RankEnv, cases: list[AttentionCase]) -> list[dict[str, Any]]:
    """Run NestedAttention on this rank's execution rows of a random batch; return the rows, the
    output and the q, k, v gradients (the caller compares them with one-device attention)."""
    from datetime import timedelta

    import numpy as np

    from nspsim.execution.layout import rank_layout

    spec = get_model("tiny")
    groups = GroupCache(world=env.world, backend=env.backend, timeout=timedelta(seconds=env.timeout_s))
    reports = []
    for case in cases:
        plan = Plan.from_json(case.plan_json)
        ex = NSPExecutor(
            model=None,
            spec=spec,
            rank=env.rank,
            world=env.world,
            device=env.device,
            groups=groups,
            options=ExecOptions(lookahead=case.lookahead, kernel=case.kernel),
        )
        q, k, v, dout = attention_inputs(case)
        rows = torch.as_tensor(rank_layout(plan, 0, env.rank).tokens)
        dtype = getattr(torch, case.dtype)
        mine = [t.index_select(0, rows).to(env.device, dtype).requires_grad_() for t in (q, k, v)]
        out = ex.nested_attention(plan, 0, np.asarray(case.marks, dtype=bool))(*mine)
        out.backward(dout.index_select(0, rows).to(env.device, dtype))
        reports.append(
            {
                "rows": rows,
                "out": out.detach().float().cpu(),
                "grads": [t.grad.float().cpu() for t in mine],
                "log": list(ex.comm.log),
                "seconds": dict(ex.clock.seconds),
            }
        )
    return reports


def repeated_steps(env: RankEnv, plans: list[str]) -> list[dict[str, Any]]:
    """One executor runs the plans as consecutive steps; after each step report the sizes of its
    per-step state (index cache, collective log), the log's first entry and the process groups the
    step created (``GroupCache.created`` entries added by it, as (degree, index))."""
    from datetime import timedelta

    if not plans:
        return []
    spec = get_model("tiny")
    groups = GroupCache(world=env.world, backend=env.backend, timeout=timedelta(seconds=env.timeout_s))
    model = DecoderLM(spec, seed=0).to(env.device)
    ex = NSPExecutor(
        model=model,
        spec=spec,
        rank=env.rank,
        world=env.world,
        device=env.device,
        groups=groups,
        options=ExecOptions(grad_sync="allreduce"),
    )
    out = []
    for plan_json in plans:
        plan = Plan.from_json(plan_json)
        stream = synthetic_stream(plan.lengths, seed=0, index=plan.batch.index, vocab=spec.vocab)
        before = len(groups.created)
        ex.run(plan, rank_input(stream, env.rank, env.world))
        model.zero_grad(set_to_none=True)
        out.append(
            {
                "memo": len(ex.ctx.memo),
                "log": len(ex.comm.log),
                "first": ex.comm.log[0][1],
                "created": [(n.degree, n.index) for n in groups.created[before:]],
            }
        )
    return out


def suite(env: RankEnv, payload: dict[str, list[Any]]) -> dict[str, list[dict[str, Any]]]:
    """Several checks in one launch (process start-up dominates on small machines)."""
    return {
        "attention": attention_parity(env, payload.get("attention", [])),
        "parity": parity(env, payload.get("parity", [])),
        "repeat": repeated_steps(env, payload.get("repeat", [])),
    }


def mismatched_plans(env: RankEnv, plans: list[str]) -> None:
    """Rank r executes ``plans[r]``: ranks that disagree must all stop with PlanMismatchError."""
    from datetime import timedelta

    plan = Plan.from_json(plans[env.rank])
    spec = get_model("tiny")
    groups = GroupCache(world=env.world, backend="gloo", timeout=timedelta(seconds=env.timeout_s))
    ex = NSPExecutor(
        model=DecoderLM(spec, seed=0),
        spec=spec,
        rank=env.rank,
        world=env.world,
        device=torch.device("cpu"),
        groups=groups,
        options=ExecOptions(grad_sync="allreduce"),
    )
    stream = synthetic_stream(plan.lengths, seed=0, index=0, vocab=spec.vocab)
    ex.run(plan, rank_input(stream, env.rank, env.world))


def dies_mid_step(env: RankEnv, payload: tuple[str, int]) -> None:
    """Rank ``victim`` exits abruptly inside its second attention kernel call of the step; the
    others must fail with an error instead of hanging."""
    import os
    from datetime import timedelta

    plan_json, victim = payload
    plan = Plan.from_json(plan_json)
    spec = get_model("tiny")
    groups = GroupCache(world=env.world, backend="gloo", timeout=timedelta(seconds=env.timeout_s))
    ex = NSPExecutor(
        model=DecoderLM(spec, seed=0),
        spec=spec,
        rank=env.rank,
        world=env.world,
        device=torch.device("cpu"),
        groups=groups,
        options=ExecOptions(grad_sync="allreduce"),
    )
    if env.rank == victim:
        kernel, calls = ex.ctx.kernel, [0]
        original = kernel.forward

        def dying_forward(*args: Any, **kw: Any) -> Any:
            calls[0] += 1
            if calls[0] == 2:
                os._exit(17)
            return original(*args, **kw)

        kernel.forward = dying_forward  # type: ignore[method-assign]
    stream = synthetic_stream(plan.lengths, seed=0, index=0, vocab=spec.vocab)
    ex.run(plan, rank_input(stream, env.rank, env.world))


def train_runs(env: RankEnv, argvs: list[list[str]]) -> list[list[str]]:
    """``nspsim_runtime.train`` once per argument list, in this already-initialised world; rank 0's records."""
    from nspsim_runtime.training.args import parse_args
    from nspsim_runtime.training.trainer import run

    return [run(parse_args(argv)) for argv in argvs]


def stalls_mid_step(env: RankEnv, payload: tuple[str, int, float]) -> None:
    """Rank ``victim`` hangs inside its second attention kernel call (outside any collective) under
    a watchdog of ``watchdog_s``; its peers block in a collective until the group timeout."""
    import time as _time
    from datetime import timedelta

    from nspsim_runtime.watchdog import Watchdog

    plan_json, victim, watchdog_s = payload
    plan = Plan.from_json(plan_json)
    spec = get_model("tiny")
    groups = GroupCache(world=env.world, backend="gloo", timeout=timedelta(seconds=env.timeout_s))
    ex = NSPExecutor(
        model=DecoderLM(spec, seed=0),
        spec=spec,
        rank=env.rank,
        world=env.world,
        device=torch.device("cpu"),
        groups=groups,
        options=ExecOptions(grad_sync="allreduce"),
    )
    if env.rank == victim:
        kernel, calls = ex.ctx.kernel, [0]
        original = kernel.forward

        def stuck_forward(*args: Any, **kw: Any) -> Any:
            calls[0] += 1
            if calls[0] == 2:
                _time.sleep(3600)
            return original(*args, **kw)

        kernel.forward = stuck_forward  # type: ignore[method-assign]
    watchdog = Watchdog(rank=env.rank)
    watchdog.arm("step 0", watchdog_s)
    stream = synthetic_stream(plan.lengths, seed=0, index=0, vocab=spec.vocab)
    ex.run(plan, rank_input(stream, env.rank, env.world))


@dataclass(frozen=True)
class WindowCase:
    """One accumulation check: a window plan (JSON), the executor options, the accumulate-sync mode."""

    window_json: str
    seed: int = 0
    options: ExecOptions = field(default_factory=ExecOptions)
    accumulate_sync: str = "pass"


def window_parity(env: RankEnv, cases: list[WindowCase]) -> list[dict[str, Any]]:
    """Run every pass of each case's window as ``nspsim_runtime.train --accumulate`` does (loss over the
    window's tokens, gradients synchronised as ``pass_syncs`` says) without stepping the optimizer; rank 0
    returns the accumulated gradients, every rank the window's loss and how many parameters held a
    (sharded) gradient after the first pass."""
    from datetime import timedelta

    from nspsim.plan.window import WindowPlan
    from nspsim_runtime.data import pass_streams
    from nspsim_runtime.exec_options import pass_syncs

    groups = GroupCache(world=env.world, backend=env.backend, timeout=timedelta(seconds=env.timeout_s))
    out = []
    for case in cases:
        window = WindowPlan.from_json(case.window_json)
        spec = get_model("tiny")
        model = DecoderLM(spec, seed=case.seed).to(env.device)
        if case.options.grad_sync == "fsdp":
            fsdp_shard(model, model.layers)
        ex = NSPExecutor(
            model=model,
            spec=spec,
            rank=env.rank,
            world=env.world,
            device=env.device,
            groups=groups,
            options=case.options,
        )
        streams = pass_streams(
            window.source_lengths,
            window.assignment,
            seed=case.seed,
            first_index=window.sources[0].index,
            vocab=spec.vocab,
        )
        loss, with_grad = 0.0, -1
        for k, plan in enumerate(window.plans):
            last = k == window.size - 1
            sync = pass_syncs(last=last, accumulate_sync=case.accumulate_sync, grad_sync=case.options.grad_sync)
            res = ex.run(
                plan, rank_input(streams[k], env.rank, env.world), window_tokens=window.total_tokens, sync=sync
            )
            loss += res.loss * res.num_tokens
            if k == 0:
                with_grad = sum(p.grad is not None for p in model.parameters())
        grads = {name: g.cpu() for name, g in full_grads(model).items()}
        out.append(
            {"loss": loss / window.total_tokens, "grads": grads if env.rank == 0 else None, "with_grad": with_grad}
        )
    return out
