"""Why window planning gains little over per-step NSP: per Figure 7 configuration and window size W, the
window floor (``nspsim.planners.window.bound``: no assignment's summed estimate is below it) against
per-step NSP's summed plan estimates, where per-step NSP's gap above the floor lies
(``nspsim.planners.window.gap``), and what each candidate assignment's NSP routing estimates.

    python benchmarks/window_bound.py --batches 16 --windows 4 -o benchmarks/results/window_bound.md

Estimates only (no simulation): planning, not the simulator, is what this measures, so it is cheap
(NSP routes each batch once per candidate). Deterministic: the same figures on any machine.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from nspsim.plan.window import pass_batches  # noqa: E402
from nspsim.planners import get_planner  # noqa: E402
from nspsim.planners.window import CANDIDATES, plan_estimate  # noqa: E402
from nspsim.planners.window.assign import assign  # noqa: E402
from nspsim.planners.window.gap import window_gap  # noqa: E402
from nspsim.planners.window.planner import sample_work  # noqa: E402
from nspsim.workload import WorkloadConfig, build_workload  # noqa: E402

MODELS = (("qwen3-30b-a3b", "h100", "fsdp"), ("qwen3-235b-a22b", "h200", "paper-235b"))
CONTEXTS = (192 * 1024, 384 * 1024)
TRACES = ("wikipedia", "code", "commoncrawl")


def configs(only: str | None) -> list[tuple[str, WorkloadConfig]]:
    """The Figure 7 configurations (nspsim_studies/sweeps/fig7.toml's grid; 64 GPUs, 2M tokens)."""
    out = []
    for model, cluster, training in MODELS:
        for context in CONTEXTS:
            for trace in TRACES:
                name = f"{'235B' if '235b' in model else '30B'} {context // 1024}K {trace}"
                if only is None or only in name:
                    wl = WorkloadConfig(
                        model=model,
                        cluster=cluster,
                        training=training,
                        gpus=64,
                        tokens_per_batch=2 * 1024 * 1024,
                        max_context=context,
                        trace=trace,
                    )
                    out.append((name, wl))
    return out


def measure(config: WorkloadConfig, batches: int, sizes: list[int], candidates: bool) -> list[dict[str, Any]]:
    """Per W: the windows' floor, per-step NSP's estimate and gap parts, and (``candidates``) each
    candidate's NSP estimate, summed over the windows."""
    wl = build_workload(config)
    nsp = get_planner("nsp")
    sources = [wl.sampler.batch(i) for i in range(batches)]
    per_step = [nsp.plan(b, wl) for b in sources]
    rows = []
    for size in sizes:
        sums: dict[str, float] = {}
        worst = 0.0
        for first in range(0, batches, size):
            window = sources[first : first + size]
            gap = window_gap(wl, window, per_step[first : first + size])
            worst = max(worst, 1 - gap.floor_s / gap.estimate_s)
            parts = {
                "estimate": gap.estimate_s,
                "floor": gap.floor_s,
                "micro_batches": gap.micro_batches_s,
                "degrees": gap.degrees_s,
                "imbalance": gap.imbalance_s,
                "recompute": gap.recompute_s,
            }
            if candidates and size > 1:
                lengths = np.concatenate([b.lengths_array() for b in window])
                work = sample_work(wl, lengths)
                for name in CANDIDATES:
                    ids = assign(name, [len(b.lengths) for b in window], lengths, work, window[0].tokens_per_batch)
                    if ids is None:
                        continue
                    plans = [nsp.plan(b, wl) for b in pass_batches(window, ids)]
                    parts[f"cand:{name}"] = sum(plan_estimate(p) for p in plans)
            for key, value in parts.items():
                sums[key] = sums.get(key, 0.0) + value
        rows.append({"W": size, "worst_window_headroom": worst, **sums})
    return rows


def table(results: list[tuple[str, list[dict[str, Any]]]]) -> list[str]:
    """The Markdown table: per configuration and W, the floor over per-step NSP's estimate, the gap's parts
    as shares of that estimate, and each candidate's NSP estimate over per-step's."""
    lines = [
        "| configuration | W | floor / NSP est. | max over windows of 1 - floor / NSP est. | micro-batches | degrees "
        "| imbalance | recompute | grouped / per-step est. | balanced / per-step est. |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, rows in results:
        for r in rows:
            est = r["estimate"]

            def cand(key: str, row: dict[str, Any] = r, estimate: float = est) -> str:
                return f"{row[key] / estimate:.4f}" if key in row else "-"

            lines.append(
                f"| {name} | {r['W']} | {r['floor'] / est:.4f} | {r['worst_window_headroom']:.4f} | "
                f"{r['micro_batches'] / est:.4f} | {r['degrees'] / est:.4f} | {r['imbalance'] / est:.4f} | "
                f"{r['recompute'] / est:.4f} | {cand('cand:grouped')} | {cand('cand:balanced')} |"
            )
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=16)
    parser.add_argument("--windows", default="1,2,4,8", help="window sizes W, comma-separated")
    parser.add_argument("--candidates", action="store_true", help="also route every candidate with NSP")
    parser.add_argument("--only", default=None, help="configurations whose name contains this")
    parser.add_argument("-o", "--output", type=Path, default=None)
    args = parser.parse_args()
    sizes = [int(x) for x in args.windows.split(",")]
    if any(args.batches % s for s in sizes):
        print(f"--batches {args.batches} must be a multiple of every W in {sizes}", file=sys.stderr)
        return 2
    started = time.perf_counter()
    results = []
    for name, config in configs(args.only):
        rows = measure(config, args.batches, sizes, args.candidates)
        results.append((name, rows))
        print(*table([(name, rows)])[2:], sep="\n", flush=True)
    lines = table(results)
    wall = time.perf_counter() - started
    text = "\n".join(lines) + f"\n\n{args.batches} batches per configuration; {wall:.0f} s wall.\n"
    if args.output is not None:
        args.output.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
