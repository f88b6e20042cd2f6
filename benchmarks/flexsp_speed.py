"""FlexSP planning speed on the Figure 7 configurations: the pruned sweep against the full one.

    python benchmarks/flexsp_speed.py                       # batches 0..3 of the six 192K configurations
    python benchmarks/flexsp_speed.py --batches 0 --max-context 384k
    python benchmarks/flexsp_speed.py --scaling --reference ../old-checkout   # 64..1024 GPUs (issue 26 item 3)

For every (model, trace) of ``nspsim_studies/sweeps/fig7.toml`` and batch, FlexSP's sweep over micro-batch
counts runs twice back to back in this process on the same planning context: every chunk of every
count solved (``prune=False``, the algorithm before pruning) and pruned by the step floors (the
default). The placements must be identical (the script exits 1 otherwise); it prints, as a markdown
table, the chosen count, HiGHS solves and process CPU seconds of both. CPU time, not wall time: the
machine is shared. Results: ``benchmarks/results/flexsp_speed.md``.

``--scaling`` instead measures FlexSP from 64 to 1,024 GPUs (32K tokens per GPU per batch, wikipedia,
Qwen3-30B-A3B on H100) before (``milp_model="slots"``, the per-slot MILP at every P) and after (the
defaults) and writes ``benchmarks/results/flexsp_scaling.md`` (:mod:`flexsp_scaling`).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from nspsim.planners.base import make_context  # noqa: E402
from nspsim.planners.estimate import step_estimate  # noqa: E402
from nspsim.planners.flexsp.planner import FlexSPPlanner  # noqa: E402
from nspsim.units import parse_tokens  # noqa: E402
from nspsim.workload import WorkloadConfig, build_workload  # noqa: E402

MODELS = (("qwen3-30b-a3b", "h100", "fsdp"), ("qwen3-235b-a22b", "h200", "paper-235b"))  # Figure 7's zip
TRACES = ("wikipedia", "code", "commoncrawl")


def main(argv: list[str] | None = None) -> int:
    """Run the comparison and print the table; 1 if a pruned plan differs."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", default="", help="batch indices: 'a-b' or 'a,b,c' (default 0-3; --scaling: 0)")
    parser.add_argument("--max-context", default="192k", help="max context of every configuration (default 192k)")
    parser.add_argument("--scaling", action="store_true", help="measure 64..1024 GPUs instead (flexsp_scaling.md)")
    parser.add_argument("--gpus", default="64,128,256,512,1024", help="--scaling: GPU counts")
    parser.add_argument("--reference", default="", help="--scaling: a checkout of the code before, for 64-GPU hashes")
    parser.add_argument("--output", default=str(ROOT / "benchmarks/results/flexsp_scaling.md"), help="--scaling: file")
    args = parser.parse_args(argv)
    if args.scaling:
        from flexsp_scaling import run_scaling

        return run_scaling(args)
    text = args.batches or "0-3"
    if "-" in text:
        lo, hi = (int(x) for x in text.split("-"))
        batches = list(range(lo, hi + 1))
    else:
        batches = [int(x) for x in text.split(",")]
    import scipy.optimize  # noqa: F401  (HiGHS's first import, outside both timings)

    planner = FlexSPPlanner()
    max_context = parse_tokens(args.max_context)
    print("| model | trace | batch | count | solves full | solves pruned | CPU s full | CPU s pruned | same plan |")
    print("|---|---|---|---|---|---|---|---|---|")
    totals = np.zeros(4)
    differ = 0
    for model, cluster, training in MODELS:
        for trace in TRACES:
            config = WorkloadConfig(
                model=model, cluster=cluster, training=training, trace=trace, max_context=max_context
            )
            workload = build_workload(config)
            for index in batches:
                ctx = make_context(workload.sampler.batch(index), workload)
                runs = []
                for prune in (False, True):
                    start = time.process_time()
                    placement, facts = planner.sweep(ctx, prune=prune)
                    runs.append((placement, len(facts.solves), time.process_time() - start))
                (full, n_full, cpu_full), (pruned, n_pruned, cpu_pruned) = runs
                same = all(
                    np.array_equal(getattr(full, k), getattr(pruned, k)) for k in ("degrees", "firsts", "micro_batches")
                ) and step_estimate(ctx, full) == step_estimate(ctx, pruned)
                differ += not same
                totals += (n_full, n_pruned, cpu_full, cpu_pruned)
                print(
                    f"| {model} | {trace} | {index} | {full.num_micro_batches} | {n_full} | {n_pruned} | "
                    f"{cpu_full:.2f} | {cpu_pruned:.2f} | {'yes' if same else 'NO'} |",
                    flush=True,
                )
    n = len(MODELS) * len(TRACES) * len(batches)
    print(
        f"\nPer batch (mean of {n}): {totals[0] / n:.1f} -> {totals[1] / n:.1f} solves, "
        f"{totals[2] / n:.2f} -> {totals[3] / n:.2f} CPU s ({totals[2] / max(totals[3], 1e-9):.2f}x)."
    )
    return 1 if differ else 0


if __name__ == "__main__":
    raise SystemExit(main())
