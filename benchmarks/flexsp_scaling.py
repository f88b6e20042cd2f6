"""FlexSP planning time from 64 to 1,024 GPUs, before and after the aggregated MILP (issue 26 item 3).

Run through ``python benchmarks/flexsp_speed.py --scaling [--batches 0-1] [--reference DIR]``. For each
GPU count P (32K tokens per GPU per batch, wikipedia, Qwen3-30B-A3B on H100, the planner report's
workload scaled) and batch, FlexSP plans twice back to back in this process: **before** with
``milp_model="slots"`` (the per-slot MILP at every P, the algorithm before the change) and **after**
with the default options (``milp_model="auto"``: per-slot up to 64 GPUs, aggregated above). It records
process CPU and wall seconds, solves, solves the clock stopped, the step estimate and proxy Load, and
whether the content hashes agree; then the least-squares exponent of time against P, the after path
with ``workers=2`` (same plan, wall time), the before path at the largest P under ``plan_time_limit=5``,
and the identical-plan check at 64 GPUs on the Figure 7 configurations against ``--reference`` (a
checkout of the code before the change, run in a subprocess; without it, against ``milp_model="slots"``).
CPU and wall time, not a timed assertion: the machine is shared (its load average is recorded).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from nspsim.planners import get_planner
from nspsim.workload import WorkloadConfig, build_workload

FIG7 = (("qwen3-30b-a3b", "h100", "fsdp"), ("qwen3-235b-a22b", "h200", "paper-235b"))
TRACES = ("wikipedia", "code", "commoncrawl")
FIG7_HASHES = """
import json, sys
from nspsim.planners import get_planner
from nspsim.workload import WorkloadConfig, build_workload
out = {}
for model, cluster, training in %r:
    for trace in %r:
        wl = build_workload(WorkloadConfig(model=model, cluster=cluster, training=training, trace=trace,
                                           max_context=192 * 1024))
        for i in %r:
            plan = get_planner("flexsp", **%r).plan(wl.sampler.batch(i), wl)
            out[f"{model}/{trace}/{i}"] = plan.content_hash
print(json.dumps(out))
"""


@dataclass(frozen=True)
class Run:
    cpu: float
    wall: float
    hash: str
    meta: dict[str, Any]


def plan_once(config: WorkloadConfig, index: int, options: dict[str, Any]) -> Run:
    wl = build_workload(config)
    batch = wl.sampler.batch(index)
    planner = get_planner("flexsp", **options)
    cpu, wall = time.process_time(), time.perf_counter()
    plan = planner.plan(batch, wl)
    return Run(time.process_time() - cpu, time.perf_counter() - wall, plan.content_hash, dict(plan.metadata))


def scaled(gpus: int) -> WorkloadConfig:
    return WorkloadConfig(trace="wikipedia", gpus=gpus, tokens_per_batch=32 * 1024 * gpus)


def exponent(gpus: list[int], seconds: list[float]) -> float:
    """Least-squares slope of log(seconds) against log(P)."""
    return float(np.polyfit(np.log(gpus), np.log(np.maximum(seconds, 1e-6)), 1)[0])


def fig7_hashes(batches: list[int], options: dict[str, Any], root: str) -> dict[str, str]:
    code = FIG7_HASHES % (FIG7, TRACES, batches, options)
    env = {**os.environ, "PYTHONPATH": root}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    out: dict[str, str] = json.loads(done.stdout)
    return out


def run_scaling(args: argparse.Namespace) -> int:
    """Measure, print and write the report; 1 if a 64-GPU plan differs."""
    import scipy.optimize  # noqa: F401  (HiGHS's first import, outside every timing)

    batches = parse_batches(args.batches or "0")
    gpus = [int(g) for g in args.gpus.split(",")]
    load_before = os.getloadavg()
    lines = [
        "| GPUs | batch | CPU s before | CPU s after | wall s before | wall s after | speed-up (CPU) | solves b/a "
        "| clock-stopped b/a | same plan | Load before | Load after | Load change |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for model in ("slots", "counts"):  # first-call costs (HiGHS bindings, compiled kernels) outside every timing
        plan_once(scaled(16), 0, {"milp_model": model})
    per_p: dict[int, list[tuple[Run, Run]]] = {}
    for p in gpus:
        for index in batches:
            before = plan_once(scaled(p), index, {"milp_model": "slots"})
            after = plan_once(scaled(p), index, {})
            per_p.setdefault(p, []).append((before, after))
            lb, la = before.meta["load_s"], after.meta["load_s"]
            same = before.hash == after.hash
            solves = f"{before.meta['milp_solves']}/{after.meta['milp_solves']}"
            lines.append(
                f"| {p} | {index} | {before.cpu:.2f} | {after.cpu:.2f} | {before.wall:.2f} | {after.wall:.2f} | "
                f"{before.cpu / max(after.cpu, 1e-9):.1f}x | {solves} | "
                f"{before.meta['milp_time_limited']}/{after.meta['milp_time_limited']} | {'yes' if same else 'no'} | "
                f"{lb:.4f} | {la:.4f} | {'-' if same else f'{(la / lb - 1) * 100:+.2f}%'} |"
            )
            print(lines[-1], flush=True)
    mean = {
        p: [float(np.mean([getattr(r[k], f) for r in runs])) for k in (0, 1) for f in ("cpu", "wall")]
        for p, runs in per_p.items()
    }
    fits = {
        name: exponent(gpus, [mean[p][i] for p in gpus])
        for i, name in enumerate(("cpu_b", "wall_b", "cpu_a", "wall_a"))
    }
    small = [p for p in gpus if p <= 256]
    fit_small = exponent(small, [mean[p][0] for p in small]) if len(small) > 1 else float("nan")
    changed = [(b.meta["load_s"], a.meta["load_s"]) for runs in per_p.values() for b, a in runs if b.hash != a.hash]
    worst = max((a / b - 1 for b, a in changed), default=0.0)
    best = min((a / b - 1 for b, a in changed), default=0.0)
    extra = extras(gpus, batches[0])
    same64, checked, how = check_64(args.reference)
    report = render(
        args, lines, mean, fits, fit_small, (len(changed), best, worst), extra, (same64, checked, how), load_before
    )
    Path(args.output).write_text(report)
    print(f"\nwrote {args.output}")
    return 0 if same64 == checked else 1


def extras(gpus: list[int], index: int) -> list[str]:
    """After with workers=2 (wall, same plan) at each P; before under plan_time_limit=5 at the largest P."""
    out = ["| GPUs | wall s workers=1 | wall s workers=2 | same plan |", "|---|---|---|---|"]
    for p in gpus:
        one, two = plan_once(scaled(p), index, {}), plan_once(scaled(p), index, {"workers": 2})
        out.append(f"| {p} | {one.wall:.2f} | {two.wall:.2f} | {'yes' if one.hash == two.hash else 'NO'} |")
        print(out[-1], flush=True)
    forced = [(plan_once(scaled(64), i, {}), plan_once(scaled(64), i, {"milp_model": "counts"})) for i in (0, 1, 2, 3)]
    changes = [c.meta["load_s"] / s.meta["load_s"] - 1 for s, c in forced]
    out += [
        "",
        '64 GPUs, batches 0-3, the aggregated MILP forced (`milp_model="counts"`) against the default per-slot '
        f"one: Load change {', '.join(f'{x * 100:+.2f}%' for x in changes)}; CPU s "
        f"{sum(s.cpu for s, _ in forced):.2f} (per-slot) against {sum(c.cpu for _, c in forced):.2f} (aggregated).",
    ]
    print(out[-1], flush=True)
    p = max(gpus)
    capped = plan_once(scaled(p), index, {"milp_model": "slots", "plan_time_limit": 5.0})
    full = plan_once(scaled(p), index, {"milp_model": "slots"})
    m = capped.meta
    out += [
        "",
        f"Per-slot MILP at {p} GPUs, batch {index}, `plan_time_limit=5`: {capped.wall:.2f} s wall "
        f"({full.wall:.2f} s without a budget), {m['milp_solves']} solves of which {m['milp_time_limited']} "
        f"stopped on the clock and {m['milp_budget_skipped']} skipped (incumbent kept); Load "
        f"{m['load_s']:.4f} against {full.meta['load_s']:.4f} without the budget "
        f"({(m['load_s'] / full.meta['load_s'] - 1) * 100:+.2f}%).",
    ]
    print(out[-1], flush=True)
    return out


def check_64(reference: str) -> tuple[int, int, str]:
    """How many Figure 7 plans at 64 GPUs (batches 0-3) keep their content hash, of how many, against what."""
    batches = [0, 1, 2, 3]
    here = fig7_hashes(batches, {}, str(Path(__file__).resolve().parents[1]))
    if reference:
        there = fig7_hashes(batches, {}, str(Path(reference).resolve()))
        commit = subprocess.run(
            ["git", "-C", reference, "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
        ).stdout.strip()
        how = f"the code before the change (a checkout of commit {commit or '?'}, run in a subprocess)"
    else:
        there = fig7_hashes(batches, {"milp_model": "slots"}, str(Path(__file__).resolve().parents[1]))
        how = 'this code with `milp_model="slots"` (pass --reference for the code before the change)'
    return sum(here[k] == there.get(k) for k in here), len(here), f"{how}, batches {batches[0]}-{batches[-1]}"


def parse_batches(text: str) -> list[int]:
    if "-" in text:
        lo, hi = (int(x) for x in text.split("-"))
        return list(range(lo, hi + 1))
    return [int(x) for x in text.split(",")]


def render(
    args: argparse.Namespace,
    lines: list[str],
    mean: dict[int, list[float]],
    fits: dict[str, float],
    fit_small: float,
    changes: tuple[int, float, float],
    extra: list[str],
    same: tuple[int, int, str],
    load: tuple[float, float, float],
) -> str:
    gpus = sorted(mean)
    summary = ["| GPUs | CPU s before | CPU s after | wall s before | wall s after |", "|---|---|---|---|---|"]
    summary += [f"| {p} | {mean[p][0]:.2f} | {mean[p][2]:.2f} | {mean[p][1]:.2f} | {mean[p][3]:.2f} |" for p in gpus]
    n, best, worst = changes
    return "\n".join(
        [
            "# FlexSP planning time from 64 to 1,024 GPUs (issue 26 item 3)",
            "",
            f"Measured {time.strftime('%Y-%m-%d')} on a shared {os.cpu_count()}-core machine (load average "
            f"{load[0]:.1f} at the start), one process, `python benchmarks/flexsp_speed.py --scaling "
            f"--batches {args.batches or '0'}{' --reference DIR' if args.reference else ''}`. "
            "Workload: Qwen3-30B-A3B on H100, wikipedia, 32K tokens per GPU per batch (2M at 64 GPUs, 32M at "
            "1,024), default FlexSP options (work limit 10 HiGHS checks per solve, 10 s clock per solve). "
            '**Before**: `milp_model="slots"`, the per-slot MILP at every P (the algorithm before this change); '
            "**after**: the defaults (per-slot up to 64 GPUs, the aggregated MILP above). Both plan each batch "
            "back to back in the same process; CPU is process CPU time (HiGHS is single-threaded), wall includes "
            "waiting for the shared cores.",
            "",
            "## Per-batch planning time (mean over batches)",
            "",
            *summary,
            "",
            f"Fitted exponent (least squares of log time on log P, {gpus[0]}..{gpus[-1]} GPUs): before "
            f"P^{fits['cpu_b']:.2f} CPU / P^{fits['wall_b']:.2f} wall, after P^{fits['cpu_a']:.2f} CPU / "
            f"P^{fits['wall_a']:.2f} wall. Before, up to 256 GPUs (where the 10 s clock stops fewer solves): "
            f"P^{fit_small:.2f} CPU. Before flattens above 256 GPUs only because the clock stops every solve "
            "there (the incumbent, or a clock-dependent solution, is kept).",
            "",
            "## Every batch",
            "",
            *lines,
            "",
            f"Plans that changed: {n}; Load change where one did: {best * 100:+.2f}% to {worst * 100:+.2f}% "
            "(negative: the after plan is better by the proxy Load). Before, the per-slot MILP above 64 GPUs is "
            "stopped by the clock or its work limit long before it closes its gap, so which plan it returns "
            "depends on the machine's load; after, the aggregated MILP is solved (or stopped by its work limit) "
            "within a second and its packed solution replaces the static incumbent only when it is better.",
            "",
            "## Identical plans at 64 GPUs",
            "",
            f"Figure 7 configurations (Qwen3-30B-A3B H100 and Qwen3-235B-A22B H200; wikipedia, code, commoncrawl; "
            f"192K): {same[0]} of {same[1]} plans have the same content hash as {same[2]}.",
            "",
            "## Parallel solves and the plan budget",
            "",
            *extra,
            "",
        ]
    )
