"""GPU paths (NCCL groups, the communication stream, CUDA attention kernels): run only with GPUs.

Skipped with a reason on machines without CUDA (never faked). With two or more GPUs the same
multi-rank checks as the gloo suite run under NCCL: fp32 with the math kernel (exact comparison,
1e-5) and bf16 with the flash kernels (2e-2).
"""

from __future__ import annotations

import numpy as np
import pytest
import rt_workers
import torch
from test_runtime_multirank import TOL, hand_plans

from nspsim_runtime.exec_options import ExecOptions
from nspsim_runtime.kernels import kernel_available
from nspsim_runtime.launch import run_ranks

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(600)]


def _need_gpus(n: int) -> None:
    if not torch.cuda.is_available() or torch.cuda.device_count() < n:
        pytest.skip(f"needs {n} CUDA GPU(s), found {torch.cuda.device_count() if torch.cuda.is_available() else 0}")


def _attention_cases(kernel: str, dtype: str) -> list[rt_workers.AttentionCase]:
    cases = []
    for lookahead, plan in enumerate(hand_plans(2, seed=11)[:2]):
        marks = tuple(bool(x) for x in np.random.default_rng(lookahead).random(plan.num_samples) < 0.5)
        cases.append(
            rt_workers.AttentionCase(
                plan_json=plan.to_json(), marks=marks, lookahead=lookahead, kernel=kernel, dtype=dtype
            )
        )
    return cases


@pytest.mark.parametrize(
    "kernel,dtype,tol", [("math", "float32", TOL), ("torch-varlen", "bfloat16", 2e-2), ("flash-attn", "bfloat16", 2e-2)]
)
def test_nccl_backends_match_single_device_attention(kernel: str, dtype: str, tol: float) -> None:
    _need_gpus(2)
    if not kernel_available(kernel, torch.device("cuda")):
        pytest.skip(f"{kernel} is not installed")
    cases = _attention_cases(kernel, dtype)
    results = run_ranks(rt_workers.attention_parity, 2, cases, backend="nccl", timeout_s=300)
    for i, case in enumerate(cases):
        ref = rt_workers.attention_reference(case)
        for rank, reps in enumerate(results):
            rep = reps[i]
            for got, want in zip([rep["out"], *rep["grads"]], ref):
                if got.numel():
                    scale = max(1.0, float(want.abs().max())) if dtype != "float32" else 1.0
                    assert float((got - want.index_select(0, rep["rows"])).abs().max()) < tol * scale, (rank, kernel)


def test_nccl_model_parity_with_fsdp_and_allreduce() -> None:
    _need_gpus(2)
    nested_u, nested_r, disjoint = hand_plans(2, seed=12)
    cases = [
        rt_workers.Case(plan_json=nested_u.to_json(), seed=1, options=ExecOptions(kernel="math")),
        rt_workers.Case(
            plan_json=nested_r.to_json(), seed=2, options=ExecOptions(kernel="math", grad_sync="allreduce")
        ),
        rt_workers.Case(plan_json=disjoint.to_json(), seed=3, options=ExecOptions(kernel="math", lookahead=0)),
    ]
    results = run_ranks(rt_workers.parity, 2, cases, backend="nccl", timeout_s=300)
    for i, case in enumerate(cases):
        ref_loss, ref_grads = rt_workers.reference(case)
        assert abs(results[0][i]["loss"] - ref_loss) < TOL
        for name, ref in ref_grads.items():
            assert float((results[0][i]["grads"][name] - ref).abs().max()) < TOL, name
