"""Plan logs: every plan of a file, one JSON plan per line (``nspsim_runtime.train``'s ``<records>.plans.jsonl``)
or a single plan file. Trade-off: a log is read whole (plans are small; a long run's log is a few MB)."""

from __future__ import annotations

from pathlib import Path

from nspsim.jsonfile import parse_json, read_text
from nspsim.plan import Plan, plan_from_data

PLAN_LOG_SUFFIX = ".jsonl"


def load_plans(path: str | Path) -> tuple[Plan, ...]:
    """Every plan in a file: a plan log (``*.jsonl``, one plan JSON per line, blank lines skipped) or a
    plan file (one JSON document). Each plan is validated as :meth:`Plan.load` does; a message names
    the line of a bad plan in a log."""
    origin = str(path)
    text = read_text(path, "plan")
    if not origin.endswith(PLAN_LOG_SUFFIX):
        try:
            return (plan_from_data(parse_json(text, where=origin, what="plan"), origin),)
        except ValueError as exc:
            if len(text.strip().splitlines()) > 1 and _is_json(text.lstrip().split("\n", 1)[0]):
                raise ValueError(f"{exc} (it looks like a plan log, one plan per line: name it *.jsonl)") from None
            raise
    plans = tuple(
        plan_from_data(parse_json(line, where=origin, what="plan", line=n), f"{origin} line {n}")
        for n, line in enumerate(text.splitlines(), start=1)
        if line.strip()
    )
    if not plans:
        raise ValueError(f"{origin}: the plan log holds no plans")
    return plans


def _is_json(text: str) -> bool:
    try:
        parse_json(text, where="", what="plan")
    except ValueError:
        return False
    return True


def pick_plans(plans: tuple[Plan, ...], index: int | None, origin: str) -> list[tuple[int, Plan]]:
    """``(position, plan)`` of every plan, or of the one ``--index`` names."""
    if index is None:
        return list(enumerate(plans))
    if index >= len(plans):
        raise ValueError(f"--index {index}: {origin} holds {len(plans)} plan(s), numbered 0..{len(plans) - 1}")
    return [(index, plans[index])]


def pick_one(plans: tuple[Plan, ...], index: int | None, origin: str) -> Plan:
    """The plan ``--index`` names, or the only one; a log of several needs ``--index``."""
    if index is None and len(plans) > 1:
        raise ValueError(f"{origin} is a plan log of {len(plans)} plans: pick one with --index N (0..{len(plans) - 1})")
    return pick_plans(plans, index or 0, origin)[0][1]
