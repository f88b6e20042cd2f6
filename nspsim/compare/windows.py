"""What a comparison with gradient-accumulation windows reports beside its per-step records.

With ``RunSpec.window`` = W > 1, each run of W consecutive batches is one optimizer step: the window
planner (:mod:`nspsim.planners.window`) assigns the samples to the W passes, every pass is prepared
and simulated as a step, and every pass but the last ends without the optimizer step (its gradients
accumulate; :meth:`nspsim.simulator.Simulator.simulate`). The per-step records then hold the passes,
so every existing key (mean step time, normalisation, spread) reads as a per-step mean: a window's
time / W. A :class:`WindowRecord` per planner and window adds the window's own figures: its time
(the sum of its passes'), the per-step assignment's time on the same window (judged by the simulator
whenever the window planner considered another assignment; equal to the window's when per-step won),
the time per token, the chosen candidate and how many samples moved. :func:`window_summaries` gives,
per planner, the window time over the per-step assignment's on the windows where both ran
(``window_over_per_step``: below 1 is what window planning gained).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from nspsim.plan.window import WindowPlan

PER_STEP_JUDGED = "window_judged_s[per-step]"
"""The window plan's metadata key of the per-step assignment's judged time (when it was judged)."""


@dataclass(frozen=True, kw_only=True)
class WindowRecord:
    """One planner on one window (module docstring); times are ``None`` when a pass ran out of memory."""

    planner: str
    window: int
    first_batch: int
    passes: int
    candidate: str
    moved_samples: int
    tokens: int
    window_time_s: float | None
    per_step_time_s: float | None
    time_per_token_s: float | None
    planning_time_s: float
    window_hash: str


def window_record(label: str, index: int, window: WindowPlan, times: Sequence[float | None]) -> WindowRecord:
    """The record of ``label``'s window ``index`` from its window plan and its passes' simulated step
    times (``None``: the pass ran out of memory)."""
    total = None if any(t is None for t in times) else float(sum(t or 0.0 for t in times))
    candidate = str(window.metadata.get("window_candidate", "per-step"))
    judged = window.metadata.get(PER_STEP_JUDGED)
    per_step = total if candidate == "per-step" else (None if judged is None else float(judged))
    tokens = window.total_tokens
    return WindowRecord(
        planner=label,
        window=index,
        first_batch=window.sources[0].index,
        passes=window.size,
        candidate=candidate,
        moved_samples=window.moved_samples(),
        tokens=tokens,
        window_time_s=total,
        per_step_time_s=per_step if per_step is None or per_step < float("inf") else None,
        time_per_token_s=None if total is None else total / tokens,
        planning_time_s=float(window.metadata.get("window_planning_time_s", 0.0)),
        window_hash=window.content_hash,
    )


def window_summaries(planners: Sequence[str], records: Sequence[WindowRecord]) -> list[dict[str, Any]]:
    """Per planner: windows, mean window time and time per token, and the window time over the per-step
    assignment's summed on the windows where both ran (``None`` when there is none)."""
    out = []
    for label in planners:
        mine = [r for r in records if r.planner == label]
        ran = [r for r in mine if r.window_time_s is not None]
        both = [r for r in ran if r.per_step_time_s is not None]
        per_step = sum(r.per_step_time_s or 0.0 for r in both)
        out.append(
            {
                "planner": label,
                "windows": len(mine),
                "mean_window_time_s": sum(r.window_time_s or 0.0 for r in ran) / len(ran) if ran else None,
                "time_per_token_s": (
                    sum(r.window_time_s or 0.0 for r in ran) / sum(r.tokens for r in ran) if ran else None
                ),
                "window_over_per_step": (
                    sum(r.window_time_s or 0.0 for r in both) / per_step if both and per_step > 0 else None
                ),
                "windows_rearranged": sum(r.candidate != "per-step" for r in mine),
                "mean_planning_time_s": sum(r.planning_time_s for r in mine) / len(mine) if mine else 0.0,
            }
        )
    return out


def window_lines(records: Sequence[WindowRecord]) -> list[str]:
    """What window planning did, as text lines (none without windows): a header saying the per-step
    figures are a window's time / W, then per planner its mean window time, its window time over the
    per-step assignment's, how many windows moved samples and its window planning time."""
    if not records:
        return []
    size = records[0].passes
    planners = list(dict.fromkeys(r.planner for r in records))
    lines = [
        f"windows of {size} batches per optimizer step (every per-step figure is a window's time / {size}; "
        "the spread and interval are over windows):"
    ]
    for row in window_summaries(planners, records):
        ratio, window = row["window_over_per_step"], row["mean_window_time_s"]
        gain = "-" if ratio is None else f"{ratio:.4f} of the per-step assignment's time"
        lines.append(
            f"  {row['planner']}: window {'OOM' if window is None else f'{window:.3f} s'}, {gain}; "
            f"{row['windows_rearranged']} of {row['windows']} windows moved samples; "
            f"window planning {1e3 * row['mean_planning_time_s']:.1f} ms"
        )
    return lines
