"""The timelines section of the compare report: the batch on which the strategies differ most, one row
per planner on one shared time axis (:func:`timelines_figure`)."""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from nspsim.compare import WIDEST, CompareResult
from nspsim.records import BREAKDOWN_CATEGORIES
from nspsim.simulator import StepResult, TimelineEvent
from nspsim.units import format_seconds
from nspsim_studies.palette import BREAKDOWN_COLORS

TIMELINE_GPUS = 6


def timelines_figure(result: CompareResult) -> go.Figure:
    """Every planner's step of ``result.timeline_iteration`` (those that fit in memory), one row each,
    a few GPUs per row (the critical one first), every row on the same time axis from 0 to the
    slowest step, so the lengths compare at a glance; a category's legend entry toggles it in every row."""
    steps = {label: step for label, step in result.timelines.items() if not step.oom}
    longest = max((step.step_time_s or 0.0 for step in steps.values()), default=0.0)
    titles = [
        f"{label}: step {format_seconds(step.step_time_s or 0.0)}, critical GPU {step.critical_gpu}"
        for label, step in steps.items()
    ]
    rows = max(len(steps), 1)
    fig = make_subplots(rows=rows, cols=1, shared_xaxes=True, subplot_titles=titles, vertical_spacing=0.25 / rows)
    shown: set[str] = set()
    for row, step in enumerate(steps.values(), start=1):
        gpus = _timeline_gpus(step)
        events = [e for e in step.timeline if e.gpu in gpus and _tiles(e)]
        for cat in BREAKDOWN_CATEGORIES:
            spans = _merge([e for e in events if e.category == cat])
            if spans:
                fig.add_trace(
                    go.Bar(
                        name=cat,
                        legendgroup=cat,
                        showlegend=cat not in shown,
                        orientation="h",
                        base=[a for _, a, _ in spans],
                        x=[b - a for _, a, b in spans],
                        y=[f"GPU {g}" for g, _, _ in spans],
                        marker_color=BREAKDOWN_COLORS[cat],
                        marker_line_width=0,
                    ),
                    row=row,
                    col=1,
                )
                shown.add(cat)
        fig.update_yaxes(categoryorder="array", categoryarray=[f"GPU {g}" for g in reversed(gpus)], row=row, col=1)
    fig.update_xaxes(range=[0.0, longest * 1.01 if longest > 0 else 1.0])
    fig.update_xaxes(title_text="time (s)", row=rows, col=1)
    why = ", where the strategies' step times differ most" if result.config.get("timeline_iteration") == WIDEST else ""
    fig.update_layout(
        barmode="overlay",
        bargap=0.2,
        height=160 + sum(30 + 22 * len(_timeline_gpus(step)) for step in steps.values()),
        title=f"Timelines of batch {_batch_label(result)}{why} (slowest / fastest step {_spread(result):.2f}x); "
        "one shared time axis",
    )
    return fig


def _batch_label(result: CompareResult) -> str:
    i = result.timeline_iteration
    index = next((r.batch_index for r in result.records if r.iteration == i), None)
    return f"{index} (iteration {i})" if index is not None and index != i else str(i)


def _spread(result: CompareResult) -> float:
    """Slowest over fastest step time on the timeline iteration (1 when fewer than two ran)."""
    steps = [r.step_time_s for r in result.records if r.iteration == result.timeline_iteration and r.step_time_s]
    return max(steps) / min(steps) if len(steps) > 1 else 1.0


def _tiles(event: TimelineEvent) -> bool:
    """Events that tile a GPU's time: kernels and the accounting of idle intervals."""
    return event.track == "exposed" or (event.track == "compute" and not event.name.startswith("wait"))


def _timeline_gpus(step: StepResult) -> list[int]:
    crit = step.critical_gpu or 0
    spread = [round(i * (step.num_gpus - 1) / (TIMELINE_GPUS - 2)) for i in range(TIMELINE_GPUS - 1)]
    return list(dict.fromkeys([crit, *spread]))[:TIMELINE_GPUS]


def _merge(events: list[TimelineEvent], gap: float = 1e-9) -> list[tuple[int, float, float]]:
    """Merge touching intervals of one category per GPU (fewer bars, same picture)."""
    out: list[tuple[int, float, float]] = []
    for e in sorted(events, key=lambda e: (e.gpu, e.start)):
        if out and out[-1][0] == e.gpu and e.start <= out[-1][2] + gap:
            out[-1] = (e.gpu, out[-1][1], max(out[-1][2], e.end))
        else:
            out.append((e.gpu, e.start, e.end))
    return out
