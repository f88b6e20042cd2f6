"""Text of ``nspsim simulate``: one simulated step explained, or a plan log's steps as a table; an
approximate result (``--approx-layers``) says so, with the error the benchmark measured beside it."""

from __future__ import annotations

from typing import Any

from nspsim.cli.flags import shown
from nspsim.compare.summary import BatchDrops
from nspsim.plan import Plan
from nspsim.simulator import StepResult
from nspsim.simulator.approximate import error_line, measured_error
from nspsim.specs.memory import GIB


def format_table(origin: str, runs: list[tuple[int, Plan, StepResult, dict[str, Any]]]) -> str:
    """One line per plan of a plan log: position, batch, planner, plan hash, step time, out of memory;
    then the mean step time per workload (model on cluster): a log mixing workloads gets a workload
    column and one mean each, never one mean over different models."""

    def workload(plan: Plan) -> str:
        return f"{shown(plan.model.name)} on {shown(plan.cluster.label)}"

    names = list(dict.fromkeys(workload(plan) for _, plan, _, _ in runs))
    mixed = len(names) > 1
    lines = [
        f"{len(runs)} plan(s) of {shown(origin)}: "
        + (f"{len(names)} workloads" if mixed else names[0])
        + f", mode {runs[0][2].mode}",
        f"{'index':>5s} {'batch':>6s}  {'planner':<16s} {'plan hash':<16s} {'step time':>11s}  OOM"
        + ("  workload" if mixed else ""),
    ]
    for i, plan, result, _ in runs:
        step = f"{result.step_time_s:9.4f} s" if result.step_time_s is not None else f"{'-':>11s}"
        lines.append(
            f"{i:>5d} {plan.batch.index:>6d}  {shown(plan.planner):<16s} {plan.content_hash:<16s} {step}  "
            f"{'yes' if result.oom else 'no '}" + (f"  {workload(plan)}" if mixed else "")
        )
    approximate = [r for _, _, r, _ in runs if r.approximate]
    if approximate:
        lines.append(f"approximate: {approximate[0].layers_simulated} of each model's layers simulated; {error_line()}")
    for name in names:
        fits = [r.step_time_s for _, p, r, _ in runs if r.step_time_s is not None and workload(p) == name]
        if fits:
            where = f" of {name}" if mixed else ""
            lines.append(
                f"mean step time {sum(fits) / len(fits):.4f} s over the {len(fits)} plan(s){where} that fit in memory"
            )
    return "\n".join(lines)


def format_result(plan: Plan, result: StepResult) -> str:
    """Human-readable summary of one simulated step."""
    head = (
        f"plan {plan.content_hash} by {shown(plan.planner)}: {shown(plan.model.name)} on {shown(plan.cluster.label)}, "
        f"{plan.num_samples} samples, {plan.num_micro_batches} micro-batch(es), mode {result.mode}"
    )
    drops = BatchDrops.of_plan(plan)
    head += "" if drops is None else f"\ndropped    {drops.describe()}"
    peak = max(result.peak_memory_bytes)
    memory = (
        f"memory     peak {peak / GIB:.2f} GiB/GPU (GPU {result.peak_memory_bytes.index(peak)}), "
        f"attention {result.recompute_policy}, {result.remat_share:.0%} of samples recomputed"
    )
    if result.oom:
        return "\n".join([head, f"OUT OF MEMORY: {result.oom_detail}", memory])
    shares = result.breakdown_share
    parts = [f"{k} {v:.4f}s ({shares[k]:.1%})" for k, v in result.breakdown_s.items() if v > 0]
    layers = f"{result.layers_simulated} of {result.num_layers} layers simulated" + (
        ", the rest extrapolated" if result.extrapolated else ", the rest extended approximately" * result.approximate
    )
    approximate = (
        [f"APPROXIMATE: {result.layers_simulated} of {result.num_layers} layers simulated; {error_line()}"]
        if result.approximate
        else []
    )
    return "\n".join(
        [
            head,
            f"step time  {result.step_time_s:.4f} s (critical GPU {result.critical_gpu})",
            "breakdown  " + ", ".join(parts),
            memory,
            f"simulated  in {result.sim_wall_time_s:.3f} s, {result.events} events; {layers}",
            *approximate,
        ]
    )


def approximation_fields(result: StepResult) -> dict[str, Any]:
    """JSON beside an approximate result: the benchmark's measured error; nothing beside an exact one."""
    return {"approximation": measured_error()} if result.approximate else {}
