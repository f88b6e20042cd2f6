"""Sliding-window attention in the runtime: banded kernels against a dense reference, a windowed
transformers model through the bridge against transformers' own ``sdpa`` (one process), NSP on 2 gloo
ranks (nested Ulysses with recompute marks, and a planner's plan) against the single-process model,
the built-in decoder's per-layer windows, and Ring refusing a window with nspsim's line."""

from __future__ import annotations

import json
import math
from pathlib import Path

import hf_workers
import numpy as np
import pytest
import torch

from helpers import make_batch
from nspsim.plan import Plan, make_plan
from nspsim.planners import get_planner
from nspsim.sp_tree import Node
from nspsim.specs.backend import window_refusal
from nspsim.specs.clusters import get_cluster
from nspsim.specs.hf import resolve_model
from nspsim.specs.model import ModelSpec, tiny
from nspsim.workload import WorkloadConfig, build_workload
from nspsim_runtime.backends.base import NodeTask
from nspsim_runtime.backends.ring import RingBackend
from nspsim_runtime.data import synthetic_stream
from nspsim_runtime.hf.models import hf_causal_lm
from nspsim_runtime.kernels import KERNELS, Segments, kernel_available, select_kernel
from nspsim_runtime.launch import run_ranks
from nspsim_runtime.model import DecoderLM, LocalAttention, layer_window

pytest.importorskip("transformers")

CPU = torch.device("cpu")
TOL = 1e-5
SHAPES = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "vocab_size": 256,
    "max_position_embeddings": 4096,
}
CONFIGS = {
    "mistral-w8.json": {"model_type": "mistral", **SHAPES, "head_dim": 8, "sliding_window": 8},
    "mistral-full.json": {"model_type": "mistral", **SHAPES, "head_dim": 8, "sliding_window": None},
    # Qwen2 with max_window_layers 1: layer 0 full, layer 1 within 6 tokens
    "qwen2-w6.json": {"model_type": "qwen2", **SHAPES, "use_sliding_window": True, "sliding_window": 6,
                      "max_window_layers": 1},
}  # fmt: skip


@pytest.fixture(scope="module")
def configs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    folder = tmp_path_factory.mktemp("windowed")
    paths = {}
    for name, config in CONFIGS.items():
        (folder / name).write_text(json.dumps(config))
        paths[name] = str(folder / name)
    return paths


# ---- kernels -----------------------------------------------------------------------------------------
def banded_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, seg: Segments) -> torch.Tensor:
    """Autograd reference: one masked softmax over the packed buffer, key j visible to query i of the
    same segment when i - W < j <= i."""
    groups = q.shape[1] // k.shape[1]
    ke, ve = (t.repeat_interleave(groups, dim=1) for t in (k, v))
    s = torch.einsum("qhd,khd->hqk", q.double(), ke.double()) / math.sqrt(q.shape[-1])
    allowed = torch.zeros(q.shape[0], k.shape[0], dtype=torch.bool)
    for i in range(seg.num):
        a, b = seg.cu_q[i], seg.cu_q[i + 1]
        for row in range(a, b):
            allowed[row, max(a, row - (seg.window or b) + 1) : row + 1] = True
    p = torch.softmax(s.masked_fill(~allowed, -math.inf), dim=-1).nan_to_num(0.0)
    return torch.einsum("hqk,khd->qhd", p, ve.double())


@pytest.mark.parametrize("name", [n for n in KERNELS if kernel_available(n, CPU)])
@pytest.mark.parametrize("window", [1, 3, 64])
def test_cpu_kernels_attend_within_the_window(name: str, window: int) -> None:
    seg = Segments.same([5, 1, 11, 0, 7], window)
    gen = torch.Generator().manual_seed(window)
    q = torch.randn(seg.total_q, 4, 8, generator=gen)
    k, v = (torch.randn(seg.total_q, 2, 8, generator=gen) for _ in range(2))
    kernel = select_kernel(name, CPU)
    out, lse = kernel.forward(q, k, v, seg, causal=True)
    qr, kr, vr = (t.clone().double().requires_grad_() for t in (q, k, v))
    ref = banded_reference(qr, kr, vr, seg)
    torch.testing.assert_close(out.double(), ref.detach(), atol=1e-5, rtol=1e-5)
    dout = torch.randn_like(out)
    dq, dk, dv = kernel.backward(dout, q, k, v, out, lse, seg, causal=True)
    ref.backward(dout.double())
    for got, want in ((dq, qr), (dk, kr), (dv, vr)):
        torch.testing.assert_close(got.double(), want.grad, atol=1e-5, rtol=1e-5)
    if window == 64:  # wider than every segment: full causal attention
        full, _ = kernel.forward(q, k, v, Segments.same([5, 1, 11, 0, 7]), causal=True)
        torch.testing.assert_close(out, full)


def test_a_window_is_positive_and_causal_only() -> None:
    with pytest.raises(ValueError, match="positive token count"):
        Segments.same([3], 0)
    q = torch.zeros(3, 2, 4)
    with pytest.raises(ValueError, match="causal segments only"):
        Segments.same([3], 2).check(q, q, causal=False)


# ---- one process: the bridge against transformers ----------------------------------------------------
LENGTHS = [37, 1, 50, 12]


def _plan(model: str, lengths: list[int], world: int = 1) -> Plan:
    return make_plan(
        planner="hand",
        cluster=get_cluster("cpu", world),
        model=resolve_model(model),
        batch=make_batch(lengths),
        spmax=world,
        token_budget=10**6,
        nodes=[Node(1, 0)] * len(lengths),
    )


@pytest.mark.parametrize("config", ["mistral-w8.json", "qwen2-w6.json"])
@pytest.mark.parametrize("kernel", ["cpu-flash", "math"])
def test_a_windowed_model_equals_transformers_sdpa(configs: dict[str, str], config: str, kernel: str) -> None:
    path = configs[config]
    plan = _plan(path, LENGTHS)
    ref_loss, ref_grads = hf_workers.reference(hf_workers.HFCase(plan_json=plan.to_json(), model=path, seed=1))
    stream = synthetic_stream(LENGTHS, seed=1, index=plan.batch.index, vocab=resolve_model(path).vocab)
    ids, pos, tgt = (torch.as_tensor(x) for x in (stream.ids, stream.positions, stream.targets))
    model = hf_causal_lm(path, seed=1)
    windows: list[int | None] = []
    inner = LocalAttention(select_kernel(kernel, CPU), LENGTHS)

    def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int | None = None) -> torch.Tensor:
        windows.append(window)
        return inner(q, k, v, window=window)

    loss = model(ids, pos, tgt, attention=attention)
    (loss / len(ids)).backward()
    assert windows == ([8, 8] if config.startswith("mistral") else [None, 6])
    assert abs(float(loss.detach()) / len(ids) - ref_loss) < TOL
    grads = {n.removeprefix(hf_workers.PREFIX): p.grad for n, p in model.named_parameters()}
    assert max(float((grads[n] - g).abs().max()) for n, g in ref_grads.items()) < TOL


def test_the_window_changes_the_loss(configs: dict[str, str]) -> None:
    """The reference itself depends on the window, so the equality above can fail."""
    losses = []
    for name in ("mistral-w8.json", "mistral-full.json"):
        plan = _plan(configs[name], LENGTHS)
        losses.append(hf_workers.reference(hf_workers.HFCase(plan_json=plan.to_json(), model=configs[name], seed=1))[0])
    assert abs(losses[0] - losses[1]) > 1e-3


def test_the_built_in_decoder_windows_the_layers_its_spec_names() -> None:
    spec = ModelSpec(**{**tiny().record(), "sliding_window": 4, "window_layers": (1,)})
    assert [layer_window(spec, i) for i in range(2)] == [None, 4]
    model = DecoderLM(spec, seed=0)
    seen: list[int | None] = []
    inner = LocalAttention(select_kernel("math", CPU), [9, 3])

    def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int | None = None) -> torch.Tensor:
        seen.append(window)
        return inner(q, k, v, window=window)

    ids = torch.arange(12)
    positions = torch.tensor([*range(9), *range(3)])
    windowed = model(ids, positions, ids, attention=attention)
    full = DecoderLM(tiny(), seed=0)(ids, positions, ids, attention=inner)
    assert seen == [None, 4] and abs(float(windowed.detach()) - float(full.detach())) > 1e-6


def test_ring_refuses_a_window_with_nspsims_line() -> None:
    task = NodeTask(slot=None, q=torch.zeros(0), k=torch.zeros(0), v=torch.zeros(0), recompute=np.zeros(0, bool))  # type: ignore[arg-type]
    task.window = 8
    line = window_refusal("ring", 8)
    assert line is not None
    with pytest.raises(ValueError, match=line.replace("(", r"\(").replace(")", r"\)")):
        RingBackend(num_heads=8, num_kv_heads=2).fwd_prologue(task, None)  # type: ignore[arg-type]


# ---- two gloo ranks ----------------------------------------------------------------------------------
def _cases(configs: dict[str, str]) -> list[hf_workers.HFCase]:
    rng = np.random.default_rng(2)
    lengths = rng.integers(1, 40, size=8).tolist()
    nodes = [Node(int(d), int(rng.integers(0, 2 // d))) for d in rng.choice([1, 2], size=8)]
    marks = (rng.random(8) < 0.5).tolist()
    out = []
    for name in ("mistral-w8.json", "qwen2-w6.json"):
        path = configs[name]
        nested = make_plan(
            planner="hand-ulysses",
            cluster=get_cluster("cpu", 2),
            model=resolve_model(path),
            batch=make_batch(lengths),
            spmax=2,
            token_budget=10**6,
            nodes=nodes,
            recompute=marks,
            backend="ulysses",
        )
        wl = build_workload(
            WorkloadConfig(model=path, cluster="cpu", gpus=2, trace="longtail-paper", tokens_per_batch=384,
                           max_context=192, token_budget=250, seed=2)
        )  # fmt: skip
        planned = get_planner("nsp").plan(wl.sampler.batch(0), wl)
        out += [hf_workers.HFCase(plan_json=p.to_json(), model=path, seed=3) for p in (nested, planned)]
    return out


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_nsp_on_two_ranks_equals_the_single_process_windowed_model(configs: dict[str, str]) -> None:
    cases = _cases(configs)
    assert any(max(Plan.from_json(c.plan_json).lengths) > 8 for c in cases)  # samples longer than the window
    results = run_ranks(hf_workers.hf_parity, 2, cases, timeout_s=240, comm_timeout_s=60)
    largest = 0.0
    for i, case in enumerate(cases):
        ref_loss, ref_grads = hf_workers.reference(case)
        reps = [res[i] for res in results]
        for rank, rep in enumerate(reps):
            assert abs(rep["loss"] - ref_loss) < TOL, (rank, case.model, rep["loss"], ref_loss)
        grads = reps[0]["grads"]
        assert grads.keys() == ref_grads.keys()
        worst = max(float((grads[n] - g).abs().max()) for n, g in ref_grads.items())
        assert worst < TOL, (case.model, Plan.from_json(case.plan_json).planner, worst)
        largest = max(largest, worst)
    print(f"2 ranks, windowed models: largest gradient difference {largest:.3g}")


def test_ring_training_of_a_windowed_model_is_refused_before_it_runs(configs: dict[str, str]) -> None:
    with pytest.raises(ValueError, match="the ring backend does not support sliding-window attention") as err:
        build_workload(WorkloadConfig(model=configs["mistral-w8.json"], cluster="cpu", gpus=2, backend="ring"))
    assert str(err.value) == window_refusal("ring", 8)
    assert Path(configs["mistral-full.json"]).exists()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_executor_refuses_a_ring_plan_of_a_windowed_model_on_every_rank(configs: dict[str, str]) -> None:
    from nspsim_runtime.launch import LaunchError

    path = configs["mistral-w8.json"]
    ring = make_plan(
        planner="hand-ring",
        cluster=get_cluster("cpu", 2),
        model=resolve_model(path),
        batch=make_batch([20, 9]),
        spmax=2,
        token_budget=10**6,
        nodes=[Node(2, 0), Node(1, 1)],
        backend="ring",
    )
    case = hf_workers.HFCase(plan_json=ring.to_json(), model=path, seed=3)
    with pytest.raises(LaunchError) as err:
        run_ranks(hf_workers.hf_parity, 2, [case], timeout_s=240, comm_timeout_s=60)
    line = window_refusal("ring", 8)
    assert line is not None and str(err.value).count(line) >= 2, str(err.value)  # both ranks, the same line
