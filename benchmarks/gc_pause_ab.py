"""A/B in one process: an NSP step simulated with the process alone vs with an idle second thread (what
tqdm's monitor thread was under every progress bar), alternating, CPU seconds per simulation.

    python benchmarks/gc_pause_ab.py         # Qwen3-235B-A22B on 64 H200s, batch 0
    python benchmarks/gc_pause_ab.py 1024    # Qwen3-30B-A3B on 1,024 H100s, 32M-token batch 0

Results: benchmarks/results/gc_pause.md.
"""

import statistics
import sys
import threading
import time

from nspsim.workload import WorkloadConfig, build_workload
from nspsim.planners import get_planner
from nspsim.execution.prepare import prepare_plan, NESTED_PREPARATION
from nspsim.simulator import Simulator, SimOptions
wl = build_workload(WorkloadConfig(gpus=1024, tokens_per_batch=32 * 1024**2) if sys.argv[1:] == ["1024"] else WorkloadConfig(model="qwen3-235b-a22b", cluster="h200", training="paper-235b"))
plan = get_planner("nsp").plan(wl.sampler.batch(0), wl)
plan = prepare_plan(plan, memory=wl.memory, cost=wl.cost, preparation=NESTED_PREPARATION)
sim = Simulator.for_workload(wl, SimOptions())
sim.simulate(plan)
alone, shared = [], []
for _ in range(3):
    t = time.process_time(); sim.simulate(plan); alone.append(time.process_time() - t)
    stop = threading.Event(); th = threading.Thread(target=stop.wait); th.start()
    t = time.process_time(); sim.simulate(plan); shared.append(time.process_time() - t)
    stop.set(); th.join()
print(f"alone median {statistics.median(alone):.3f} s, with a second thread {statistics.median(shared):.3f} s, ratio {statistics.median(shared)/statistics.median(alone):.2f}")
