"""Error and cost of the opt-in approximate simulation (``SimOptions.approx_layers`` = K) against the exact one.

Cases: the Figure 7 configurations (benchmarks/window_bound.py ``configs()``: Qwen3-30B-A3B on H100 with
FSDP and Qwen3-235B-A22B on H200 with paper-235b, 64 GPUs, 2M-token batches, 192K and 384K max context,
wikipedia, code and commoncrawl), planners nsp and static (SP degree 8; ``--planners`` adds others),
``--batches`` batches each; ``--large`` adds Qwen3-30B-A3B on 1,024 GPUs (32M tokens) with nsp. Per case
and K: the signed error of the approximate step time against the exact one, the largest error of a
breakdown category of the exact run's critical GPU and of the printed breakdowns (each result's own
critical GPU), as shares of the exact step, and whether the approximation
applied (a K-layer run whose layers repeat exactly is extrapolated exactly instead). CPU time: exact and
approximate simulations of each case alternate in one run (``time.process_time``), ``--repeats`` times;
the ratio is the summed exact time over the summed approximate time.

    python benchmarks/approx_simulation.py --batches 3 -o benchmarks/results/approx_simulation.md
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from nspsim.execution.prepare import prepare_plan  # noqa: E402
from nspsim.planners import get_planner  # noqa: E402
from nspsim.simulator import SimOptions, Simulator, StepResult  # noqa: E402
from nspsim.workload import Workload, WorkloadConfig, build_workload  # noqa: E402
from window_bound import configs  # noqa: E402

PLANNERS: dict[str, tuple[str, dict[str, Any]]] = {"nsp": ("nsp", {}), "static-8": ("static", {"degree": 8})}
EXTRA_PLANNERS: dict[str, tuple[str, dict[str, Any]]] = {"flexsp": ("flexsp", {}), "nsp2l": ("nsp2l", {})}


def large() -> tuple[str, WorkloadConfig]:
    """Qwen3-30B-A3B on 1,024 H100s, 32M tokens per batch (2M per 64 GPUs), wikipedia."""
    return "30B 1024 GPUs wikipedia", WorkloadConfig(gpus=1024, tokens_per_batch=32 * 1024 * 1024)


def case_rows(
    name: str,
    wl: Workload,
    planner: str,
    plan_args: tuple[str, dict[str, Any]],
    batch: int,
    ks: list[int],
    repeats: int,
) -> list[dict[str, Any]]:
    """One row per K of one (configuration, planner, batch); none when the plan is out of memory."""
    routing = get_planner(plan_args[0], **plan_args[1])
    plan = routing.plan(wl.sampler.batch(batch), wl)
    plan = prepare_plan(plan, memory=wl.memory, cost=wl.cost, preparation=routing.preparation)
    exact_sim = Simulator.for_workload(wl)
    approx_sims = {k: Simulator.for_workload(wl, SimOptions(approx_layers=k)) for k in ks}
    cpu = {k: 0.0 for k in [0, *ks]}
    results: dict[int, StepResult] = {}
    for _ in range(repeats):  # alternate exact and approximate runs
        for k in [0, *ks]:
            sim = exact_sim if k == 0 else approx_sims[k]
            started = time.process_time()
            results[k] = sim.simulate(plan)
            cpu[k] += time.process_time() - started
    exact = results[0]
    if exact.step_time_s is None:
        return []
    rows = []
    for k in ks:
        approx = results[k]
        assert approx.step_time_s is not None
        same_gpu = np.abs(
            approx.per_gpu_breakdown_s[exact.critical_gpu] - exact.per_gpu_breakdown_s[exact.critical_gpu]
        )
        shown = max(abs(approx.breakdown_s[c] - exact.breakdown_s[c]) for c in exact.breakdown_s)
        rows.append(
            {
                "case": f"{name} {planner} b{batch}",
                "k": k,
                "layers": exact.num_layers,
                "error": approx.step_time_s / exact.step_time_s - 1,
                "category": float(same_gpu.max()) / exact.step_time_s,
                "shown": shown / exact.step_time_s,
                "critical_same": approx.critical_gpu == exact.critical_gpu,
                "approximate": approx.approximate,
                "exact_cpu": cpu[0],
                "approx_cpu": cpu[k],
                "exact_s": exact.step_time_s,
            }
        )
    return rows


def summary(rows: list[dict[str, Any]], ks: list[int]) -> list[str]:
    """Per K: cases, signed error (mean, median, range), max |error| and its case, category error, CPU ratio."""
    lines = [
        "| K | cases (approximated) | mean error | median | min .. max | max abs error (case) | max category error "
        "| max printed-breakdown error | critical GPU same | CPU exact/approx |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for k in ks:
        sel = [r for r in rows if r["k"] == k]
        if not sel:
            continue
        errs = [r["error"] for r in sel]
        worst = max(sel, key=lambda r: abs(r["error"]))
        ratio = sum(r["exact_cpu"] for r in sel) / sum(r["approx_cpu"] for r in sel)
        lines.append(
            f"| {k} | {len(sel)} ({sum(r['approximate'] for r in sel)}) | {100 * statistics.mean(errs):+.3f}% "
            f"| {100 * statistics.median(errs):+.3f}% | {100 * min(errs):+.2f}% .. {100 * max(errs):+.2f}% "
            f"| {100 * abs(worst['error']):.2f}% ({worst['case']}) | {100 * max(r['category'] for r in sel):.2f}% "
            f"| {100 * max(r['shown'] for r in sel):.2f}% "
            f"| {sum(r['critical_same'] for r in sel)}/{len(sel)} | {ratio:.2f}x |"
        )
    return lines


def per_case(rows: list[dict[str, Any]], ks: list[int]) -> list[str]:
    """Signed error per case and K, and the exact step's CPU time."""
    lines = ["| case | layers | exact step | exact CPU | " + " | ".join(f"K={k}" for k in ks) + " |"]
    lines.append("|---|---|---|---|" + "---|" * len(ks))
    for case in dict.fromkeys(r["case"] for r in rows):
        sel = {r["k"]: r for r in rows if r["case"] == case}
        first = next(iter(sel.values()))
        cells = " | ".join(
            f"{100 * sel[k]['error']:+.2f}%" + ("" if sel[k]["approximate"] else " (exact)") if k in sel else "-"
            for k in ks
        )
        lines.append(
            f"| {case} | {first['layers']} | {first['exact_s']:.3f} s | {first['exact_cpu']:.2f} s | {cells} |"
        )
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=3)
    parser.add_argument("--ks", default="8,12,16,24", help="simulated layers K, comma-separated")
    parser.add_argument("--planners", default="nsp,static-8", help=f"of {', '.join({**PLANNERS, **EXTRA_PLANNERS})}")
    parser.add_argument("--only", default=None, help="configurations whose name contains this")
    parser.add_argument("--large", action="store_true", help="add Qwen3-30B-A3B on 1,024 GPUs with nsp")
    parser.add_argument("--repeats", type=int, default=1, help="alternating timed runs per case")
    parser.add_argument("-o", "--output", type=Path, default=None)
    args = parser.parse_args()
    ks = [int(k) for k in args.ks.split(",")]
    known = {**PLANNERS, **EXTRA_PLANNERS}
    planners = [p.strip() for p in args.planners.split(",")]
    rows: list[dict[str, Any]] = []
    started = time.perf_counter()
    for name, config in configs(args.only) + ([large()] if args.large else []):
        wl = build_workload(config)
        for planner in ["nsp"] if "1024" in name else planners:
            for batch in range(1 if "1024" in name else args.batches):
                new = case_rows(name, wl, planner, known[planner], batch, ks, args.repeats)
                rows += new
                shown = " ".join(f"K={r['k']} {100 * r['error']:+.2f}%" for r in new) or "out of memory"
                print(f"{name} {planner} b{batch}: {shown}", file=sys.stderr, flush=True)
    errors = np.array([abs(r["error"]) for r in rows]) if rows else np.zeros(0)
    text = "\n".join(
        [
            "# Approximate simulation: error and cost against the exact simulator",
            "",
            f"`python benchmarks/approx_simulation.py {' '.join(sys.argv[1:])}` "
            f"({time.perf_counter() - started:.0f} s; "
            "docstring of the script for the cases). Error: approximate / exact step time - 1. Category error: the "
            "largest |approximate - exact| of one breakdown category of the critical GPU, as a share of the exact "
            "step, on the exact run's critical GPU; printed-breakdown error: the same between the two results' own "
            "critical GPUs (which differ when GPUs nearly tie for least comm wait). CPU exact/approx: summed "
            "process time of the exact runs over that of the approximate runs, "
            "alternating in one run. `(exact)`: the K-layer run repeated exactly, so the result is exact.",
            "",
            *summary(rows, ks),
            "",
            f"Over all {len(rows)} (case, K) pairs, max |error| {100 * float(errors.max(initial=0)):.2f}%.",
            "",
            "## Per case",
            "",
            *per_case(rows, ks),
            "",
        ]
    )
    print(text)
    if args.output is not None:
        args.output.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
