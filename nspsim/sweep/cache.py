"""On-disk cache of sweep units: plans and simulation records, one JSON file per key.

Layout under the cache root (``DIR/cache/`` of a sweep): ``plans/<k[:2]>/<k>.json`` holds a plan as
the plan log writes it (:meth:`nspsim.plan.Plan.to_json`, read back with the same validation as any
plan file), ``sims/<k[:2]>/<k>.json`` a small record (step time, breakdown, out-of-memory, planning
figures; no timeline; a window unit's record holds its passes' records and the window's figures).
Every write goes to a uniquely named temporary file in the same folder and is moved into place
with ``os.replace`` (atomic on POSIX), so an interrupted sweep leaves either the whole entry or none;
an entry that does not parse (written by hand, or by an older layout) counts as missing and is
recomputed. Only the sweep driver writes (workers return their results), so there is
one writer per cache and no locking. Trade-off: one small file per unit (a 12 x 6 x 20 sweep with
static-best's degrees is ~3,000 files) rather than a database: trivially atomic, inspectable and
safe to delete piecemeal, at the cost of inode count for very large sweeps.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any

from nspsim.jsonfile import dumps_json
from nspsim.plan import Plan

RECORD_SCHEMA = "nspsim-sweep-sim/1"
_NUMBERS = {"step_time_s": True, "planning_time_s": False, "load_over_lower_bound": True}  # name -> may be null
_TEXTS = ("recompute_policy", "plan_hash")


def record_problem(record: Any) -> str | None:
    """Why a simulation record read from a cache file cannot be used (a missing field, a value of the
    wrong type, a negative or non-finite number), or ``None``; the one place a cached record's
    numbers enter a sweep."""
    if not isinstance(record, dict):
        return "not an object"
    if "ineligible" in record:
        return None if isinstance(record["ineligible"], str) else "'ineligible' is not text"
    if "passes" in record:
        return _window_problem(record)
    for name, nullable in _NUMBERS.items():
        value = record.get(name)
        if value is None and nullable and name in record:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            return f"{name!r} is {value!r}, not a finite number >= 0"
    if not isinstance(record.get("oom"), bool):
        return f"'oom' is {record.get('oom')!r}, not true or false"
    step = record.get("step_time_s")
    if record["oom"] != (step is None) or step == 0:  # a step ran out of memory exactly when it has no time
        return f"'oom' is {record['oom']} with step_time_s {step!r} (out of memory means no step time, else a time > 0)"
    count = record.get("num_micro_batches")
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        return f"'num_micro_batches' is {count!r}, not a count"
    if any(not isinstance(record.get(name), str) for name in _TEXTS):
        return f"{', '.join(_TEXTS)} must be text"
    breakdown = record.get("breakdown_s", {})
    if not isinstance(breakdown, dict) or any(
        isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0
        for v in breakdown.values()
    ):
        return "'breakdown_s' must map categories to finite seconds >= 0"
    return None


_WINDOW_NUMBERS = ("window_time_s", "per_step_time_s", "time_per_token_s", "planning_time_s")
_WINDOW_COUNTS = ("first_batch", "passes", "moved_samples", "tokens")


def _window_problem(record: dict[str, Any]) -> str | None:
    """:func:`record_problem` of a window unit's record: every pass a step record, the window's
    figures numbers (its times ``None`` when a pass ran out of memory) and counts, one per pass."""
    passes, window = record["passes"], record.get("window")
    if not isinstance(passes, list) or not passes:
        return "'passes' is not a list of pass records"
    for k, step in enumerate(passes):
        problem = record_problem(step) if isinstance(step, dict) and "ineligible" not in step else "not a step record"
        if problem is not None:
            return f"pass {k}: {problem}"
    if not isinstance(window, dict):
        return "'window' is not an object"
    for name in _WINDOW_NUMBERS:
        value = window.get(name)
        if value is None and name != "planning_time_s" and name in window:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            return f"window {name!r} is {value!r}, not a finite number >= 0"
    for name in _WINDOW_COUNTS:
        value = window.get(name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            return f"window {name!r} is {value!r}, not a count"
    if window["passes"] != len(passes):
        return f"the window has {window['passes']} passes but the record holds {len(passes)}"
    if not isinstance(window.get("candidate"), str) or not isinstance(window.get("window_hash"), str):
        return "window 'candidate' and 'window_hash' must be text"
    return None


class Cache:
    """Plans and simulation records under ``root`` (created on the first write)."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.rejected: list[tuple[Path, str]] = []  # entries that parsed but could not be used, and why

    def _path(self, kind: str, key: str) -> Path:
        return self.root / kind / key[:2] / f"{key}.json"

    def plan_text(self, key: str) -> str | None:
        """The cached plan JSON of ``key`` if it is a valid plan, else ``None``."""
        path = self._path("plans", key)
        try:
            text = path.read_text(encoding="utf-8")
            Plan.from_json(text, origin=str(path))
        except (OSError, ValueError, RecursionError):
            return None
        return text

    def sim_record(self, key: str) -> dict[str, Any] | None:
        """The cached simulation record of ``key``, else ``None`` (missing, unreadable, or a record
        :func:`record_problem` refuses: that one is noted in :attr:`rejected` and recomputed)."""
        path = self._path("sims", key)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError):  # RecursionError: JSON nested beyond the parser
            return None
        if not isinstance(data, dict) or data.get("schema") != RECORD_SCHEMA or data.get("key") != key:
            return None
        record = data.get("record")
        problem = record_problem(record)
        if problem is not None:
            self.rejected.append((path, problem))
            return None
        return record if isinstance(record, dict) else None

    def put_plan(self, key: str, text: str) -> None:
        """Store a plan's JSON text under ``key`` (atomically)."""
        self._write(self._path("plans", key), text)

    def put_sim(self, key: str, record: dict[str, Any]) -> None:
        """Store a simulation record under ``key`` (atomically)."""
        body = dumps_json({"schema": RECORD_SCHEMA, "key": key, "record": record}, what="sweep record")
        self._write(self._path("sims", key), body)

    @staticmethod
    def _write(path: Path, text: str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                out.write(text)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
