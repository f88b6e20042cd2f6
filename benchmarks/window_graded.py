"""What the ``graded`` window candidate (``nspsim/planners/window/assign.py``) gains over per-step NSP,
by estimate and in simulation, and what window planning costs against per-step planning of the same batches.

    python benchmarks/window_graded.py --batches 16 --window 4 --only "235B" -o out.md

Per configuration and window of W batches:

* every default candidate's NSP estimate over per-step's (each candidate's W passes routed by NSP);
* the window planner's choice as ``compare --window`` makes it (the simulator judges per-step against the
  best-estimated other candidate, ties keep per-step) and its simulated time over per-step NSP's
  (``window_search.simulated_judge``: each pass prepared as NSP's plans are, every pass but the last
  without the optimizer step);
* CPU time (``time.process_time``) of the window planner without a judge (what a training loop runs),
  with the default candidates and with per-step and ``graded`` only, over per-step NSP's on the
  same W batches (measured before, between and after, so load drifts hit both sides, after one untimed
  per-step planning that warms the cost model's caches): only ratios are reported, since absolute
  figures move with the machine's load.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from nspsim.compare.specs import parse_planner_spec  # noqa: E402
from nspsim.planners import get_planner  # noqa: E402
from nspsim.planners.base import Planner  # noqa: E402
from nspsim.planners.window import CANDIDATES, WindowPlanner  # noqa: E402
from nspsim.simulator import SimOptions, Simulator  # noqa: E402
from nspsim.trace.batching import Batch  # noqa: E402
from nspsim.workload import Workload, build_workload  # noqa: E402
from window_bound import configs  # noqa: E402
from window_search import simulated_judge  # noqa: E402


def cpu_seconds(planner: Planner | WindowPlanner, sources: list[Batch], wl: Workload) -> float:
    """CPU seconds (``process_time``) of ``planner`` planning ``sources`` (a step planner: each batch on
    its own; a window planner: the window, without a judge)."""
    start = time.process_time()
    if isinstance(planner, WindowPlanner):
        planner.plan(sources, wl)
    else:
        for batch in sources:
            planner.plan(batch, wl)
    return time.process_time() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=16)
    parser.add_argument("--first", type=int, default=0, help="the first batch")
    parser.add_argument("--window", type=int, default=4)
    parser.add_argument("--only", default="235B", help="configurations whose name contains this")
    parser.add_argument("--traces", default="code,commoncrawl", help="traces, comma-separated")
    parser.add_argument("--no-sim", action="store_true", help="estimates and planning time only")
    parser.add_argument("-o", "--output", type=Path, default=None)
    args = parser.parse_args()
    if args.batches % args.window:
        print(f"--batches {args.batches} must be a multiple of --window {args.window}", file=sys.stderr)
        return 2
    traces = args.traces.split(",")
    others = [c for c in CANDIDATES if c != "per-step"]
    spec = parse_planner_spec("nsp")
    lines = [
        "| configuration | windows | "
        + " | ".join(f"{c} est." for c in others)
        + " | chosen | window / per-step NSP (sim) | per window (sim) | planning CPU / per-step's: defaults "
        "(median, max) | per-step + graded only (median, max) |",
        "|---|---|" + "---|" * len(others) + "---|---|---|---|---|",
    ]
    started = time.perf_counter()
    for name, config in configs(args.only):
        if name.split()[-1] not in traces:
            continue
        wl = build_workload(config)
        nsp = get_planner("nsp")
        planner = WindowPlanner(step=nsp)
        pair = WindowPlanner(step=nsp, candidates=("per-step", "graded"))
        judge = simulated_judge(Simulator.for_workload(wl, SimOptions()), wl, spec)
        est = dict.fromkeys(CANDIDATES, 0.0)
        chosen: list[str] = []
        per_window: list[float] = []
        sim_window = sim_step = 0.0
        ratios: list[float] = []
        pair_ratios: list[float] = []
        for first in range(args.first, args.first + args.batches, args.window):
            sources = [wl.sampler.batch(first + k) for k in range(args.window)]
            cpu_seconds(nsp, sources, wl)  # warm: the cost model's per-length caches, as a training loop has them
            step_cpu = cpu_seconds(nsp, sources, wl)
            window_cpu = cpu_seconds(planner, sources, wl)
            step_cpu += cpu_seconds(nsp, sources, wl)
            pair_cpu = cpu_seconds(pair, sources, wl)
            step_cpu += cpu_seconds(nsp, sources, wl)
            ratios.append(3 * window_cpu / step_cpu)
            pair_ratios.append(3 * pair_cpu / step_cpu)
            window = planner.plan(sources, wl, judge=None if args.no_sim else judge)
            md = window.metadata
            for c in CANDIDATES:
                est[c] += float(md.get(f"window_estimate_s[{c}]", md["window_estimate_s[per-step]"]))
            chosen.append(str(md["window_candidate"]))
            if not args.no_sim:
                judged_step = md.get("window_judged_s[per-step]")  # absent when per-step had the lowest estimate
                step_s = float(judged_step) if judged_step is not None else judge(window.plans)
                window_s = step_s if judged_step is None else float(md[f"window_judged_s[{chosen[-1]}]"])
                sim_window, sim_step = sim_window + window_s, sim_step + step_s
                per_window.append(window_s / step_s)
            print(name, first, chosen[-1], per_window[-1:], f"cpu {ratios[-1]:.2f} {pair_ratios[-1]:.2f}", flush=True)
        ests = " | ".join(f"{est[c] / est['per-step']:.4f}" for c in others)
        sim = "-" if args.no_sim else f"{sim_window / sim_step:.4f}"
        spread = "-" if args.no_sim else " ".join(f"{r:.3f}" for r in per_window)
        lines.append(
            f"| {name} | {len(chosen)} | {ests} | {', '.join(chosen)} | {sim} | {spread} | "
            f"{statistics.median(ratios):.2f}, {max(ratios):.2f} | "
            f"{statistics.median(pair_ratios):.2f}, {max(pair_ratios):.2f} |"
        )
        print(lines[-1], flush=True)
    wall = time.perf_counter() - started
    text = "\n".join(lines) + (
        f"\n\nW = {args.window}, batches {args.first}-{args.first + args.batches - 1}, candidates "
        f"{', '.join(CANDIDATES)}; {wall:.0f} s wall.\n"
    )
    if args.output is not None:
        args.output.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
