"""A/B in one process: an NSP step simulated with the process alone vs with an idle second thread (what
tqdm's monitor thread was under every progress bar), alternating, CPU seconds per simulation.

    python benchmarks/gc_pause_ab.py         # Qwen3-235B-A22B on 64 H200s, batch 0
    python benchmarks/gc_pause_ab.py 1024    # Qwen3-30B-A3B on 1,024 H100s, 32M-token batch 0

Results: benchmarks/results/gc_pause.md.
"""

from __future__ import annotations

import statistics
import sys
import threading
import time

from nspsim.execution.prepare import NESTED_PREPARATION, prepare_plan
from nspsim.planners import get_planner
from nspsim.simulator import SimOptions, Simulator
from nspsim.workload import WorkloadConfig, build_workload

BIG = WorkloadConfig(model="qwen3-235b-a22b", cluster="h200", training="paper-235b")
WIDE = WorkloadConfig(gpus=1024, tokens_per_batch=32 * 1024**2)


def cpu_seconds(run: object) -> float:
    """CPU seconds of one call of ``run``."""
    start = time.process_time()
    run()  # type: ignore[operator]
    return time.process_time() - start


def main() -> None:
    """Alternate alone / with an idle thread and print the medians and their ratio."""
    wl = build_workload(WIDE if sys.argv[1:] == ["1024"] else BIG)
    plan = get_planner("nsp").plan(wl.sampler.batch(0), wl)
    plan = prepare_plan(plan, memory=wl.memory, cost=wl.cost, preparation=NESTED_PREPARATION)
    sim = Simulator.for_workload(wl, SimOptions())
    sim.simulate(plan)  # warm
    alone, shared = [], []
    for _ in range(3):
        alone.append(cpu_seconds(lambda: sim.simulate(plan)))
        stop = threading.Event()
        idle = threading.Thread(target=stop.wait)
        idle.start()
        shared.append(cpu_seconds(lambda: sim.simulate(plan)))
        stop.set()
        idle.join()
    a, s = statistics.median(alone), statistics.median(shared)
    print(f"alone median {a:.3f} s, with a second thread {s:.3f} s, ratio {s / a:.2f}")


if __name__ == "__main__":
    main()
