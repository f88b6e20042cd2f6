"""The gradient-accumulation flags of ``nspsim_runtime.train``: ``--accumulate W``, ``--accumulate-sync``,
``--window-candidates`` (torch-free, parsed and validated before torch loads).

``--accumulate W`` makes every W consecutive batches one window: the window planner
(:class:`nspsim.planners.window.WindowPlanner`, the ``--planner`` as its step planner) assigns the
window's samples to W passes, each pass runs as a step whose gradients accumulate, and one optimizer
step ends the window. ``--steps`` keeps counting batches (one pass each), so it must be a multiple of
W; a run of W = 1 is a run without windows. ``--accumulate-sync`` (FSDP2 only) chooses when a window's
gradients are reduced: after every pass (``pass``, what the simulator models) or once after its last
(``window``). Trade-off of refusing a partial last window rather than running one: every window of a
run is planned and stepped alike, at the cost of asking for a multiple.

A setting that only a window uses (``--accumulate-sync window``, a restricted ``--window-candidates``)
is refused at W = 1 rather than silently ignored. Errors are one-line ``ValueError``\\ s (argparse's
through :class:`nspsim.cli.flags.Parser`).
"""

from __future__ import annotations

import argparse
from typing import Any

from nspsim.cli.config_file import Settings
from nspsim.plan.window import MAX_WINDOW
from nspsim.planners.window import CANDIDATES
from nspsim_runtime.exec_options import ACCUMULATE_SYNC_MODES


def check_candidates(names: tuple[str, ...]) -> None:
    """``ValueError`` unless ``names`` are distinct window candidates including ``per-step``."""
    unknown = [c for c in names if c not in CANDIDATES]
    if unknown or not names or len(set(names)) != len(names):
        raise ValueError(
            f"--window-candidates takes distinct names among {', '.join(CANDIDATES)}, got {','.join(names)!r}"
        )
    if "per-step" not in names:
        raise ValueError("--window-candidates must include per-step (the assignment every other is judged against)")


def check_window(w: int, *, steps: int, sync: str, candidates: tuple[str, ...], grad_sync: str) -> None:
    """``ValueError`` unless window size ``w`` fits ``steps`` and the window settings fit ``w`` and
    ``grad_sync`` (module docstring)."""
    if not 1 <= w <= MAX_WINDOW:
        raise ValueError(f"--accumulate must be between 1 and {MAX_WINDOW}, got {w}")
    if w > steps:
        raise ValueError(
            f"--accumulate {w} exceeds --steps {steps}: a window is {w} consecutive batches, one pass "
            f"each, and --steps counts batches (give --steps a multiple of {w})"
        )
    if steps % w:
        raise ValueError(
            f"--steps {steps} is not a multiple of --accumulate {w}: --steps counts batches and every window is {w}"
        )
    if sync not in ACCUMULATE_SYNC_MODES:
        raise ValueError(f"--accumulate-sync must be one of {', '.join(ACCUMULATE_SYNC_MODES)}, got {sync!r}")
    check_candidates(candidates)
    if w == 1 and (sync != "pass" or candidates != CANDIDATES):
        flag = "--accumulate-sync" if sync != "pass" else "--window-candidates"
        raise ValueError(f"{flag} applies to accumulation windows: give --accumulate W with W > 1")
    if sync == "window" and grad_sync != "fsdp":
        raise ValueError(
            f"--accumulate-sync window applies to --grad-sync fsdp; with --grad-sync {grad_sync} "
            "the all-reduce already runs once per window"
        )


def _window_size(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}") from None
    if not 1 <= value <= MAX_WINDOW:
        raise argparse.ArgumentTypeError(f"must be an integer from 1 to {MAX_WINDOW}, got {text!r}")
    return value


def _candidates(text: str) -> str:
    try:
        check_candidates(candidate_names(text))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("--window-candidates ")) from None
    return text


def candidate_names(text: str) -> tuple[str, ...]:
    """The names of a ``--window-candidates`` value (comma-separated)."""
    return tuple(text.split(","))


def add_window_flags(p: argparse.ArgumentParser) -> None:
    """``--accumulate``, ``--accumulate-sync`` and ``--window-candidates``."""
    p.add_argument(
        "--accumulate",
        type=_window_size,
        default=1,
        metavar="W",
        help="gradient accumulation: every W consecutive batches are one window, planned together by the window "
        "planner (samples may move between its passes, one pass per batch) and ended by one optimizer step; "
        "--steps counts batches and must be a multiple of W (default 1: one optimizer step per batch)",
    )
    p.add_argument(
        "--accumulate-sync",
        choices=ACCUMULATE_SYNC_MODES,
        default="pass",
        help="with --accumulate and --grad-sync fsdp: pass (every pass reduce-scatters into the sharded "
        "gradients, as simulated) or window (one reduce-scatter after the last pass, unsharded gradients "
        "held between passes; no step prediction)",
    )
    p.add_argument(
        "--window-candidates",
        type=_candidates,
        default=",".join(CANDIDATES),
        metavar="NAMES",
        help="with --accumulate: the window planner's candidate assignments, comma-separated, including "
        f"per-step (default: {','.join(CANDIDATES)})",
    )


def window_settings(runtime: dict[str, Any]) -> Settings:
    """``--window-candidates`` from a written config's ``runtime`` section (a list there; the other two
    window flags are plain ``runtime`` values)."""
    if "window_candidates" not in runtime:
        return {}
    names = runtime["window_candidates"]
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise ValueError(f"runtime.window_candidates: a list of names, got {names!r}")
    return {"window_candidates": ("runtime.window_candidates", ",".join(names))}
