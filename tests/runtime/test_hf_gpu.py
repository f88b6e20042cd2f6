"""The transformers bridge on CUDA (bf16 autocast, NCCL, flash-attn / torch-varlen): run only with GPUs.

Skipped with a reason on machines without CUDA (never faked); the CPU side of what they rely on (the
bridge handing the kernel q, k, v in the autocast dtype, bf16 runs through the executor on gloo) runs
in the default suite (test_hf_bridge.py). One GPU: the bridged Qwen3 / Qwen3-MoE under bf16 autocast
(fp32 master weights, as ``nspsim_runtime.train --dtype bf16`` runs) with the flash-attn kernel if it is
installed, else torch's varlen kernel, against the same model with transformers' own ``sdpa`` under
the same autocast: loss within 2e-2 relative, every parameter's gradient with cosine similarity above
0.99. Two GPUs (NCCL): the multi-rank equivalence of the CPU suite, in bf16 with those tolerances and
in fp32 with the math kernel within 1e-5.
"""

from __future__ import annotations

import hf_workers
import pytest
import torch
from test_hf_bridge import (
    BF16_LOSS_RTOL,
    BF16_MIN_COSINE,
    DENSE,
    MOE,
    TOL,
    _one_device_plan,
    empty_rank_plan,
    hand_plans,
    planner_plans,
)

from nspsim.plan import Plan
from nspsim.specs.hf import resolve_model
from nspsim_runtime.data import synthetic_stream
from nspsim_runtime.executor import ExecOptions
from nspsim_runtime.hf.models import hf_causal_lm
from nspsim_runtime.kernels import kernel_available, select_kernel
from nspsim_runtime.launch import run_ranks
from nspsim_runtime.model import LocalAttention

pytest.importorskip("transformers")  # the optional 'hf' extra (installed by make test)
pytestmark = [pytest.mark.gpu, pytest.mark.timeout(600)]


def _need_gpus(n: int) -> None:
    if not torch.cuda.is_available() or torch.cuda.device_count() < n:
        pytest.skip(f"needs {n} CUDA GPU(s), found {torch.cuda.device_count() if torch.cuda.is_available() else 0}")


def _flash_kernel() -> str:
    """flash-attn if importable, else torch's varlen kernel; skip when neither runs here."""
    for name in ("flash-attn", "torch-varlen"):
        if kernel_available(name, torch.device("cuda")):
            return name
    pytest.skip("neither flash-attn nor torch.nn.attention.varlen is available")


@pytest.mark.parametrize("name", [DENSE, MOE])
def test_bridged_model_in_bf16_matches_transformers_sdpa_on_one_gpu(name: str) -> None:
    _need_gpus(1)
    kernel, dev = _flash_kernel(), torch.device("cuda", 0)
    lengths = [37, 1, 50, 12, 129]
    plan = _one_device_plan(name, lengths)
    case = hf_workers.HFCase(plan_json=plan.to_json(), model=name, seed=1, options=ExecOptions(autocast="bfloat16"))
    ref_loss, ref_grads = hf_workers.reference(case, device="cuda")
    stream = synthetic_stream(lengths, seed=1, index=plan.batch.index, vocab=resolve_model(name).vocab)
    ids, pos, tgt = (torch.as_tensor(x).to(dev) for x in (stream.ids, stream.positions, stream.targets))
    model = hf_causal_lm(name, seed=1).to(dev)
    seen: list[tuple[torch.dtype, ...]] = []
    inner = LocalAttention(select_kernel(kernel, dev), lengths)

    def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        seen.append((q.dtype, k.dtype, v.dtype))
        return inner(q, k, v)

    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(ids, pos, tgt, attention=attention)
    (loss / len(ids)).backward()
    assert set(seen) == {(torch.bfloat16,) * 3}
    grads = {n.removeprefix(hf_workers.PREFIX): p.grad.float().cpu() for n, p in model.named_parameters()}
    rel, cosine, worst = hf_workers.low_precision_gaps(float(loss.detach()) / len(ids), grads, ref_loss, ref_grads)
    assert rel < BF16_LOSS_RTOL and cosine > BF16_MIN_COSINE, (kernel, rel, cosine, worst)


def _nccl_cases(kernel: str) -> list[hf_workers.HFCase]:
    bf16 = ExecOptions(autocast="bfloat16", kernel=kernel)
    ulysses, ring = hand_plans(2, seed=2, model=MOE)
    dense, moe = planner_plans(2, DENSE, 0)[0], planner_plans(2, MOE, 1)[0]
    return [
        hf_workers.HFCase(plan_json=dense.to_json(), model=DENSE, seed=2, options=bf16),
        hf_workers.HFCase(
            plan_json=moe.to_json(),
            model=MOE,
            seed=3,
            options=ExecOptions(autocast="bfloat16", kernel=kernel, grad_sync="allreduce"),
        ),
        hf_workers.HFCase(plan_json=ulysses.to_json(), model=MOE, seed=4, options=bf16),
        hf_workers.HFCase(
            plan_json=ring.to_json(),
            model=DENSE,
            seed=5,
            options=ExecOptions(autocast="bfloat16", kernel=kernel, lookahead=1),
        ),
        hf_workers.HFCase(plan_json=empty_rank_plan(2).to_json(), model=MOE, seed=7, options=bf16),
        # fp32 with the math kernel: the exact comparison of the CPU suite, over NCCL
        hf_workers.HFCase(plan_json=ulysses.to_json(), model=DENSE, seed=6, options=ExecOptions(kernel="math")),
        hf_workers.HFCase(
            plan_json=moe.to_json(), model=MOE, seed=8, options=ExecOptions(kernel="math", grad_sync="allreduce")
        ),
    ]


def test_nccl_bridged_runs_match_the_single_process_transformers_model() -> None:
    _need_gpus(2)
    cases = _nccl_cases(_flash_kernel())
    results = run_ranks(hf_workers.hf_parity, 2, cases, backend="nccl", timeout_s=300)
    for i, case in enumerate(cases):
        plan = Plan.from_json(case.plan_json)
        reps = [res[i] for res in results]
        assert reps[0]["checksum"] == reps[1]["checksum"], (plan.planner, case.model)
        if case.options.autocast is None:
            ref_loss, ref_grads = hf_workers.reference(case)  # fp32 on the CPU
            assert all(abs(rep["loss"] - ref_loss) < TOL for rep in reps), (plan.planner, case.model)
            diffs = {n: float((reps[0]["grads"][n] - g).abs().max()) for n, g in ref_grads.items()}
            assert max(diffs.values()) < TOL, (plan.planner, case.model, max(diffs, key=diffs.__getitem__))
        else:
            ref_loss, ref_grads = hf_workers.reference(case, device="cuda")  # sdpa under the same autocast
            rel, cosine, worst = hf_workers.low_precision_gaps(reps[0]["loss"], reps[0]["grads"], ref_loss, ref_grads)
            assert rel < BF16_LOSS_RTOL and cosine > BF16_MIN_COSINE, (plan.planner, case.model, rel, cosine, worst)
