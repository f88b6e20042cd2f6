"""A/B in one process: NSP's routing on this branch against main's code paths (issue 26 item 2, the
branch's changes swapped back: the numpy references kept in the tree, and main's two kernel files,
``nspsim/planners/compiled.py`` and ``marking.py``, loaded from ``git show BASE:...``, BASE the merge
base with ``main`` or ``$NSP_AB_BASE``; once this branch is merged, ``NSP_AB_BASE=0abbd2f`` reproduces
the table), per Figure 7 configuration (both Qwen3 MoE models on 64 GPUs x
192K / 384K x wikipedia, code, commoncrawl; 2M-token batches) plus Qwen3-30B-A3B with 4M-token batches
(memory-bound at 64 H100s); 5 batches each, the two sides alternating per batch. Prints CPU
milliseconds of routing (``planning_cpu_s``) per configuration, median and max of each side, and
whether every plan is identical (content hash and chosen estimate).

    python benchmarks/nsp_speed_ab.py [batches] [configuration filter, e.g. 235b]

Results: benchmarks/results/nsp_speed.md.
"""

from __future__ import annotations

import os
import platform
import statistics
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import numpy as np

import nspsim.planners.estimate as estimate
import nspsim.planners.nsp.planner as nsp_planner
import nspsim.planners.nsp.tail as tail
import nspsim.planners.packing as packing
from nspsim.planners import get_planner
from nspsim.planners.proxy import CostTable
from nspsim.workload import WorkloadConfig, build_workload

MODELS = (("qwen3-30b-a3b", "h100", "fsdp"), ("qwen3-235b-a22b", "h200", "paper-235b"))
TRACES = ("wikipedia", "code", "commoncrawl")


def _recompute_pass_asked(self: CostTable, lengths: Any, degree: int) -> float:
    """main's ``CostTable._recompute_pass``: the cost model asked for every node not memoised yet."""
    redo = self._cost.recompute_attention(lengths, degree)
    return float(self._cost.num_layers * (redo.prologue + redo.compute))


def _prefix_memory_asked(ctx: Any, search: Any, prefix: Any, layout: Any) -> Any:
    """main's ``_prefix_memory``: one memory-model and one (memoised) cost-model call per distinct
    prefix length and level."""
    memory = ctx.workload.memory
    free = memory.activation_capacity - memory.base_bytes(float(search.token_budget))
    distinct, inverse = np.unique(search.lengths[prefix], return_inverse=True)
    attn = np.empty((distinct.size, len(layout.levels)))
    remat = np.empty_like(attn)
    for col, d in enumerate(layout.levels):
        for row, length in enumerate(distinct.tolist()):
            attn[row, col] = memory.node_attention_bytes(float(length), d)
            remat[row, col] = search.recompute_pass(np.array([length], dtype=np.int64), d)
    return attn[inverse], remat[inverse], free


def _remat_numpy(*_: Any) -> None:
    """main's ``remat_per_gpu``: no compiled path (``None`` sends it to the marking and per-node loop)."""
    return None


def _step_floors_asked(cost: Any) -> tuple[float, float, float]:
    """main's ``stage_step`` floors: the cost model asked every call."""
    fsdp = cost.fsdp()
    gather, bwd_comm = cost.num_layers * fsdp.allgather, cost.num_layers * (fsdp.allgather + fsdp.reduce_scatter)
    return gather, bwd_comm, cost.micro_batch_overhead()


def _base_module(path: str) -> types.ModuleType:
    """``path`` as it is at the merge base with main (a module of its own; numba compiles its kernels
    without the disk cache, as for any source it cannot locate)."""
    root = Path(__file__).resolve().parents[1]
    base = (
        os.environ.get("NSP_AB_BASE")
        or subprocess.run(
            ["git", "merge-base", "HEAD", "main"], cwd=root, capture_output=True, text=True, check=True
        ).stdout.strip()
    )
    source = subprocess.run(["git", "show", f"{base}:{path}"], cwd=root, capture_output=True, text=True, check=True)
    module = types.ModuleType(f"base_{Path(path).stem}")
    exec(compile(source.stdout, f"<{base[:10]}:{path}>", "exec"), module.__dict__)  # noqa: S102 - main's own file
    return module


BASE_COMPILED = _base_module("nspsim/planners/compiled.py")
BASE_MARKING = _base_module("nspsim/planners/marking.py")


def _estimate_asked(ctx: Any, select: Any, degrees: Any, firsts: Any, loads: Any = None) -> float:
    """main's ``recompute_aware_step`` call: the stage times evaluated again."""
    return float(estimate.recompute_aware_step(ctx, select, degrees, firsts))


def _least_estimate_main(self: Any, ctx: Any, select: Any, levels: Any, beams: Any, cap: Any = None) -> Any:
    """main's ``NSPPlanner._least_estimate``: no cap, the chosen route without its estimate (re-estimated)."""
    best = None
    for r in beams:
        best = nsp_planner._better(ctx, select, r, best)
    if self.seed_static:
        for r in nsp_planner._static_routes(ctx, select, levels, np.inf if best is None else best[0]):
            best = nsp_planner._better(ctx, select, r, best)
    return None if best is None else best[1]


SWAPS: tuple[tuple[Any, str, Any], ...] = (
    (CostTable, "_recompute_pass", _recompute_pass_asked),
    (nsp_planner, "_prefix_memory", _prefix_memory_asked),
    (CostTable, "evaluate", CostTable.evaluate_reference),
    (estimate, "_remat_compiled", _remat_numpy),
    (tail, "_fill_level", tail._fill_level_reference),
    (estimate, "_step_floors", _step_floors_asked),
    (packing, "fill_kernel", BASE_COMPILED.fill_kernel),
    (nsp_planner, "recompute_aware_step", _estimate_asked),
    (nsp_planner.NSPPlanner, "_least_estimate", _least_estimate_main),
    (nsp_planner, "beaten", lambda bound, best: False),  # main routes every micro-batch of every split
    (nsp_planner, "part_cap", lambda best, done, later: np.inf),  # and estimates every candidate
    (estimate, "saved_compiled", BASE_MARKING.saved_compiled),
)
"""(owner, attribute, main's form): every path this branch changed, with the code it replaced."""
FAST = tuple(getattr(owner, name) for owner, name, _ in SWAPS)


def use(fast: bool) -> None:
    """Route every swapped path of the planner to its fast form or to main's form (the code before)."""
    for (owner, name, before), after in zip(SWAPS, FAST):
        setattr(owner, name, after if fast else before)


def configurations() -> list[tuple[str, WorkloadConfig]]:
    """Figure 7's 12 configurations, then the 4M-token Qwen3-30B-A3B batches."""
    out = []
    for model, cluster, training in MODELS:
        for context in (192 * 1024, 384 * 1024):
            for trace in TRACES:
                cfg = WorkloadConfig(model=model, cluster=cluster, training=training, max_context=context, trace=trace)
                out.append((f"{model} {context // 1024}K {trace}", cfg))
    for trace in TRACES:
        out.append((f"qwen3-30b-a3b 4M-token 192K {trace}", WorkloadConfig(tokens_per_batch=4 * 1024**2, trace=trace)))
    return out


def main(batches: int = 5, only: str = "") -> None:
    """Plan every batch both ways, alternating which goes first, and print one row per configuration."""
    print(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, load {os.getloadavg()}")
    print("| configuration | batches | identical | before median / max ms | after median / max ms | ratio |")
    print("|---|---|---|---|---|---|")
    planner = get_planner("nsp")
    warm = build_workload(configurations()[-1][1])  # memory-bound: every swapped path, compiled before timing
    for fast in (False, True):
        use(fast)
        planner.plan(warm.sampler.batch(0), warm)
    every: dict[str, list[float]] = {"before": [], "after": []}
    for label, cfg in configurations():
        if only not in label:
            continue
        wl = build_workload(cfg)
        times: dict[str, list[float]] = {"before": [], "after": []}
        same = 0
        for index in range(batches):
            batch = wl.sampler.batch(index)
            result = {}
            order = ("before", "after") if index % 2 == 0 else ("after", "before")
            for side in order:
                use(side == "after")
                plan = planner.plan(batch, wl)
                times[side].append(1e3 * float(plan.metadata["planning_cpu_s"]))
                result[side] = (plan.content_hash, plan.estimates)
            same += result["before"] == result["after"]
        use(True)
        b, a = times["before"], times["after"]
        every["before"] += b
        every["after"] += a
        print(
            f"| {label} | {batches} | {same} | {statistics.median(b):.1f} / {max(b):.1f} | "
            f"{statistics.median(a):.1f} / {max(a):.1f} | {statistics.median(b) / statistics.median(a):.1f}x |",
            flush=True,
        )
    print(f"# load after: {os.getloadavg()}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 5, sys.argv[2] if len(sys.argv) > 2 else "")
