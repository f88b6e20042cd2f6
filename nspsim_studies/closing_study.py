"""End-to-end study (NSP paper Figure 7 form): normalised step time of every strategy for both Qwen3
models at 192K and 384K max context on ``wikipedia`` and a heavier-tailed trace.

Qwen3-30B-A3B runs on 64 H100s; Qwen3-235B-A22B (EP 8, optimizer offload) on 64 H200s, because
2M-token batches do not fit 64 H100s under the memory model (B_tok ~28K < 32K tokens per GPU).
Each configuration is one :func:`nspsim.compare.run_compare` (same K batches for every strategy,
normalised to ``static-best``). Writes, under ``--out``: one ``<config>.json`` per configuration
(records with their resolved config), ``summary.md`` (the table) and ``figure.html`` (grouped bars).

    python -m nspsim_studies.closing_study --iters 5 --out out/closing
    python -m nspsim_studies.closing_study --iters 5 --out out/closing-hier \
        --profile nspsim_studies/profiles/hierarchical-fsdp.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import plotly.graph_objects as go

from nspsim.compare import CompareConfig, RunSpec, default_planners, run_compare
from nspsim.workload import WorkloadConfig
from nspsim_studies.palette import planner_color

MODELS = (("qwen3-30b-a3b", "h100", "fsdp"), ("qwen3-235b-a22b", "h200", "paper-235b"))
CONTEXTS = (192 * 1024, 384 * 1024)
TRACES = ("wikipedia", "code")
PLANNERS = default_planners()  # static-best and every headline planner (a class fact)


def configs(profile: str | None, iters: int) -> list[tuple[str, CompareConfig]]:
    """Every (model, context, trace) comparison of the study."""
    out = []
    for model, cluster, training in MODELS:
        for context in CONTEXTS:
            for trace in TRACES:
                wl = WorkloadConfig(
                    model=model, cluster=cluster, training=training, trace=trace, max_context=context, profile=profile
                )
                name = f"{model}_{context // 1024}k_{trace}"
                out.append(
                    (
                        name,
                        CompareConfig(
                            workload=wl, timeline_iteration=None, run=RunSpec(planners=PLANNERS, iters=iters)
                        ),
                    )
                )
    return out


def run(out: Path, profile: str | None, iters: int, only: str | None) -> None:
    """Run (or reuse) every configuration, then write the table and the figure."""
    out.mkdir(parents=True, exist_ok=True)
    results: dict[str, dict[str, object]] = {}
    for name, config in configs(profile, iters):
        path = out / f"{name}.json"
        if only and only not in name:
            continue
        if not path.exists():
            started = time.perf_counter()
            result = run_compare(config)
            path.write_text(json.dumps(result.to_dict(), indent=1))
            print(f"{name}: {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
        results[name] = json.loads(path.read_text())
    (out / "summary.md").write_text(summary_table(results))
    figure(results).write_html(out / "figure.html", include_plotlyjs=True)


def summary_table(results: dict[str, dict[str, object]]) -> str:
    """Normalised step time (speedup) per strategy and configuration, as markdown."""
    head = "| configuration | " + " | ".join(PLANNERS) + " | static-best degree |"
    lines = [head, "|" + "---|" * (len(PLANNERS) + 2)]
    for name, data in results.items():
        rows = {r["planner"]: r for r in data["results"]}  # type: ignore[attr-defined, index]
        cells = [_cell(rows.get(p)) for p in PLANNERS]
        lines.append(f"| {name} | " + " | ".join(cells) + f" | SP{data['config']['static_best_degree']} |")  # type: ignore[index]
    return "\n".join(lines) + "\n"


def _normalized(row: dict[str, object]) -> object:
    """A result row's normalised step time; records written before the key named its baseline
    (compare's JSON up to issue 24) called it ``normalized_to_static``."""
    return row["normalized_to_baseline"] if "normalized_to_baseline" in row else row.get("normalized_to_static")


def _cell(row: dict[str, object] | None) -> str:
    if row is None or _normalized(row) is None:
        return "OOM" if row else "-"
    norm = _normalized(row)
    text = f"{norm:.3f} ({1 / norm:.2f}x)"  # type: ignore[operator]
    return text + (f", {row['oom_count']} OOM" if row["oom_count"] else "")


def figure(results: dict[str, dict[str, object]]) -> go.Figure:
    """Grouped bars: normalised step time per configuration and strategy."""
    fig = go.Figure()
    names = list(results)
    for planner in PLANNERS[1:] if "static-best" in PLANNERS else PLANNERS:
        ys = []
        for name in names:
            rows = {r["planner"]: r for r in results[name]["results"]}  # type: ignore[attr-defined, index]
            row = rows.get(planner)
            ys.append(None if row is None else _normalized(row))
        fig.add_trace(go.Bar(name=planner, x=names, y=ys, marker_color=planner_color(planner)))
    fig.add_hline(y=1.0, line_dash="dash", line_color="gray")
    fig.update_layout(
        barmode="group",
        title="Normalised step time (static-best = 1, lower is better)",
        yaxis_title="step time / static-best",
        height=500,
    )
    return fig


def main() -> None:
    """Command line of the study."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="out/closing")
    parser.add_argument("--iters", type=int, default=5)
    parser.add_argument("--profile", default=None)
    parser.add_argument("--only", default=None, help="run configurations whose name contains this")
    args = parser.parse_args()
    run(Path(args.out), args.profile, args.iters, args.only)


if __name__ == "__main__":
    main()
