"""A/B of the simulator's speed: this tree against another checkout (before), alternating in one run.

Each case (a workload and a planner) is planned and prepared once here, as ``compare`` executes it
(the planner's declared preparation, no re-ranking), and pickled; then child processes simulate that
same plan, alternating before, after, before, after (``--pairs`` times), each child importing
``nspsim`` from its own tree through ``PYTHONPATH``. A child times ``--rounds`` calls of
``Simulator.simulate`` after one warm-up (CPU time and wall time; the shared VM's wall time drifts by
1.5x within minutes, CPU time less), measures the peak of Python's allocations during one
more call (``tracemalloc``, untimed: tracing slows it down), and a digest of the result: step
time, per-GPU breakdowns, critical GPU, events and, with ``--timeline``, every timeline event. The
table gives the best of each side and the ratio; the digests of both sides must be equal (the run
fails otherwise). Nothing is asserted about times.

    python benchmarks/simulator_speed_ab.py --before ../main [--cases 30b-64-nsp,235b-64-nsp] [--pairs 3]
        [--rounds 5] [--timeline] [-o out/simulator-speed-ab.md]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import pickle
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MODELS: dict[str, dict[str, Any]] = {
    "30b": {},  # Qwen3-30B-A3B on H100 (the defaults)
    "235b": {"model": "qwen3-235b-a22b", "cluster": "h200", "training": "paper-235b"},
}
# name: (model, GPUs, planner); 32K tokens per GPU (2M at 64 GPUs), 192K context, wikipedia batch 0
CASES: dict[str, tuple[str, int, str]] = {
    "30b-64-nsp": ("30b", 64, "nsp"),
    "235b-64-nsp": ("235b", 64, "nsp"),
    "30b-64-nsp2l": ("30b", 64, "nsp2l"),
    "30b-64-static": ("30b", 64, "static"),
    "235b-64-static": ("235b", 64, "static"),
    "30b-1024-nsp": ("30b", 1024, "nsp"),
    "30b-4096-nsp": ("30b", 4096, "nsp"),
}
DEFAULT_CASES = "30b-64-nsp,235b-64-nsp,30b-64-static,30b-1024-nsp"


def workload_config(model: str, gpus: int) -> dict[str, Any]:
    """The ``WorkloadConfig`` keywords of a case (plain values, so either tree can build it)."""
    return {"gpus": gpus, "tokens_per_batch": 2 * 1024**2 * gpus // 64, **MODELS[model]}


def prepare_case(name: str, folder: Path) -> Path:
    """Plan and prepare ``name``'s batch 0 with this tree; pickle (workload keywords, plan)."""
    from nspsim.execution.prepare import prepare_plan
    from nspsim.planners import get_planner
    from nspsim.workload import WorkloadConfig, build_workload

    model, gpus, planner = CASES[name]
    config = workload_config(model, gpus)
    wl = build_workload(WorkloadConfig(**config))
    routing = get_planner(planner)
    plan = routing.plan(wl.sampler.batch(0), wl)
    plan = prepare_plan(plan, memory=wl.memory, cost=wl.cost, preparation=routing.preparation)
    path = folder / f"{name}.pkl"
    path.write_bytes(pickle.dumps((config, plan)))
    return path


def child(path: str, rounds: int, timeline: bool) -> dict[str, Any]:
    """Simulate the pickled plan ``rounds`` times after a warm-up; times, memory and a result digest."""
    import numpy as np

    import nspsim
    from nspsim.simulator import SimOptions, Simulator
    from nspsim.workload import WorkloadConfig, build_workload

    config, plan = pickle.loads(Path(path).read_bytes())
    sim = Simulator.for_workload(build_workload(WorkloadConfig(**config)), SimOptions(timeline=timeline))
    result = sim.simulate(plan)
    cpu, wall = [], []
    for _ in range(rounds):
        c, w = time.process_time(), time.perf_counter()
        result = sim.simulate(plan)
        cpu.append(time.process_time() - c)
        wall.append(time.perf_counter() - w)
    tracemalloc.start()
    sim.simulate(plan)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    digest = hashlib.sha256()
    digest.update(repr((result.step_time_s, result.critical_gpu, result.events, result.oom)).encode())
    digest.update(np.ascontiguousarray(result.per_gpu_breakdown_s).tobytes())
    for ev in result.timeline:
        digest.update(repr((ev.gpu, ev.track, ev.name, ev.category, ev.start, ev.end, ev.layer)).encode())
    return {
        "tree": str(Path(nspsim.__file__).parents[1]),
        "cpu": min(cpu),
        "wall": min(wall),
        "peak_bytes": peak,
        "step": result.step_time_s,
        "tasks": result.tasks,
        "events": result.events,
        "digest": digest.hexdigest(),
    }


def run_child(tree: Path, path: Path, rounds: int, timeline: bool) -> dict[str, Any]:
    """One child process importing ``nspsim`` from ``tree``."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    cmd = [sys.executable, __file__, "--child", str(path), "--rounds", str(rounds)]
    cmd += ["--timeline"] if timeline else []
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
    data: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    if Path(data["tree"]).resolve() != tree.resolve():
        raise RuntimeError(f"child imported nspsim from {data['tree']}, not {tree}")
    return data


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", type=Path, help="the other checkout's root (e.g. a worktree of main)")
    ap.add_argument("--cases", default=DEFAULT_CASES, help=f"comma-separated, of: {', '.join(CASES)}")
    ap.add_argument("--pairs", type=int, default=3, help="before/after alternations per case")
    ap.add_argument("--rounds", type=int, default=5, help="timed calls per child (1 for 4096 GPUs)")
    ap.add_argument("--timeline", action="store_true", help="simulate with timelines (and digest them)")
    ap.add_argument("-o", "--output", type=Path, default=None)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.rounds, args.timeline)))
        return 0
    if args.before is None:
        ap.error("--before is required")
    lines = [
        "| case | before CPU (s) | after CPU (s) | CPU ratio | before wall (s) | after wall (s) | wall ratio "
        "| before peak (MiB) | after peak (MiB) | tasks before -> after | events | identical |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    same_everywhere = True
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.cases.split(","):
            path = prepare_case(name, Path(tmp))
            rounds = 1 if CASES[name][1] >= 4096 else args.rounds
            runs: dict[str, list[dict[str, Any]]] = {"before": [], "after": []}
            for _ in range(args.pairs):
                runs["before"].append(run_child(args.before, path, rounds, args.timeline))
                runs["after"].append(run_child(ROOT, path, rounds, args.timeline))
            b, a = ({k: min(r[k] for r in runs[side]) for k in ("cpu", "wall", "peak_bytes")} for side in runs)
            digests = {r["digest"] for side in runs.values() for r in side}
            same = len(digests) == 1
            same_everywhere &= same
            first_b, first_a = runs["before"][0], runs["after"][0]
            lines.append(
                f"| {name} | {b['cpu']:.4f} | {a['cpu']:.4f} | {b['cpu'] / a['cpu']:.2f}x | {b['wall']:.4f} | "
                f"{a['wall']:.4f} | {b['wall'] / a['wall']:.2f}x | {b['peak_bytes'] / 2**20:.0f} | "
                f"{a['peak_bytes'] / 2**20:.0f} | {first_b['tasks']:,} -> {first_a['tasks']:,} | "
                f"{first_a['events']:,} | {'yes' if same else 'NO'} |"
            )
            print(lines[-1], flush=True)
    stamp = (
        f"{args.pairs} alternations per case, best of {args.rounds} timed calls per child (1 at 4096 GPUs), "
        f"timeline {'on' if args.timeline else 'off'}; load average {os.getloadavg()[0]:.1f} at the end; "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
    )
    text = "\n".join([*lines, "", stamp, ""])
    if args.output is not None:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(text)
    print(stamp)
    return 0 if same_everywhere else 1


if __name__ == "__main__":
    raise SystemExit(main())
