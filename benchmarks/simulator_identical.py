"""Identical results: this tree's simulator against another checkout's on a fixed set of cases.

The cases: Qwen3-30B-A3B on H100 and Qwen3-235B-A22B on H200 (paper-235b training), 16 and 64 GPUs,
the nsp, nsp2l, static and basp planners on ``wikipedia`` batch 0 (32K tokens per GPU), each with and
without a timeline; on 30B at 64 GPUs (16 for the short run) also no-stream and serial modes, jitter
(seed 1), every layer on every GPU, and the short 12-layer attempt; and the tiny model on 4 CPU ranks
(core sharing). Plans are made once here and pickled; a child process per tree simulates every case
and pickles what a result says (step time, breakdowns, critical GPU, events, layers, timeline, peak
memory); the two are compared for exact equality (``tasks`` is reported, not compared: a change may
merge tasks). Exit status 1 on any difference.

    python benchmarks/simulator_identical.py --before ../main
"""

from __future__ import annotations

import argparse
import os
import pickle
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
MODELS: dict[str, dict[str, Any]] = {
    "30b": {},
    "235b": {"model": "qwen3-235b-a22b", "cluster": "h200", "training": "paper-235b"},
}
TINY: dict[str, Any] = {
    "model": "tiny",
    "cluster": "cpu",
    "gpus": 4,
    "tokens_per_batch": 16384,
    "max_context": 4096,
    "token_budget": 5120,
}
Case = tuple[dict[str, Any], str, dict[str, Any]]  # workload keywords, planner, SimOptions keywords


def cases() -> dict[str, Case]:
    """Every case by name."""
    out: dict[str, Case] = {}
    for model, extra in MODELS.items():
        for gpus in (16, 64):
            config = {"gpus": gpus, "tokens_per_batch": 2 * 1024**2 * gpus // 64, **extra}
            for planner in ("nsp", "nsp2l", "static", "basp"):
                out[f"{model}-{gpus}-{planner}"] = (config, planner, {})
                out[f"{model}-{gpus}-{planner}-timeline"] = (config, planner, {"timeline": True})
    for planner in ("nsp", "static"):
        config = {"gpus": 64, "tokens_per_batch": 2 * 1024**2}
        out[f"30b-64-{planner}-no-stream"] = (config, planner, {"mode": "no-stream", "timeline": True})
        out[f"30b-64-{planner}-serial"] = (config, planner, {"mode": "serial", "timeline": True})
        out[f"30b-64-{planner}-jitter"] = (config, planner, {"jitter": 0.05})
        every = {"extrapolate": False, "symmetry": False, "timeline": True}
        out[f"30b-64-{planner}-every-layer-every-gpu"] = (config, planner, every)
        short = {"gpus": 16, "tokens_per_batch": 512 * 1024}
        out[f"30b-16-{planner}-12-layers"] = (short, planner, {"sim_layers": 12, "timeline": True})
        out[f"tiny-4-{planner}-cores"] = (TINY, planner, {"timeline": True})
    return out


def plans(folder: Path) -> Path:
    """Plan and prepare every distinct (workload, planner) once with this tree; pickle them."""
    from nspsim.execution.prepare import prepare_plan
    from nspsim.planners import get_planner
    from nspsim.workload import WorkloadConfig, build_workload

    made: dict[str, Any] = {}
    for config, planner, _ in cases().values():
        key = repr((sorted(config.items()), planner))
        if key not in made:
            wl = build_workload(WorkloadConfig(**config))
            routing = get_planner(planner)
            plan = routing.plan(wl.sampler.batch(0), wl)
            made[key] = prepare_plan(plan, memory=wl.memory, cost=wl.cost, preparation=routing.preparation)
    path = folder / "plans.pkl"
    path.write_bytes(pickle.dumps(made))
    return path


def child(plans_path: str, out_path: str) -> None:
    """Simulate every case with this process's ``nspsim``; pickle what each result says."""
    from nspsim.simulator import SimOptions, Simulator
    from nspsim.workload import WorkloadConfig, build_workload

    made = pickle.loads(Path(plans_path).read_bytes())
    out = {}
    for name, (config, planner, options) in cases().items():
        wl = build_workload(WorkloadConfig(**config))
        r = Simulator.for_workload(wl, SimOptions(**options), seed=1).simulate(
            made[repr((sorted(config.items()), planner))]
        )
        out[name] = {
            "step": r.step_time_s,
            "breakdown": r.breakdown_s,
            "per_gpu": r.per_gpu_breakdown_s,
            "critical": r.critical_gpu,
            "oom": r.oom,
            "events": r.events,
            "layers": (r.layers_simulated, r.extrapolated),
            "peak": r.peak_memory_bytes,
            "timeline": r.timeline,
            "tasks": r.tasks,
        }
    Path(out_path).write_bytes(pickle.dumps(out))


def differences(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """Every field that differs, named by case."""
    found = []
    for name in before:
        for field, value in before[name].items():
            other = after[name][field]
            same = np.array_equal(value, other) if isinstance(value, np.ndarray) else value == other
            if field != "tasks" and not same:
                found.append(f"{name}: {field}")
    return found


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", type=Path, help="the other checkout's root (e.g. a worktree of main)")
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(*args.child)
        return 0
    if args.before is None:
        ap.error("--before is required")
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        made = plans(Path(tmp))
        for side, tree in (("before", args.before), ("after", ROOT)):
            out = Path(tmp) / f"{side}.pkl"
            env = {**os.environ, "PYTHONPATH": str(tree)}
            subprocess.run([sys.executable, __file__, "--child", str(made), str(out)], env=env, check=True)
            results[side] = pickle.loads(out.read_bytes())
    found = differences(results["before"], results["after"])
    tasks = [sum(r["tasks"] for r in results[side].values()) for side in ("before", "after")]
    for line in found:
        print("DIFFERENT", line)
    print(f"{len(results['after'])} cases, {len(found)} differences; tasks {tasks[0]:,} -> {tasks[1]:,}")
    return 1 if found else 0


if __name__ == "__main__":
    raise SystemExit(main())
