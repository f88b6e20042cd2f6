"""What the local-search window candidate (``nspsim.planners.window.search``) gains over per-step NSP, by
estimate and in simulation, and what it costs to plan: per configuration and window, the window planner
with candidates per-step, grouped, balanced and search (``--moves`` moves) judged by the simulator as
``compare --window`` judges (each pass prepared as NSP's plans are, every pass but the last without the
optimizer step).

    python benchmarks/window_search.py --batches 8 --window 4 --moves 64 --only "235B 384K"

Simulated times are deterministic; planning times depend on the machine's load (reported as measured).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from nspsim.compare.specs import PlannerSpec, parse_planner_spec  # noqa: E402
from nspsim.compare.steps import prepare_for  # noqa: E402
from nspsim.plan import Plan  # noqa: E402
from nspsim.planners import get_planner  # noqa: E402
from nspsim.planners.window import CANDIDATES, WindowPlanner  # noqa: E402
from nspsim.simulator import SimOptions, Simulator  # noqa: E402
from nspsim.workload import Workload, build_workload  # noqa: E402
from window_bound import configs  # noqa: E402


def simulated_judge(sim: Simulator, wl: Workload, spec: PlannerSpec) -> Callable[[Sequence[Plan]], float]:
    """A window's simulated time as ``compare --window`` judges it: each pass prepared as ``spec`` says
    and simulated, every pass but the last without the optimizer step."""

    def judge(plans: Sequence[Plan]) -> float:
        total = 0.0
        for k, plan in enumerate(plans):
            last = k == len(plans) - 1

            def evaluate(p: Plan, last: bool = last) -> float:
                return sim.simulate(p, optimizer_step=last).step_time_or_inf

            total += evaluate(prepare_for(spec, wl, plan, evaluate=evaluate))
        return total

    return judge


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=8)
    parser.add_argument("--window", type=int, default=4)
    parser.add_argument("--moves", type=int, default=64)
    parser.add_argument("--only", default="235B 384K", help="configurations whose name contains this")
    parser.add_argument("-o", "--output", type=Path, default=None)
    args = parser.parse_args()
    spec = parse_planner_spec("nsp")
    lines = [
        "| configuration | first batch | chosen | window / per-step NSP (simulated) | search est. / per-step est. "
        "| window planning s |",
        "|---|---|---|---|---|---|",
    ]
    for name, config in configs(args.only):
        wl = build_workload(config)
        sim = Simulator.for_workload(wl, SimOptions())
        nsp = get_planner("nsp")

        judge = simulated_judge(sim, wl, spec)
        planner = WindowPlanner(step=nsp, candidates=(*CANDIDATES, "search"), search_moves=args.moves)
        for first in range(0, args.batches, args.window):
            sources = [wl.sampler.batch(first + k) for k in range(args.window)]
            started = time.perf_counter()
            window = planner.plan(sources, wl, judge=judge)
            md = window.metadata
            per_step = md.get("window_judged_s[per-step]")
            chosen = str(md["window_candidate"])
            time_s = judge(window.plans) if per_step is not None else None
            ratio = "1.0000 (per-step not judged against)" if per_step is None else f"{time_s / float(per_step):.4f}"
            est = md.get("window_estimate_s[search]")
            est_ratio = "-" if est is None else f"{float(est) / float(md['window_estimate_s[per-step]']):.4f}"
            lines.append(
                f"| {name} | {first} | {chosen} | {ratio} | {est_ratio} | {float(md['window_planning_time_s']):.2f} |"
            )
            print(lines[-1], f"({time.perf_counter() - started:.0f} s)", flush=True)
    text = "\n".join(lines) + f"\n\nW = {args.window}, {args.batches} batches, {args.moves} search moves.\n"
    if args.output is not None:
        args.output.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
