"""Rank functions and references for the transformers-bridge tests (run in child processes by nspsim_runtime.launch).

The reference is the unchanged transformers model with its own attention (``sdpa``, whose packed
causal mask transformers derives from ``position_ids``) on the whole packed batch in one process; the
NSP side is the same model (same config, same seed, so the same weights) built with
``attn_implementation=NSP_ATTENTION`` and run by ``NSPExecutor`` on every rank.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import torch
import torch.nn.functional as F
from rt_workers import run_case

from nspsim.plan import Plan
from nspsim_runtime.data import synthetic_stream
from nspsim_runtime.executor import ExecOptions
from nspsim_runtime.groups import GroupCache
from nspsim_runtime.launch import RankEnv

PREFIX = "hf."


@dataclass(frozen=True)
class HFCase:
    """One parity check: a plan (JSON), the transformers model name, the weight seed and executor options."""

    plan_json: str
    model: str = "hf-qwen3-tiny"
    seed: int = 0
    options: ExecOptions = field(default_factory=ExecOptions)


def reference(case: HFCase, device: str = "cpu") -> tuple[float, dict[str, torch.Tensor]]:
    """Single-process loss (mean over tokens) and gradients (on the CPU, fp32) of the whole packed
    batch, transformers' own ``sdpa`` attention on ``device``, under ``torch.autocast`` when the case's
    options ask for it (fp32 weights, as the executor runs)."""
    plan = Plan.from_json(case.plan_json)
    return _reference(case.model, case.seed, plan.batch.index, plan.lengths, case.options.autocast, device)


@functools.lru_cache(maxsize=16)
def _reference(
    name: str, seed: int, index: int, lengths: tuple[int, ...], autocast: str | None = None, device: str = "cpu"
) -> tuple[float, dict[str, torch.Tensor]]:
    from nspsim_runtime.hf.models import build_hf_model, config_of, hf_spec

    stream = synthetic_stream(lengths, seed=seed, index=index, vocab=hf_spec(name).vocab)
    model = build_hf_model(config_of(name), seed=seed, attn_implementation="sdpa").to(device)
    ids, pos, tgt = (torch.as_tensor(x).to(device) for x in (stream.ids, stream.positions, stream.targets))
    dev = torch.device(device).type
    with torch.autocast(dev, dtype=getattr(torch, autocast or "float32"), enabled=autocast is not None):
        logits = model(input_ids=ids[None], position_ids=pos[None], use_cache=False).logits[0]
        loss = F.cross_entropy(logits.float(), tgt, reduction="sum")
    (loss / len(ids)).backward()
    grads = {n: p.grad.detach().float().cpu() for n, p in model.named_parameters()}
    return float(loss.item()) / len(ids), grads


def low_precision_gaps(
    loss: float, grads: dict[str, torch.Tensor], ref_loss: float, ref_grads: dict[str, torch.Tensor]
) -> tuple[float, float, str]:
    """How far a bf16 run is from its reference: the loss's relative difference, the smallest cosine
    similarity of a parameter's gradient with the reference's (parameters whose gradients are both
    zero, e.g. experts no token reached, count as 1) and that parameter's name."""
    assert grads.keys() == ref_grads.keys()
    cosines = {}
    for name, ref in ref_grads.items():
        got, want = grads[name].double().flatten(), ref.double().flatten()
        if not got.any() and not want.any():
            cosines[name] = 1.0
        else:
            cosines[name] = float(F.cosine_similarity(got, want, dim=0, eps=1e-30))
    worst = min(cosines, key=cosines.__getitem__)
    return abs(loss - ref_loss) / abs(ref_loss), cosines[worst], worst


def hf_parity(env: RankEnv, cases: list[HFCase]) -> list[dict[str, Any]]:
    """Execute every case with NSP on the bridged transformers model. Rank 0 returns the summed
    gradients (named as in the transformers model); every rank its loss, a gradient checksum, its
    collective log and its execution-row count."""
    from nspsim.execution.layout import rank_layout
    from nspsim_runtime.hf.models import hf_causal_lm, hf_spec

    groups = GroupCache(world=env.world, backend=env.backend, timeout=timedelta(seconds=env.timeout_s))
    reports = []
    for case in cases:
        plan = Plan.from_json(case.plan_json)
        spec = hf_spec(case.model)
        model = hf_causal_lm(case.model, seed=case.seed).to(env.device)
        _, report = run_case(env, groups, plan, model, spec, case.options, case.seed, prefix=PREFIX)
        rows = sum(rank_layout(plan, mb, env.rank).num_rows for mb in range(plan.num_micro_batches))
        reports.append({**report, "rows": rows, "impl": model.model_impl})
    return reports
