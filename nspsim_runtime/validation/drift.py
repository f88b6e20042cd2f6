"""Correcting a validation for the machine's speed, and the verdict that names the cause of its error.

**Correction.** Every block of steps runs between two speed references (:mod:`nspsim_runtime.calibration.reference`);
the block's *speed factor* is the mean of the two over the calibration's reference median (the
profile's ``provenance.speed_reference.median_s``): 1.3 means the same work took 1.3x as long as
when the profile was measured. A step's *corrected prediction* is its raw prediction times its
block's factor; a case's corrected error compares the mean corrected prediction with the measured
mean. Both errors are reported side by side, never one in place of the other. A case is *flagged*
when the reference moved by more than :data:`DRIFT_FLAG` within one of its measured blocks,
``|after - before| / min(before, after)``: its steps ran at a speed that neither end describes.

**Verdict** (:func:`verdict`), with ``T`` = ``--max-mape``, ``raw`` and ``corrected`` the MAPEs, and the
*machine signals*: the reference moved more than :data:`RUN_DRIFT_LIMIT` over the run
(``max / min - 1`` of all its samples), or the median speed factor is off 1 by more than
:data:`RUN_DRIFT_LIMIT`, or a case is flagged, or CPU steal above :data:`STEAL_LIMIT`, or a foreign
load above :data:`LOAD_LIMIT` per core, or other processes' CPU share above :data:`FOREIGN_CPU_LIMIT`
(:mod:`nspsim_runtime.machine`):

1. ``raw <= T``: within (exit 0), the signals and any case that stands out noted;
2. else a case *stands out* from its rank count's common level (:mod:`nspsim_runtime.validation.level`)
   and no other job contended for the cores (steal and foreign load within their limits): *the model is
   wrong* for it (exit 1), since interleaved cases share a drift of the machine's speed. Contention
   does not act alike on every strategy (measured: a busy-loop started 40 s into a default run put
   ``static:degree=1`` +37% off the level, foreign load 0.39 per core), so under it a standout cannot
   be told from the machine;
3. else ``corrected <= T``: *the machine moved* (the correction explains the error; exit 4);
4. else any machine signal: *the machine moved* (the run cannot judge the model; exit 4);
5. else *the model is wrong* (exit 1).

Without ``--max-mape`` the verdict line names the cases that stand out first (the model), else the
machine when there is a signal or the correction removes at least :data:`EXPLAINS_SHARE` of the MAPE,
and says the machine was steady otherwise. The common level and the spread around it are in every
line. Trade-off: rule 4 lets a wrong model hide behind a busy machine, but never as a pass: it exits
non-zero and asks for a run on a quiet machine, where rules 2 and 5 can speak; on a machine whose
speed drifted without contention, an error of one strategy against the others cannot hide (rule 2).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from nspsim_runtime.validation.level import Deviation, spread, standout_phrase

DRIFT_FLAG = 0.10
"""A case is flagged when the speed reference moved more than this within one of its blocks: the
validation aims at errors of ~10%, and a step whose machine changed speed by more than that while
it ran cannot be priced to 10% by any single speed (the reference itself repeats to a few percent)."""
RUN_DRIFT_LIMIT = 0.10
"""The machine moved when the reference spread over the run, or its median speed against calibration,
exceeds this: the same 10% scale (a 1.5x drift gave 23% MAPE on the held-out suite)."""
STEAL_LIMIT = 0.05
"""CPU steal above this share takes half the 10% budget from the ranks outright, unevenly in time."""
LOAD_LIMIT = 0.25
"""Foreign load (1-minute load average less the run's own ranks) per core above this: another job
wants a quarter of every core; a 2-rank run on 2 cores then loses a share of its slices."""
FOREIGN_CPU_LIMIT = 0.10
"""Other processes' share of all CPU time over the run (:func:`nspsim_runtime.machine.foreign_cpu`,
exact where the ranks' own jiffies are read) above which another job contended for the cores. Measured on
the 2-core development VM (2026-12-02): 0.5% over a quiet held-out run (1.6% in its worst block); 19%
(42% in the worst block) with a busy-loop started 40 s into a default run, whose 1-minute load average
gave a foreign load of only 0.15 per core."""
EXPLAINS_SHARE = 1.0 / 3.0
"""The correction *explains* the error when it removes at least this share of the MAPE."""
EXIT_MACHINE_MOVED = 4
"""``--max-mape`` failed but the machine moved (rules 2 and 3): distinct from the model's exit 1."""


def block_drift(before_s: float, after_s: float) -> float:
    """How far the reference moved across a block, ``|after - before| / min(before, after)``."""
    return abs(after_s - before_s) / min(before_s, after_s)


def step_factors(blocks: Sequence[dict[str, Any]], steps: Sequence[int], calibration_s: float) -> tuple[float, ...]:
    """The speed factor of each of ``steps`` (a case's step numbers) from its ``blocks`` (``first``,
    ``count``, ``before_s``, ``after_s``): the block's mean reference over ``calibration_s``.
    ``ValueError`` for a step no block covers."""
    out = []
    for step in steps:
        block = next((b for b in blocks if b["first"] <= step < b["first"] + b["count"]), None)
        if block is None:
            raise ValueError(f"step {step} is in no block of the schedule")
        out.append((block["before_s"] + block["after_s"]) / 2.0 / calibration_s)
    return tuple(out)


def case_drift(blocks: Sequence[dict[str, Any]]) -> float | None:
    """The largest :func:`block_drift` over a case's measured (not warm-up) blocks."""
    values = [block_drift(b["before_s"], b["after_s"]) for b in blocks if not b.get("warmup")]
    return max(values) if values else None


def corrected_mean(predicted: Sequence[float], factors: Sequence[float]) -> float:
    """Mean of the predictions each scaled by its step's speed factor."""
    return sum(p * f for p, f in zip(predicted, factors, strict=True)) / len(predicted)


@dataclass(frozen=True, kw_only=True)
class Machine:
    """What the run says about the machine (``None``: not known)."""

    run_drift: float | None = None  # max / min - 1 of every reference of the run
    median_factor: float | None = None  # median over cases of their mean speed factor
    flagged: int = 0  # cases flagged (DRIFT_FLAG)
    steal: float | None = None  # steal share over the run
    foreign_load: float | None = None  # median foreign load per core
    foreign_cpu: float | None = None  # share of all CPU time other processes used over the run


@dataclass(frozen=True, kw_only=True)
class Verdict:
    """``status``: ``within``, ``machine`` or ``model`` (with ``--max-mape``), ``machine`` or ``steady``
    (without); ``exit_code`` the status to exit with; ``line`` the one line that says it."""

    status: str
    exit_code: int
    line: str
    signals: tuple[str, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, Any]:
        """The JSON fields."""
        return {"status": self.status, "exit_code": self.exit_code, "line": self.line, "signals": list(self.signals)}


def signals(m: Machine) -> tuple[str, ...]:
    """The machine signals above their thresholds, each a short phrase (module docstring)."""
    out = []
    if m.run_drift is not None and m.run_drift > RUN_DRIFT_LIMIT:
        out.append(f"the speed reference moved {m.run_drift:.0%} during the run")
    if m.median_factor is not None and abs(m.median_factor - 1.0) > RUN_DRIFT_LIMIT:
        out.append(f"the machine ran at {m.median_factor:.2f}x the calibration's reference time")
    if m.flagged:
        out.append(f"{m.flagged} case(s) saw it move more than {DRIFT_FLAG:.0%} within a block")
    if m.steal is not None and m.steal > STEAL_LIMIT:
        out.append(f"CPU steal {m.steal:.0%}")
    if m.foreign_load is not None and m.foreign_load > LOAD_LIMIT:
        out.append(f"foreign load {m.foreign_load:.2f} per core")
    if m.foreign_cpu is not None and m.foreign_cpu > FOREIGN_CPU_LIMIT:
        out.append(f"other processes used {m.foreign_cpu:.0%} of the CPU time")
    return tuple(out)


def contended(m: Machine) -> bool:
    """Another job contended for the cores: steal, foreign load or other processes' CPU share above its
    limit (rule 2 is off)."""
    stolen = m.steal is not None and m.steal > STEAL_LIMIT
    used = m.foreign_cpu is not None and m.foreign_cpu > FOREIGN_CPU_LIMIT
    return stolen or used or (m.foreign_load is not None and m.foreign_load > LOAD_LIMIT)


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1%}"


def verdict(
    raw: float,
    corrected: float | None,
    machine: Machine,
    max_mape: float | None,
    devs: Sequence[Deviation] = (),
) -> Verdict:
    """The verdict of a run whose MAPE is ``raw`` (``corrected`` after the speed correction, ``None``
    without a calibration reference) on ``machine``, against ``max_mape``, with each case's deviation
    from the common level in ``devs`` (module docstring's rules)."""
    found = signals(machine)
    said = "; ".join(found)
    out = "" if contended(machine) else standout_phrase(devs)
    level = _level_phrase(devs)
    mapes = f"corrected MAPE {_pct(corrected)}, raw {_pct(raw)}{level}"
    steady = (
        f"machine steady (reference moved {_pct(machine.run_drift)}, steal {_pct(machine.steal)}, "
        f"foreign load {'n/a' if machine.foreign_load is None else f'{machine.foreign_load:.2f}'} per core)"
    )
    wrong_for = f"verdict: the model is wrong for {out}, off the common level of the interleaved cases ({mapes})"
    if max_mape is None:
        explains = corrected is not None and raw - corrected >= EXPLAINS_SHARE * raw > 0
        if out:
            return Verdict(status="model", exit_code=0, line=wrong_for, signals=found)
        if found or explains:
            why = said or "the speed correction removes a third or more of the error"
            return Verdict(status="machine", exit_code=0, line=f"verdict: the machine moved: {why} ({mapes})",
                           signals=found)  # fmt: skip
        return Verdict(status="steady", exit_code=0, line=f"verdict: {steady}; the errors are the model's ({mapes})")
    if raw <= max_mape:
        notes = [x for x in (said, f"{out} off the common level" if out else "") if x]
        note = f"; note: {'; '.join(notes)}" if notes else ""
        return Verdict(status="within", exit_code=0, line=f"verdict: MAPE {_pct(raw)} within --max-mape "
                       f"{_pct(max_mape)}{note}", signals=found)  # fmt: skip
    if out:
        return Verdict(status="model", exit_code=1, line=wrong_for, signals=found)
    if corrected is not None and corrected <= max_mape:
        why = f"; {said}" if found else ""
        line = f"verdict: the machine moved: {mapes}, within --max-mape {_pct(max_mape)} only once corrected{why}"
        return Verdict(status="machine", exit_code=EXIT_MACHINE_MOVED, line=line, signals=found)
    if found:
        line = (
            f"verdict: the machine moved: {said}; this run cannot judge the model ({mapes}; rerun on a quiet machine)"
        )
        return Verdict(status="machine", exit_code=EXIT_MACHINE_MOVED, line=line, signals=found)
    line = f"verdict: the model is wrong: {mapes} above --max-mape {_pct(max_mape)} on a {steady}"
    return Verdict(status="model", exit_code=1, line=line)


def _level_phrase(devs: Sequence[Deviation]) -> str:
    """``"; every case -7% alike, spread 8.3% around it"`` (one level per rank count when there are several)."""
    if not devs:
        return ""
    levels = {d.ranks: d.level for d in devs}
    alike = (
        f"{next(iter(levels.values())):+.0%}"
        if len(levels) == 1
        else ", ".join(f"{level:+.0%} at {ranks} ranks" for ranks, level in sorted(levels.items()))
    )
    return f"; every case {alike} alike, spread {_pct(spread(devs))} around it"
