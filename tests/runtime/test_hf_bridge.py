"""The transformers bridge: an unchanged Qwen3 / Qwen3-MoE model from transformers runs under NSP plans.

Single process: the bridged model (NSP's registered attention, here with the one-device reference
attention plugged in) equals the same model with transformers' own ``sdpa`` attention; what the bridge
does not support is refused in one line. Multi-rank (one launch per world: 2, 4 and 8 gloo ranks): for a
plan from every registered planner on random long-tail batches (dense and MoE), plus nested Ulysses
and Ring plans with recompute marks and a plan that leaves a rank without rows, the NSP loss equals the
single-process transformers model's on the same packed batch and weights, and every parameter gradient
is within 1e-5 (fp32), with FSDP2 and with the all-reduce.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import hf_workers
import numpy as np
import pytest
import torch

from helpers import make_batch
from nspsim.execution.layout import rank_layout
from nspsim.execution.schedule import order_conflicts
from nspsim.plan import Plan, make_plan
from nspsim.planners import PLANNER_NAMES, get_planner
from nspsim.sp_tree import Node
from nspsim.specs.clusters import get_cluster
from nspsim.specs.hf import load_hf_config, resolve_model
from nspsim.workload import WorkloadConfig, build_workload
from nspsim_runtime.data import synthetic_stream
from nspsim_runtime.executor import ExecOptions
from nspsim_runtime.hf.bridge import NSP_ATTENTION, HFCausalLM, attention_scope, kernel_dtype, nsp_attention_forward
from nspsim_runtime.hf.models import build_hf_model, config_of, hf_causal_lm
from nspsim_runtime.kernels import select_kernel
from nspsim_runtime.launch import run_ranks
from nspsim_runtime.model import LocalAttention

pytest.importorskip("transformers")  # the optional 'hf' extra (installed by make test)

TOL = 1e-5
DENSE, MOE = "hf-qwen3-tiny", "hf-qwen3-moe-tiny"
WORLDS = [2, 4, 8]
"""8 ranks cost ~50 s on 2 cores: each rank imports torch and transformers (5.6 s of CPU), so 8 ranks on
2 cores spend ~22 s before any work (largest gradient difference at 8 ranks 1.9e-8)."""


def _cpu_attention(lengths: list[int]) -> LocalAttention:
    return LocalAttention(select_kernel("cpu-flash", torch.device("cpu")), lengths)


def _one_device_plan(name: str, lengths: list[int]) -> Plan:
    return make_plan(
        planner="hand",
        cluster=get_cluster("cpu", 1),
        model=resolve_model(name),
        batch=make_batch(lengths),
        spmax=1,
        token_budget=10**6,
        nodes=[Node(1, 0)] * len(lengths),
    )


# ---- single process ----------------------------------------------------------------------------------
@pytest.mark.parametrize("name", [DENSE, MOE])
def test_bridged_model_equals_transformers_sdpa_on_a_packed_batch(name: str) -> None:
    lengths = [37, 1, 50, 12]
    plan = _one_device_plan(name, lengths)
    ref_loss, ref_grads = hf_workers.reference(hf_workers.HFCase(plan_json=plan.to_json(), model=name, seed=1))
    stream = synthetic_stream(lengths, seed=1, index=plan.batch.index, vocab=resolve_model(name).vocab)
    ids, pos, tgt = (torch.as_tensor(x) for x in (stream.ids, stream.positions, stream.targets))
    model = hf_causal_lm(name, seed=1)
    loss = model(ids, pos, tgt, attention=_cpu_attention(lengths))
    (loss / len(ids)).backward()
    assert abs(float(loss.detach()) / len(ids) - ref_loss) < TOL
    grads = {n.removeprefix(hf_workers.PREFIX): p.grad for n, p in model.named_parameters()}
    assert grads.keys() == ref_grads.keys()
    assert max(float((grads[n] - g).abs().max()) for n, g in ref_grads.items()) < TOL
    assert model.model_impl == f"transformers.{'Qwen3MoeForCausalLM' if name == MOE else 'Qwen3ForCausalLM'}"
    assert sum(p.numel() for p in model.parameters()) == resolve_model(name).total_params


BF16_LOSS_RTOL, BF16_MIN_COSINE = 2e-2, 0.99
"""bf16 autocast against transformers' sdpa under the same autocast: both round differently."""


@pytest.mark.parametrize("kernel", ["cpu-flash", "math"])
@pytest.mark.parametrize("name", [DENSE, MOE])
def test_bridged_model_under_bf16_autocast_matches_transformers_sdpa(name: str, kernel: str) -> None:
    """Under bf16 autocast with fp32 weights transformers hands the attention fp32 q, k (QK-norm times
    an fp32 weight) and a bf16 v; the bridge gives the kernel all three in bf16 (the CPU flash kernel
    refuses mixed dtypes), as the CUDA flash kernels need."""
    lengths = [37, 1, 50, 12]
    plan = _one_device_plan(name, lengths)
    case = hf_workers.HFCase(plan_json=plan.to_json(), model=name, seed=1, options=ExecOptions(autocast="bfloat16"))
    ref_loss, ref_grads = hf_workers.reference(case)
    stream = synthetic_stream(lengths, seed=1, index=plan.batch.index, vocab=resolve_model(name).vocab)
    ids, pos, tgt = (torch.as_tensor(x) for x in (stream.ids, stream.positions, stream.targets))
    model = hf_causal_lm(name, seed=1)
    seen: list[tuple[torch.dtype, ...]] = []
    inner = LocalAttention(select_kernel(kernel, torch.device("cpu")), lengths)

    def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        seen.append((q.dtype, k.dtype, v.dtype))
        return inner(q, k, v)

    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = model(ids, pos, tgt, attention=attention)
    (loss / len(ids)).backward()
    assert set(seen) == {(torch.bfloat16,) * 3}
    assert all(p.dtype == torch.float32 and p.grad.dtype == torch.float32 for p in model.parameters())
    grads = {n.removeprefix(hf_workers.PREFIX): p.grad for n, p in model.named_parameters()}
    rel, cosine, worst = hf_workers.low_precision_gaps(float(loss.detach()) / len(ids), grads, ref_loss, ref_grads)
    assert rel < BF16_LOSS_RTOL and cosine > BF16_MIN_COSINE, (rel, cosine, worst)


def test_kernel_dtype_is_the_autocast_dtype_else_the_promotion() -> None:
    f32, bf16 = torch.zeros(1, dtype=torch.float32), torch.zeros(1, dtype=torch.bfloat16)
    assert kernel_dtype(f32, f32, bf16) == torch.float32
    assert kernel_dtype(bf16, bf16, bf16) == torch.bfloat16
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert kernel_dtype(f32, f32, bf16) == torch.bfloat16
        assert kernel_dtype(f32, f32, f32) == torch.bfloat16


@pytest.mark.parametrize("file", ["Qwen3-30B-A3B.config.json", "Qwen3-235B-A22B.config.json"])
def test_the_spec_of_a_published_config_counts_what_transformers_builds(file: str) -> None:
    path = Path(__file__).parents[1] / "fixtures" / "hf" / file
    with torch.device("meta"):  # shapes only: 30B and 235B parameters without memory
        model = build_hf_model(config_of(str(path)), seed=0, attn_implementation="sdpa")
    assert sum(p.numel() for p in model.parameters()) == load_hf_config(path).total_params


def test_a_rank_without_rows_runs_a_padding_row_with_zero_gradient() -> None:
    model = hf_causal_lm(MOE, seed=0)
    empty = torch.zeros(0, dtype=torch.long)
    loss = model(empty, empty, empty, attention=_cpu_attention([]))
    loss.backward()
    assert float(loss.detach()) == 0.0
    assert all(p.grad is not None and not p.grad.any() for p in model.parameters())


def test_every_attention_call_goes_through_the_scope() -> None:
    calls: list[tuple[int, ...]] = []
    inner = _cpu_attention([5, 3])

    def counting(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        calls.append((*q.shape, *k.shape))
        return inner(q, k, v)

    model = hf_causal_lm(DENSE, seed=0)
    ids = torch.arange(8)
    model(ids, torch.tensor([0, 1, 2, 3, 4, 0, 1, 2]), ids, attention=counting)
    spec = resolve_model(DENSE)
    assert calls == [(8, spec.num_heads, spec.head_dim, 8, spec.num_kv_heads, spec.head_dim)] * spec.num_layers


def _module(causal: bool = True) -> torch.nn.Module:
    module = torch.nn.Module()
    module.is_causal = causal
    return module


@pytest.mark.parametrize(
    ("kwargs", "feature"),
    [
        ({"sliding_window": 0}, "sliding-window attention .sliding_window=0; a window is a positive token count"),
        ({"softcap": 50.0}, "soft-capping"),
        ({"s_aux": torch.zeros(4)}, "sinks"),
        ({"dropout": 0.1}, "dropout"),
        ({"scaling": 1.0}, "scaling"),
        ({"cu_seq_lens_q": torch.tensor([0, 3])}, "cu_seq_lens"),
    ],
)
def test_unsupported_attention_features_are_refused_in_one_line(kwargs: dict, feature: str) -> None:
    q = torch.zeros(1, 4, 3, 8)
    with attention_scope(_cpu_attention([3])), pytest.raises(ValueError, match=feature) as err:
        nsp_attention_forward(_module(), q, q[:, :2], q[:, :2], None, **kwargs)
    assert "\n" not in str(err.value)


def test_non_causal_padding_and_batches_are_refused() -> None:
    q = torch.zeros(1, 4, 3, 8)
    with attention_scope(_cpu_attention([3])):
        with pytest.raises(ValueError, match="non-causal"):
            nsp_attention_forward(_module(causal=False), q, q, q, None)
        with pytest.raises(ValueError, match="padding"):
            nsp_attention_forward(_module(), q, q, q, torch.ones(1, 1, 3, 3))
        with pytest.raises(ValueError, match="one row"):
            nsp_attention_forward(_module(), q.expand(2, -1, -1, -1), q, q, None)


def test_attention_outside_a_step_is_an_error() -> None:
    q = torch.zeros(1, 4, 3, 8)
    with pytest.raises(RuntimeError, match="outside an NSP step"):
        nsp_attention_forward(_module(), q, q, q, None)


@pytest.mark.parametrize(
    ("change", "feature"),
    [
        ({"attention_chunk_size": 16}, "chunked attention"),
        ({"attn_logit_softcapping": 30.0}, "soft-capping"),
        ({"attention_dropout": 0.1}, "dropout"),
        ({"is_causal": False}, "non-causal"),
    ],
)
def test_unsupported_model_configs_are_refused_when_wrapped(change: dict, feature: str) -> None:
    config = {**config_of(DENSE), **change}
    with pytest.raises(ValueError, match=feature):
        HFCausalLM(build_hf_model(config, seed=0))


def test_a_model_built_with_another_attention_is_refused() -> None:
    with pytest.raises(ValueError, match=NSP_ATTENTION):
        HFCausalLM(build_hf_model(config_of(DENSE), seed=0, attn_implementation="sdpa"))


def test_missing_extra_names_it_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib

    from nspsim_runtime.hf import MissingExtraError, require_transformers

    real = importlib.import_module

    def no_transformers(name: str, *args: object) -> object:
        if name == "transformers":
            raise ImportError("No module named 'transformers'")
        return real(name, *args)

    monkeypatch.setattr(importlib, "import_module", no_transformers)
    with pytest.raises(MissingExtraError, match=r"\[hf\]") as err:
        require_transformers()
    assert "\n" not in str(err.value)


# ---- multi-rank equivalence --------------------------------------------------------------------------
def planner_plans(world: int, model: str, batch: int) -> list[Plan]:
    """A plan from every registered planner for one random long-tail batch."""
    per_rank = 192
    wl = build_workload(
        WorkloadConfig(
            model=model,
            cluster="cpu",
            gpus=world,
            trace="longtail-paper",
            tokens_per_batch=per_rank * world,
            max_context=min(384, per_rank * world),
            token_budget=int(per_rank * 1.3),
            seed=world,
        )
    )
    return [get_planner(name).plan(wl.sampler.batch(batch), wl) for name in PLANNER_NAMES]


def hand_plans(world: int, seed: int, model: str) -> list[Plan]:
    """Nested (overlapping) Ulysses and Ring plans with random recompute marks."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 60, size=10).tolist()
    degrees = rng.choice([1, 2, world], size=10)
    nodes = [Node(int(d), int(rng.integers(0, world // d))) for d in degrees]
    marks = (rng.random(10) < 0.5).tolist()
    common = dict(cluster=get_cluster("cpu", world), model=resolve_model(model), batch=make_batch(lengths), spmax=world)
    return [
        make_plan(planner=f"hand-{b}", nodes=nodes, recompute=marks, backend=b, token_budget=10**6, **common)
        for b in ("ulysses", "ring")
    ]


def empty_rank_plan(world: int) -> Plan:
    """MoE on [40, 30, 1] with rank 1 holding only the 1-token sample and ranks >= 2 nothing."""
    return make_plan(
        planner="hand-empty-ranks",
        cluster=get_cluster("cpu", world),
        model=resolve_model(MOE),
        batch=make_batch([40, 30, 1]),
        spmax=world,
        token_budget=10**6,
        nodes=[Node(1, 0), Node(1, 0), Node(1, 1)] if world > 2 else [Node(1, 0), Node(1, 0), Node(1, 0)],
    )


def cases(world: int) -> list[hf_workers.HFCase]:
    out = [hf_workers.HFCase(plan_json=p.to_json(), model=DENSE, seed=2) for p in planner_plans(world, DENSE, 0)]
    out += [
        hf_workers.HFCase(plan_json=p.to_json(), model=MOE, seed=3, options=ExecOptions(grad_sync="allreduce"))
        for p in planner_plans(world, MOE, 1)
    ]
    ulysses, ring = hand_plans(world, seed=world, model=MOE)
    out += [
        hf_workers.HFCase(plan_json=ulysses.to_json(), model=MOE, seed=4),
        hf_workers.HFCase(plan_json=ring.to_json(), model=DENSE, seed=5, options=ExecOptions(lookahead=1)),
        hf_workers.HFCase(plan_json=ulysses.to_json(), model=DENSE, seed=6, options=ExecOptions(recompute="all")),
    ]
    out += [
        hf_workers.HFCase(
            plan_json=empty_rank_plan(world).to_json(), model=MOE, seed=7, options=ExecOptions(grad_sync=s)
        )
        for s in ("fsdp", "allreduce")
    ]
    return out + bf16_cases(world)


def bf16_cases(world: int) -> list[hf_workers.HFCase]:
    """The CPU side of the GPU path: bf16 autocast over fp32 weights (a planner's MoE plan with FSDP2,
    a nested Ring plan with the all-reduce), the CPU flash kernel getting one dtype from the bridge."""
    bf16 = ExecOptions(autocast="bfloat16", kernel="cpu-flash")
    _, ring = hand_plans(world, seed=world, model=MOE)
    return [
        hf_workers.HFCase(plan_json=planner_plans(world, MOE, 1)[0].to_json(), model=MOE, seed=3, options=bf16),
        hf_workers.HFCase(plan_json=ring.to_json(), model=DENSE, seed=5, options=replace(bf16, grad_sync="allreduce")),
    ]


@pytest.fixture(scope="module", params=WORLDS, ids=[f"{w}ranks" for w in WORLDS])
def run(request: pytest.FixtureRequest) -> dict:
    world = request.param
    payload = cases(world)
    results = run_ranks(hf_workers.hf_parity, world, payload, timeout_s=240, comm_timeout_s=60)
    return {"world": world, "payload": payload, "results": results}


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_nsp_loss_and_every_gradient_equal_the_single_process_transformers_model(run: dict) -> None:
    planners: set[tuple[str, str]] = set()
    worst = 0.0
    for i, case in enumerate(run["payload"]):
        if case.options.autocast is not None:
            continue  # test_bf16_autocast_runs_match_transformers_sdpa_under_the_same_autocast
        plan = Plan.from_json(case.plan_json)
        planners.add((plan.planner, case.model))
        ref_loss, ref_grads = hf_workers.reference(case)
        reps = [res[i] for res in run["results"]]
        for rank, rep in enumerate(reps):
            assert abs(rep["loss"] - ref_loss) < TOL, (rank, plan.planner, case.model, rep["loss"], ref_loss)
            assert rep["checksum"] == reps[0]["checksum"], (rank, plan.planner)
        grads = reps[0]["grads"]
        assert grads.keys() == ref_grads.keys()
        diffs = {name: float((grads[name] - ref).abs().max()) for name, ref in ref_grads.items()}
        name = max(diffs, key=diffs.__getitem__)
        assert diffs[name] < TOL, (plan.planner, plan.backend, case.model, case.options.grad_sync, name, diffs[name])
        worst = max(worst, diffs[name])
    assert {(p, m) for p in PLANNER_NAMES for m in (DENSE, MOE)} <= planners
    print(f"{run['world']} ranks: largest gradient difference {worst:.3g}")


@pytest.mark.slow
def test_bf16_autocast_runs_match_transformers_sdpa_under_the_same_autocast(run: dict) -> None:
    checked = 0
    for i, case in enumerate(run["payload"]):
        if case.options.autocast is None:
            continue
        ref_loss, ref_grads = hf_workers.reference(case)
        reps = [res[i] for res in run["results"]]
        assert len({rep["loss"] for rep in reps}) == 1
        rel, cosine, worst = hf_workers.low_precision_gaps(reps[0]["loss"], reps[0]["grads"], ref_loss, ref_grads)
        assert rel < BF16_LOSS_RTOL and cosine > BF16_MIN_COSINE, (Plan.from_json(case.plan_json).planner, rel, worst)
        checked += 1
    assert checked == 2


@pytest.mark.slow
def test_cases_cover_nesting_ring_uneven_shards_recompute_and_idle_ranks(run: dict) -> None:
    plans = [Plan.from_json(c.plan_json) for c in run["payload"]]
    assert any(not p.is_disjoint() for p in plans)
    assert {p.backend for p in plans} == {"ulysses", "ring"}
    assert any(p.recompute is not None and any(p.recompute) for p in plans)
    assert any(length % node.degree for p in plans for length, node in zip(p.lengths, p.nodes) if node.degree > 1)
    idle = [i for i, p in enumerate(plans) if any(rank_layout(p, 0, r).num_rows == 0 for r in range(run["world"]))]
    assert idle and any(res[i]["rows"] == 0 for i in idle for res in run["results"])


@pytest.mark.slow
def test_bridged_runs_issue_shared_collectives_in_one_order_and_name_the_class(run: dict) -> None:
    for i, case in enumerate(run["payload"]):
        logs = {r: [(tuple(g), label) for g, label in res[i]["log"]] for r, res in enumerate(run["results"])}
        assert order_conflicts(logs) == [], i
        impl = "Qwen3MoeForCausalLM" if case.model == MOE else "Qwen3ForCausalLM"
        assert {res[i]["impl"] for res in run["results"]} == {f"transformers.{impl}"}
