"""Summarise measured step records: ``python -m nspsim_runtime.report out/*.jsonl [--skip 1]``.

Prints one row per records file: planner, steps, mean measured step time, mean simulated step time
(when the run simulated its plans), their ratio and the mean measured breakdown (the shared
categories), skipping the first ``--skip`` warm-up steps (default 1, or 0 for a one-step file). A
``--skip`` that would leave a file with no steps is an error naming its step count (a mean over
nothing, or silently over every step, would be a wrong answer). Text only; figures belong to
``nspsim_studies/``.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

import numpy as np

from nspsim.cli.flags import Parser, non_negative_int, shown, silence_closed_stdout
from nspsim.jsonfile import read_bytes
from nspsim.records import BREAKDOWN_CATEGORIES, with_all_categories
from nspsim_runtime.cli import fail
from nspsim_runtime.records import read_records

PROG = "nspsim_runtime.report"

SHORT = {
    "attn_fwd": "afwd",
    "attn_remat": "remat",
    "attn_bwd": "abwd",
    "non_attn": "nonattn",
    "sp_exposed_comm": "spcomm",
    "fsdp_exposed_comm": "fsdp",
    "ep_exposed_comm": "ep",
    "comm_wait": "wait",
    "other": "other",
}


STEP_KEYS = ("step_time_s", "planner", "backend", "loss", "breakdown_s")
PLANS_SUFFIX = ".plans.jsonl"  # nspsim_runtime.train's executed-plan log next to the records


def load_step_records(path: str) -> list[dict[str, Any]]:
    """The step records in ``path``; ``ValueError`` naming the file if it holds none or other records
    (e.g. a ``*.plans.jsonl`` file, which ``nspsim simulate`` replays)."""
    data = read_bytes(path, "records file")  # a FIFO without a writer or /dev/zero must not hang the report
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"{path} is not a text (JSONL) records file") from None
    try:
        records = read_records(text)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None
    if not records:
        raise ValueError(f"{path} holds no step records")
    for n, rec in enumerate(records, 1):
        missing = [k for k in STEP_KEYS if not isinstance(rec, dict) or k not in rec]
        if missing:
            raise ValueError(
                f"{path} record {n} is not a nspsim_runtime.train step record (no {missing[0]!r}); "
                "pass the --records files (plans files are replayed with nspsim simulate)"
            )
        if isinstance(rec["breakdown_s"], dict):  # a record older than ep_exposed_comm: its EP time is in other
            rec["breakdown_s"] = with_all_categories(rec["breakdown_s"])
        bad = _bad_figure(rec)
        if bad:
            raise ValueError(f"{path} record {n}: {bad}; the file was edited or is not nspsim_runtime.train's")
    return records


def _seconds(value: Any) -> bool:
    """A time in seconds as a record holds it: a finite number >= 0 (not a boolean or a string)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value >= 0


def _bad_figure(rec: dict[str, Any]) -> str | None:
    """What is wrong with the figures the report averages in ``rec`` (``None``: nothing), so that an
    edited record ends with one line instead of a traceback or a mean over a negative or NaN time."""
    if not _seconds(rec["step_time_s"]):
        return f"step_time_s {rec['step_time_s']!r} is not a time in seconds (a finite number >= 0)"
    sim = rec.get("simulated_step_time_s")
    if sim is not None and not _seconds(sim):
        return f"simulated_step_time_s {sim!r} is not a time in seconds (a finite number >= 0) or null"
    breakdown = rec["breakdown_s"]
    if not isinstance(breakdown, dict):
        return f"breakdown_s is {type(breakdown).__name__}, not an object of times in seconds"
    for key in BREAKDOWN_CATEGORIES:
        if not _seconds(breakdown.get(key)):
            return f"breakdown_s.{key} {breakdown.get(key)!r} is not a time in seconds (a finite number >= 0)"
    if not isinstance(rec["planner"], str) or not isinstance(rec.get("planner_spec", ""), str):
        return "planner is not a string"
    return None


DEFAULT_SKIP = 1
"""Warm-up steps left out when ``--skip`` is not given (none for a one-step file)."""


def after_warmup(records: list[dict[str, Any]], skip: int | None, path: str) -> list[dict[str, Any]]:
    """``records`` without the first ``skip`` (``None``: :data:`DEFAULT_SKIP`, or 0 for a one-step
    file); ``ValueError`` naming ``path`` and its step count if none would be left."""
    if skip is None:
        return records[DEFAULT_SKIP:] if len(records) > DEFAULT_SKIP else records
    if skip >= len(records):
        steps = f"{len(records)} step record{'s' if len(records) > 1 else ''}"
        raise ValueError(f"{path} holds {steps}: --skip {skip} would leave none; use --skip 0..{len(records) - 1}")
    return records[skip:]


def summarise(kept: list[dict[str, Any]]) -> dict[str, Any]:
    """Means over the (non-empty) records ``kept``."""
    sim = [r["simulated_step_time_s"] for r in kept if r.get("simulated_step_time_s") is not None]
    return {
        "planner": shown(kept[0].get("planner_spec", kept[0]["planner"])),  # the file's words, escaped
        "backend": kept[0]["backend"],
        "steps": len(kept),
        "step_s": float(np.mean([r["step_time_s"] for r in kept])),
        "simulated_s": float(np.mean(sim)) if sim else None,
        "loss_last": kept[-1]["loss"],
        "breakdown": {k: float(np.mean([r["breakdown_s"][k] for r in kept])) for k in BREAKDOWN_CATEGORIES},
    }


def table(rows: list[dict[str, Any]], names: list[str]) -> str:
    """A fixed-width text table of summaries."""
    run_w = max([22, *(len(n) + 1 for n in names)])
    spec_w = max([8, *(len(r["planner"]) + 1 for r in rows)])
    head = f"{'run':<{run_w}}{'planner':<{spec_w}}{'steps':>6}{'meas s':>8}{'sim s':>8}{'m/s':>6}  " + " ".join(
        f"{SHORT[k]:>7}" for k in BREAKDOWN_CATEGORIES
    )
    lines = [head]
    for name, r in zip(names, rows):
        sim = r["simulated_s"]
        ratio = f"{r['step_s'] / sim:6.1f}" if sim else f"{'-':>6}"
        sim_txt = f"{sim:8.3f}" if sim else f"{'-':>8}"
        parts = " ".join(f"{r['breakdown'][k]:7.3f}" for k in BREAKDOWN_CATEGORIES)
        lines.append(
            f"{name:<{run_w}}{r['planner']:<{spec_w}}{r['steps']:>6}{r['step_s']:8.3f}{sim_txt}{ratio}  {parts}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    """Entry point; bad arguments or unreadable records end with one line and status 2."""
    p = Parser(prog=PROG, description="Summarise measured step records.")
    p.add_argument("records", nargs="+")
    p.add_argument(
        "--skip",
        type=non_negative_int,
        default=None,
        help=f"warm-up steps to leave out of every file (default {DEFAULT_SKIP}, or 0 for a one-step file); "
        "it must leave at least one step",
    )
    try:
        args = p.parse_args(argv)
        files = step_files(args.records)
        rows = [summarise(after_warmup(load_step_records(f), args.skip, f)) for f in files]
    except (OSError, ValueError, KeyError, IndexError) as exc:
        fail(PROG, exc, 2)
    try:
        print(table(rows, [Path(f).stem for f in files]), flush=True)
    except BrokenPipeError:  # `... | head`: the reader left; nothing to report
        sys.exit(silence_closed_stdout())


def step_files(paths: list[str]) -> list[str]:
    """``paths`` without the ``*.plans.jsonl`` files nspsim_runtime.train writes beside its records (so
    ``out/*.jsonl`` works); ``ValueError`` if nothing else is left."""
    kept = [f for f in paths if not f.endswith(PLANS_SUFFIX)]
    if not kept:
        raise ValueError(f"only plans files given ({', '.join(paths)}); pass the --records files")
    return kept


if __name__ == "__main__":
    main()
