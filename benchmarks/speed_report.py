"""Write ``benchmarks/results/speed.md``: the speed figures of issue 26, measured on the current code.

Each figure is measured in its own child process (``--case NAME``, JSON on stdout), so its peak memory
(``ru_maxrss``) is its own and one case that fails does not stop the others. CPU seconds, since the
machine is shared (the load average before and after is recorded beside the table):

- NSP routing (``planning_cpu_s``): median and max over 5 batches of each of the 12 Figure 7
  configurations, plus Qwen3-30B-A3B 4M-token batches (``nsp_speed_ab.configurations``);
- FlexSP planning (the plan's ``planning_cpu_s``, batch 0): the Figure 7 models at 64 GPUs, then
  Qwen3-30B-A3B at 64 to 1,024 GPUs with 32K tokens per GPU;
- one simulated step of batch 0's NSP plan (prepared as compare runs it): Qwen3-30B-A3B and
  Qwen3-235B-A22B at 64 GPUs, Qwen3-30B-A3B at 1,024 and 4,096 GPUs (32K tokens per GPU); CPU
  seconds of ``Simulator.simulate`` (one warm-up, the best of 3) and the process's peak memory;
- with ``--fig7``, the Figure 7 sweep cold (a new output folder, ``--jobs 2``) and warm (again), wall
  seconds.

The scaling exponents (GPUs 64 -> 4,096, a least-squares line in log-log) are printed for planning,
simulation and memory. Speed *changes* are A/B ratios measured in one run by the scripts named in
each results file (``nsp_speed_ab.py``, ``flexsp_speed.py --scaling``, ``simulator_speed_ab.py``);
this report gives the absolute figures of one machine at one time.

    python benchmarks/speed_report.py [--fig7] [--fig7-limit S] [--quick] [-o benchmarks/results/speed.md]
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

TOKENS_PER_GPU = 32 * 1024
SIM_CASES = (("qwen3-30b-a3b", 64), ("qwen3-235b-a22b", 64), ("qwen3-30b-a3b", 1024), ("qwen3-30b-a3b", 4096))
FLEXSP_GPUS = (64, 128, 256, 512, 1024)
MODEL_CLUSTER = {"qwen3-30b-a3b": ("h100", "fsdp"), "qwen3-235b-a22b": ("h200", "paper-235b")}


def _config(model: str, gpus: int) -> Any:
    from nspsim.workload import WorkloadConfig

    cluster, training = MODEL_CLUSTER[model]
    return WorkloadConfig(
        model=model, cluster=cluster, training=training, gpus=gpus, tokens_per_batch=TOKENS_PER_GPU * gpus
    )


def case_nsp(batches: int) -> dict[str, Any]:
    """NSP routing CPU ms per configuration: median, max."""
    from nsp_speed_ab import configurations
    from nspsim.planners import get_planner
    from nspsim.workload import build_workload

    out = {}
    for name, cfg in configurations():
        wl = build_workload(cfg)
        planner = get_planner("nsp")
        times = [1e3 * float(planner.plan(wl.sampler.batch(i), wl).metadata["planning_cpu_s"]) for i in range(batches)]
        out[name] = (statistics.median(times), max(times))
    return out


def case_flexsp(gpus: int, model: str) -> dict[str, Any]:
    """FlexSP planning CPU seconds of batch 0."""
    from nspsim.planners import get_planner
    from nspsim.workload import build_workload

    wl = build_workload(_config(model, gpus))
    started = time.process_time()
    plan = get_planner("flexsp").plan(wl.sampler.batch(0), wl)
    return {"planning_cpu_s": float(plan.metadata["planning_cpu_s"]), "total_cpu_s": time.process_time() - started}


def case_sim(gpus: int, model: str) -> dict[str, Any]:
    """CPU seconds of one simulated NSP step (best of 3 after a warm-up) and the step it predicts."""
    from nspsim.api import prepared
    from nspsim.planners import get_planner
    from nspsim.simulator import SimOptions, Simulator
    from nspsim.workload import build_workload

    wl = build_workload(_config(model, gpus))
    plan = prepared(wl, get_planner("nsp").plan(wl.sampler.batch(0), wl))
    sim = Simulator.for_workload(wl, SimOptions())
    result = sim.simulate(plan)
    best = math.inf
    for _ in range(3):
        started = time.process_time()
        result = sim.simulate(plan)
        best = min(best, time.process_time() - started)
    return {"sim_cpu_s": best, "step_s": result.step_time_s, "planning_cpu_s": plan.metadata.get("planning_cpu_s")}


def run_case(name: str, *args: str) -> dict[str, Any]:
    """Run one case in a child process; its result plus its peak memory in MiB (or its error)."""
    done = subprocess.run(
        [sys.executable, __file__, "--case", name, *args], capture_output=True, text=True, cwd=ROOT, check=False
    )
    if done.returncode != 0:
        return {"error": (done.stderr.strip().splitlines() or ["failed"])[-1]}
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def exponent(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Slope of log(y) against log(x) (least squares)."""
    lx, ly = [math.log(x) for x in xs], [math.log(y) for y in ys]
    mx, my = statistics.mean(lx), statistics.mean(ly)
    return sum((a - mx) * (b - my) for a, b in zip(lx, ly)) / sum((a - mx) ** 2 for a in lx)


def fig7_seconds(limit_s: float) -> tuple[float | None, float | None]:
    """Wall seconds of the Figure 7 sweep cold (a new folder) and then warm (the same folder); ``None``
    for a run stopped at ``limit_s`` (its whole process group, workers included; no warm run then);
    ``RuntimeError`` with the sweep's last line when it fails."""
    with tempfile.TemporaryDirectory() as tmp:
        times: list[float | None] = []
        for _ in range(2):
            started = time.perf_counter()
            proc = subprocess.Popen(
                [sys.executable, "-m", "nspsim", "sweep", str(ROOT / "nspsim_studies/sweeps/fig7.toml"), "-o",
                 f"{tmp}/fig7", "--jobs", "2", "--json"],
                cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
            )  # fmt: skip
            try:
                _, err = proc.communicate(timeout=limit_s)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.communicate()
                return None, None
            if proc.returncode != 0:
                raise RuntimeError((err.strip().splitlines() or ["no output"])[-1])
            times.append(time.perf_counter() - started)
    return times[0], times[1]


def report(batches: int, fig7: bool, fig7_limit_s: float = 1800.0) -> str:
    """The whole markdown report."""
    load_before = os.getloadavg()[0]
    lines = [
        "# Speed figures (issue 26)",
        "",
        "Written by `python benchmarks/speed_report.py` (module docstring: what each figure is). CPU time "
        "unless marked; one child process per case.",
        "",
        "## NSP routing (ms CPU, median / max over batches)",
        "",
        "| configuration | median | max |",
        "|---|---|---|",
    ]
    nsp = run_case("nsp", str(batches))
    lines += [f"| {k} | {v[0]:.1f} | {v[1]:.1f} |" for k, v in nsp.items() if k != "peak_mib"] or [f"| error | {nsp}"]
    lines += ["", "## FlexSP planning (batch 0)", "", "| model | GPUs | CPU s |", "|---|---|---|"]
    flex = {
        (m, g): run_case("flexsp", str(g), m)
        for m, g in [("qwen3-235b-a22b", 64)] + [("qwen3-30b-a3b", g) for g in FLEXSP_GPUS]
    }
    lines += [f"| {m} | {g} | {r.get('planning_cpu_s', r.get('error'))} |" for (m, g), r in flex.items()]
    ok = [(g, r["planning_cpu_s"]) for (m, g), r in flex.items() if m == "qwen3-30b-a3b" and "planning_cpu_s" in r]
    if len(ok) > 1:
        lines.append(
            f"\nFlexSP planning grows as P^{exponent([g for g, _ in ok], [t for _, t in ok]):.2f} (64 to 1,024 GPUs)."
        )
    lines += [
        "",
        "## One simulated NSP step",
        "",
        "| model | GPUs | simulate CPU s | NSP routing CPU s | peak MiB | predicted step s |",
        "|---|---|---|---|---|---|",
    ]
    sims = {(m, g): run_case("sim", str(g), m) for m, g in SIM_CASES}
    for (m, g), r in sims.items():
        if "error" in r:
            lines.append(f"| {m} | {g} | error: {r['error']} | | | |")
            continue
        lines.append(
            f"| {m} | {g} | {r['sim_cpu_s']:.3f} | {r['planning_cpu_s']:.3f} | {r['peak_mib']:.0f} "
            f"| {r['step_s']:.3f} |"
        )
    scaled = [(g, r) for (m, g), r in sims.items() if m == "qwen3-30b-a3b" and "error" not in r]
    if len(scaled) > 1:
        gs = [g for g, _ in scaled]
        lines.append("")
        for key, what in (("sim_cpu_s", "simulation"), ("planning_cpu_s", "NSP routing"), ("peak_mib", "peak memory")):
            lines.append(
                f"- {what} grows as P^{exponent(gs, [r[key] for _, r in scaled]):.2f} "
                f"(Qwen3-30B-A3B, 64 to {max(gs):,} GPUs)"
            )
    if fig7:
        try:
            cold, warm = fig7_seconds(fig7_limit_s)
            said = (
                f"cold more than {fig7_limit_s:.0f} s (stopped there; no warm run)"
                if cold is None or warm is None
                else f"cold {cold:.0f} s, warm {warm:.1f} s"
            ) + " (wall, `--jobs 2`)"
        except RuntimeError as exc:
            said = f"failed: {exc}"
        lines += ["", f"## Figure 7 sweep\n\n{said}"]
    stamp = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    lines += ["", f"Machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}; load "
              f"average {load_before:.2f} before, {os.getloadavg()[0]:.2f} after; {stamp}."]  # fmt: skip
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", nargs="+", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--fig7", action="store_true", help="also time the Figure 7 sweep cold and warm")
    parser.add_argument("--fig7-limit", type=float, default=1800.0, help="stop the cold sweep after this many seconds")
    parser.add_argument("--quick", action="store_true", help="1 batch per NSP configuration instead of 5")
    parser.add_argument("-o", "--output", default=str(ROOT / "benchmarks/results/speed.md"))
    args = parser.parse_args()
    if args.case:
        name, *rest = args.case
        result = {"nsp": lambda: case_nsp(int(rest[0])), "flexsp": lambda: case_flexsp(int(rest[0]), rest[1]),
                  "sim": lambda: case_sim(int(rest[0]), rest[1])}[name]()  # fmt: skip
        result["peak_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(json.dumps(result))
        return
    text = report(1 if args.quick else 5, args.fig7, args.fig7_limit)
    Path(args.output).write_text(text)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
