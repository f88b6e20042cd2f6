"""What the machine was doing while it was measured: load average, CPU steal and CPU frequency.

Read from Linux's ``/proc/loadavg``, ``/proc/stat`` (the aggregate ``cpu`` line: jiffies per state,
the 8th being *steal*, time a hypervisor gave this VM's virtual CPUs to someone else) and the CPU
frequency (``/sys/devices/system/cpu/cpu*/cpufreq/scaling_cur_freq`` in kHz where the kernel exposes
it, else the ``cpu MHz`` lines of ``/proc/cpuinfo``). A *snapshot* is one reading of all three; the
steal share of an interval is ``(steal_b - steal_a) / (total_b - total_a)`` between two snapshots;
the *foreign load* is the 1-minute load average less the ranks the measurement itself keeps busy,
per core (what else wanted the cores). Where the measuring processes are named (``pids``), a snapshot
also holds the busy jiffies of every CPU (user, nice, system, irq, softirq) and those processes' own
(``utime + stime`` of ``/proc/PID/stat``); the *foreign CPU share* of an interval is the busy time
that was not theirs over all the CPU time, ``(busy_b - busy_a - (own_b - own_a)) / (total_b - total_a)``:
another job's CPU, exact over the interval, with none of the load average's lag.

The parsing functions take the files' text and are pure (tested on fixtures); only :func:`snapshot`
touches ``/proc`` and ``/sys``, and it returns ``None`` for what it cannot read (another OS, a
container hiding them). Trade-off: the load average is a 1-minute exponential average, so it lags a
job that starts or stops (measured: a busy-loop running the last 45 s of a 87 s validation left the
median foreign load under 0.25 per core); steal, frequency and the foreign CPU share are exact over
an interval, but only where exposed.
"""

from __future__ import annotations

import glob
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

STEAL_FIELD = 7
"""Index of ``steal`` among the numbers of ``/proc/stat``'s ``cpu`` line (user nice system idle iowait
irq softirq steal guest guest_nice); ``guest`` and ``guest_nice`` are already counted in user/nice."""


def parse_loadavg(text: str) -> tuple[float, float, float]:
    """The 1, 5 and 15 minute load averages of ``/proc/loadavg`` text (``ValueError`` if malformed)."""
    parts = text.split()
    if len(parts) < 3:
        raise ValueError(f"not /proc/loadavg text: {text[:60]!r}")
    return float(parts[0]), float(parts[1]), float(parts[2])


def parse_stat(text: str) -> tuple[int, int]:
    """``(total, steal)`` jiffies of the aggregate ``cpu`` line of ``/proc/stat`` text; total is the sum
    of the first eight fields (guest time is inside user time). ``ValueError`` without that line."""
    for line in text.splitlines():
        parts = line.split()
        if parts and parts[0] == "cpu":
            numbers = [int(x) for x in parts[1:]]
            if len(numbers) < 4:
                break
            steal = numbers[STEAL_FIELD] if len(numbers) > STEAL_FIELD else 0
            return sum(numbers[: STEAL_FIELD + 1]), steal
    raise ValueError("no aggregate 'cpu' line in /proc/stat text")


def parse_busy(text: str) -> int:
    """Busy jiffies of all CPUs (user, nice, system, irq, softirq: the first eight fields less idle,
    iowait and steal) of ``/proc/stat`` text. ``ValueError`` without the aggregate line."""
    for line in text.splitlines():
        parts = line.split()
        if parts and parts[0] == "cpu" and len(parts) > STEAL_FIELD + 1:
            n = [int(x) for x in parts[1 : STEAL_FIELD + 2]]
            return n[0] + n[1] + n[2] + n[5] + n[6]
    raise ValueError("no aggregate 'cpu' line with eight fields in /proc/stat text")


def parse_pid_jiffies(text: str) -> int:
    """``utime + stime`` (every thread of the process) of ``/proc/PID/stat`` text; fields are counted
    after the command name's closing parenthesis, which may itself hold spaces."""
    rest = text[text.rindex(")") + 2 :].split()
    return int(rest[11]) + int(rest[12])  # fields 14 and 15 of proc(5), counted from the state (field 3)


def parse_cpuinfo_mhz(text: str) -> list[float]:
    """Every ``cpu MHz`` value of ``/proc/cpuinfo`` text (empty when the kernel prints none)."""
    out = []
    for line in text.splitlines():
        if line.startswith("cpu MHz") and ":" in line:
            out.append(float(line.split(":", 1)[1]))
    return out


def parse_scaling_khz(texts: Sequence[str]) -> list[float]:
    """MHz from the texts of ``scaling_cur_freq`` files (one kHz integer each)."""
    return [int(t.strip()) / 1000.0 for t in texts if t.strip()]


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text()
    except OSError:
        return None


def snapshot(pids: Sequence[int] = ()) -> dict[str, Any]:
    """One reading of the machine (the thin reader): time, load averages, ``/proc/stat`` totals and
    the CPU frequencies in MHz; with ``pids`` (the measuring processes), the busy jiffies of all CPUs
    and those processes' own; a value that cannot be read is ``None``."""
    out: dict[str, Any] = {"time": time.time(), "load1": None, "load5": None, "load15": None}
    out.update({"cpu_total": None, "cpu_steal": None, "mhz": None})
    text = _read("/proc/loadavg")
    if text is not None:
        out["load1"], out["load5"], out["load15"] = parse_loadavg(text)
    text = _read("/proc/stat")
    if text is not None:
        out["cpu_total"], out["cpu_steal"] = parse_stat(text)
    if pids:
        own = [_read(f"/proc/{pid}/stat") for pid in pids]
        out["cpu_busy"] = None if text is None else parse_busy(text)
        out["cpu_own"] = None if any(t is None for t in own) else sum(parse_pid_jiffies(t) for t in own if t)
    freq = (_read(p) for p in sorted(glob.glob("/sys/devices/system/cpu/cpu*/cpufreq/scaling_cur_freq")))
    mhz = parse_scaling_khz([t for t in freq if t is not None])
    if not mhz:
        text = _read("/proc/cpuinfo")
        mhz = parse_cpuinfo_mhz(text) if text is not None else []
    if mhz:
        out["mhz"] = round(sum(mhz) / len(mhz), 1)
    return out


def steal_share(a: dict[str, Any], b: dict[str, Any]) -> float | None:
    """Share of the CPU time between snapshots ``a`` and ``b`` that was stolen (``None`` if unreadable
    or no time passed)."""
    if a.get("cpu_total") is None or b.get("cpu_total") is None:
        return None
    total = b["cpu_total"] - a["cpu_total"]
    return (b["cpu_steal"] - a["cpu_steal"]) / total if total > 0 else None


def foreign_cpu(a: dict[str, Any], b: dict[str, Any]) -> float | None:
    """Share of all CPU time between snapshots ``a`` and ``b`` that other processes kept busy (module
    doc; at least 0), ``None`` without the busy and own jiffies or when no time passed."""
    keys = ("cpu_total", "cpu_busy", "cpu_own")
    if any(a.get(k) is None or b.get(k) is None for k in keys):
        return None
    total = b["cpu_total"] - a["cpu_total"]
    other = (b["cpu_busy"] - a["cpu_busy"]) - (b["cpu_own"] - a["cpu_own"])
    return max(other, 0) / total if total > 0 else None


def summarise(samples: Sequence[dict[str, Any]], *, busy_ranks: int, cores: int | None = None) -> dict[str, Any]:
    """What ``samples`` (snapshots in time order, taken while ``busy_ranks`` ranks computed) say:
    the steal share over the whole span and the worst between consecutive samples, the median load
    average, the median and maximum foreign load per core (``(load1 - busy_ranks) / cores``, at
    least 0), the foreign CPU share over the span and the worst between consecutive samples (where
    the samples hold the measuring processes' own jiffies), the CPU frequency's range, and how many
    samples; ``None`` for what no sample could read."""
    cores = cores or os.cpu_count() or 1
    out: dict[str, Any] = {"samples": len(samples), "busy_ranks": busy_ranks, "cores": cores}
    out["steal"] = steal_share(samples[0], samples[-1]) if len(samples) > 1 else None
    steps = [steal_share(a, b) for a, b in zip(samples, samples[1:], strict=False)]
    known = [s for s in steps if s is not None]
    out["steal_max"] = max(known) if known else None
    raw = sorted(s["load1"] for s in samples if s.get("load1") is not None)
    out["load1"] = raw[len(raw) // 2] if raw else None
    loads = sorted(max(s["load1"] - busy_ranks, 0.0) / cores for s in samples if s.get("load1") is not None)
    out["foreign_load"] = loads[len(loads) // 2] if loads else None
    out["foreign_load_max"] = loads[-1] if loads else None
    own = [s for s in samples if s.get("cpu_own") is not None]
    shares = [foreign_cpu(a, b) for a, b in zip(own, own[1:], strict=False)]
    known_shares = [x for x in shares if x is not None]
    out["foreign_cpu"] = foreign_cpu(own[0], own[-1]) if len(own) > 1 else None
    out["foreign_cpu_max"] = max(known_shares) if known_shares else None
    mhz = [s["mhz"] for s in samples if s.get("mhz") is not None]
    out["mhz_min"], out["mhz_max"] = (min(mhz), max(mhz)) if mhz else (None, None)
    return out
