"""Rank functions for the multi-rank runtime tests (run in child processes by runtime.launch)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist

from nspsim.model_spec import get_model
from nspsim.plan import Plan
from runtime.data import rank_input, synthetic_stream
from runtime.executor import ExecOptions, NSPExecutor
from runtime.groups import GroupCache
from runtime.launch import RankEnv
from runtime.model import DecoderLM, LocalAttention
from runtime.attention_kernels import select_kernel


@dataclass(frozen=True)
class Case:
    """One parity check: a plan (JSON), the executor options and the model."""

    plan_json: str
    model: str = "tiny"
    seed: int = 0
    options: ExecOptions = field(default_factory=ExecOptions)


def reference(spec_name: str, seed: int, lengths: list[int], stream: Any, kernel: str = "math") -> tuple[float, dict[str, torch.Tensor]]:
    """Single-process loss (mean over tokens) and gradients on the whole batch."""
    spec = get_model(spec_name)
    model = DecoderLM(spec, seed=seed)
    ids, pos, tgt = (torch.as_tensor(x) for x in (stream.ids, stream.positions, stream.targets))
    loss = model(ids, pos, tgt, attention=LocalAttention(select_kernel(kernel, torch.device("cpu")), lengths))
    (loss / len(stream.ids)).backward()
    return float(loss.item()) / len(stream.ids), {n: p.grad.detach().clone() for n, p in model.named_parameters()}


def _full_grads(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    out = {}
    for name, p in model.named_parameters():
        g = p.grad
        out[name] = g.full_tensor() if hasattr(g, "full_tensor") else g
    return out


def parity(env: RankEnv, cases: list[Case]) -> list[dict[str, Any]]:
    """Execute every case with NSP and compare with the single-process reference on this rank."""
    reports = []
    groups = GroupCache(world=env.world, backend="gloo", timeout=__import__("datetime").timedelta(seconds=env.timeout_s))
    for case in cases:
        plan = Plan.from_json(case.plan_json)
        spec = get_model(case.model)
        stream = synthetic_stream(plan.lengths, seed=case.seed, index=plan.batch.index, vocab=spec.vocab)
        ref_loss, ref_grads = reference(case.model, case.seed, list(plan.lengths), stream)
        model = DecoderLM(spec, seed=case.seed)
        if case.options.grad_sync == "fsdp":
            from torch.distributed.fsdp import fully_shard
            for layer in model.layers:
                fully_shard(layer)
            fully_shard(model)
        ex = NSPExecutor(model=model, spec=spec, rank=env.rank, world=env.world, device=torch.device("cpu"),
                         groups=groups, options=case.options)
        res = ex.run(plan, rank_input(stream, env.rank, env.world))
        grads = _full_grads(model)
        diffs = {n: float((grads[n] - ref_grads[n]).abs().max()) for n in ref_grads}
        reports.append({"loss": res.loss, "ref_loss": ref_loss, "max_grad_diff": max(diffs.values()),
                        "worst": max(diffs, key=diffs.get), "log": list(ex.comm.log), "seconds": res.seconds})
    return reports


@dataclass(frozen=True)
class AttentionCase:
    """One backend check: a plan (JSON), per-sample recompute marks, streaming lookahead."""

    plan_json: str
    marks: tuple[bool, ...]
    lookahead: int = 1
    seed: int = 0


def attention_parity(env: RankEnv, cases: list[AttentionCase]) -> list[dict[str, Any]]:
    """Run NestedAttention on this rank's rows of a random batch; compare with one-device attention."""
    import numpy as np
    from datetime import timedelta

    from runtime.layout import rank_layout

    spec = get_model("tiny")
    groups = GroupCache(world=env.world, backend="gloo", timeout=timedelta(seconds=env.timeout_s))
    reports = []
    for case in cases:
        plan = Plan.from_json(case.plan_json)
        ex = NSPExecutor(model=None, spec=spec, rank=env.rank, world=env.world, device=torch.device("cpu"),
                         groups=groups, options=ExecOptions(lookahead=case.lookahead, kernel="cpu-flash"))
        gen = torch.Generator().manual_seed(case.seed)
        n = sum(plan.lengths)
        q, k, v = (torch.randn(n, h, spec.head_dim, generator=gen, dtype=torch.float64).float()
                   for h in (spec.num_heads, spec.num_kv_heads, spec.num_kv_heads))
        dout = torch.randn(n, spec.num_heads, spec.head_dim, generator=gen)
        ref = [t.clone().requires_grad_() for t in (q, k, v)]
        ref_out = LocalAttention(select_kernel("math", torch.device("cpu")), list(plan.lengths))(*ref)
        ref_out.backward(dout)
        rows = torch.as_tensor(rank_layout(plan, 0, env.rank).tokens)
        mine = [t.index_select(0, rows).clone().requires_grad_() for t in (q, k, v)]
        attention = ex.nested_attention(plan, 0, np.asarray(case.marks, dtype=bool))
        out = attention(*mine)
        out.backward(dout.index_select(0, rows))
        diffs = {"out": (out - ref_out.detach().index_select(0, rows)).abs().max().item() if rows.numel() else 0.0}
        for name, got, want in zip("qkv", mine, ref):
            diffs["d" + name] = ((got.grad - want.grad.index_select(0, rows)).abs().max().item()
                                 if rows.numel() else 0.0)
        reports.append({"diffs": diffs, "log": list(ex.comm.log), "rows": int(rows.numel()),
                        "seconds": dict(ex.clock.seconds)})
    return reports
