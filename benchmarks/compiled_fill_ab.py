"""A/B in one process: NSP's plans with the compiled least-loaded fill against its numpy-rounds
reference, on 5 batches of each of Figure 7's 12 configurations; CPU milliseconds of routing
(``planning_cpu_s``) and whether the plans are identical (content hash).

    python benchmarks/compiled_fill_ab.py

Results: benchmarks/results/compiled_fill.md.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

import nspsim.planners.microbatch as microbatch
import nspsim.planners.nsp.tail as tail
import nspsim.planners.packing as packing
from nspsim.planners import get_planner
from nspsim.workload import WorkloadConfig, build_workload

COMPILED = (packing.least_loaded_fill, packing.least_loaded_fill_many)
ROUNDS = (packing.least_loaded_fill_rounds, packing.least_loaded_fill_many_rounds)
MODELS = (("qwen3-30b-a3b", "h100", "fsdp"), ("qwen3-235b-a22b", "h200", "paper-235b"))


def use(pair: tuple[Callable[..., Any], Callable[..., Any]]) -> None:
    """Route every caller of the fill to ``pair`` (one state, many states)."""
    one, many = pair
    packing.least_loaded_fill = one  # type: ignore[assignment]
    microbatch.least_loaded_fill = one  # type: ignore[assignment]
    tail.least_loaded_fill_many = many  # type: ignore[assignment]


def main() -> None:
    """Plan every batch both ways, alternating, and print per model the medians and maxima."""
    for model, cluster, training in MODELS:
        rows = []
        for context in (192 * 1024, 384 * 1024):
            for trace in ("wikipedia", "code", "commoncrawl"):
                cfg = WorkloadConfig(model=model, cluster=cluster, training=training, max_context=context, trace=trace)
                wl = build_workload(cfg)
                for index in range(5):
                    batch = wl.sampler.batch(index)
                    result = {}
                    for name, pair in (("rounds", ROUNDS), ("compiled", COMPILED)):
                        use(pair)
                        plan = get_planner("nsp").plan(batch, wl)
                        result[name] = (1e3 * float(plan.metadata["planning_cpu_s"]), plan.content_hash)
                    rows.append(result)
        use(COMPILED)
        before = [r["rounds"][0] for r in rows]
        after = [r["compiled"][0] for r in rows]
        same = sum(r["rounds"][1] == r["compiled"][1] for r in rows)
        print(
            f"{model}: {len(rows)} batches, {same} identical plans; CPU ms median / max: rounds "
            f"{statistics.median(before):.1f} / {max(before):.1f}, "
            f"compiled {statistics.median(after):.1f} / {max(after):.1f}"
        )


if __name__ == "__main__":
    main()
