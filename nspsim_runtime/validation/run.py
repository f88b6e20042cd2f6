"""Run a rank count's validation cases through the real runtime, interleaved, and read back what they
measured and predicted.

The cases of one rank count run in one ``python -m nspsim_runtime.run --standalone --nproc-per-node N
-m nspsim_runtime.validation.worker PLAN`` process group (:mod:`nspsim_runtime.validation.worker`: why one
group, and its measured cost), in rounds of blocks shuffled with ``--seed``
(:mod:`nspsim_runtime.validation.rounds`), a speed reference between consecutive blocks. Each case
writes the records ``nspsim_runtime.train --records`` writes, with every batch planned before the
first step (``--plan-ahead all``: no planner shares the cores with a measured step). Each step's
prediction is the simulator's, made in the run for the plan it executed with the same profile
(:mod:`nspsim_runtime.prediction`); the first :data:`~nspsim_runtime.validation.cases.WARMUP_STEPS`
steps of a case are left out. With a profile that carries a calibration speed reference, each step
also gets its block's speed factor (:mod:`nspsim_runtime.validation.drift`). Trade-off: one process
group for all cases saves a ~10 s launch per case and lets rounds interleave them, but a case that
fails mid-run fails the group's remaining cases with it.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from nspsim.cost.profile import load_profile
from nspsim.jsonfile import read_json
from nspsim.records import BREAKDOWN_CATEGORIES
from nspsim_runtime.report import load_step_records
from nspsim_runtime.validation.cases import WARMUP_STEPS, Case
from nspsim_runtime.validation.drift import case_drift, step_factors
from nspsim_runtime.validation.rounds import schedule
from nspsim_runtime.validation.stats import CaseResult

ANALYTIC = "analytic"
"""The ``--profile`` value that predicts with the cluster preset's analytic figures (no profile)."""


class CaseFailed(RuntimeError):
    """A case's run failed or predicted nothing; the message is one line saying why."""


def slug(case: Case, index: int) -> str:
    """A file-name-safe name of ``case``."""
    return f"{index:02d}-" + re.sub(r"[^A-Za-z0-9]+", "-", case.name).strip("-")


@dataclass(frozen=True, kw_only=True)
class GroupOutcome:
    """What a group of cases gave: results, failures, its blocks, references and machine snapshots."""

    results: list[CaseResult]
    failed: dict[str, str]
    blocks: list[dict[str, Any]] = field(default_factory=list)
    references: list[list[float]] = field(default_factory=list)
    machine: list[dict[str, Any]] = field(default_factory=list)


def calibration_reference(profile: str) -> tuple[float | None, str, str]:
    """The profile's calibration speed reference in seconds (``None`` if it has none: an older profile
    or ``analytic``), and the model and kernel the reference must time to compare with it."""
    if profile == ANALYTIC:
        return None, "tiny", "auto"
    loaded = load_profile(profile)
    ref = loaded.provenance.get("speed_reference")
    median = ref.get("median_s") if isinstance(ref, dict) else None
    model, kernel = loaded.model or "tiny", str(loaded.provenance.get("kernel", "auto"))
    if isinstance(median, (int, float)) and not isinstance(median, bool) and 0 < median < math.inf:
        return float(median), model, kernel
    return None, model, kernel


def run_group(
    cases: list[tuple[int, Case]], profile: str, out_dir: Path, timeout_s: float, *, seed: int, block_steps: int
) -> GroupOutcome:
    """Run ``cases`` (``(index, case)``, all at one rank count) interleaved in one process group
    (module docstring); a case whose records are missing or unusable is in ``failed``, and when the
    group itself fails every case is, with the group's reason."""
    ranks = cases[0][1].ranks
    calibration_s, model, kernel = calibration_reference(profile)
    rounds = schedule([c.steps for _, c in cases], block_steps=block_steps, warmup=WARMUP_STEPS, seed=seed)
    records = [out_dir / f"{slug(case, i)}.jsonl" for i, case in cases]
    extra = ["--profile", profile] if profile != ANALYTIC else []
    blocks_path = out_dir / f"blocks-{ranks}ranks.json"
    plan = {
        "cases": [
            {"train_args": [*case.train_args(), *extra, "--records", str(rec)]}
            for (_, case), rec in zip(cases, records, strict=True)
        ],
        "schedule": [[[b.case, b.first, b.count, b.warmup] for b in members] for members in rounds],
        "reference_model": model,
        "reference_kernel": kernel,
        "blocks": str(blocks_path),
        "comm_timeout_s": timeout_s,
    }
    plan_path = out_dir / f"plan-{ranks}ranks.json"
    plan_path.write_text(json.dumps(plan, indent=1))
    log = out_dir / f"group-{ranks}ranks.log"
    cmd = [
        sys.executable, "-m", "nspsim_runtime.run", "--standalone", "--nproc-per-node", str(ranks),
        "-m", "nspsim_runtime.validation.worker", str(plan_path),
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    total_s = timeout_s * len(cases)
    blocks_path.unlink(missing_ok=True)
    try:
        with log.open("w") as sink:
            done = subprocess.run(cmd, stdout=sink, stderr=subprocess.STDOUT, timeout=total_s, env=env, check=False)
        why = None if done.returncode == 0 else f"exited {done.returncode}: {_last_error(log)} (log: {log})"
    except subprocess.TimeoutExpired:
        why = f"ran past {total_s:.0f} s ({len(cases)} cases x --case-timeout; log: {log})"
    if why is not None or not blocks_path.exists():
        reason = f"the {ranks}-rank group " + (why or f"wrote no {blocks_path.name} (log: {log})")
        return GroupOutcome(results=[], failed={case.name: reason for _, case in cases})
    written = read_json(blocks_path, "validation blocks")
    outcome = GroupOutcome(
        results=[], failed={}, blocks=written["blocks"], references=written["references"], machine=written["machine"]
    )
    for number, ((_, case), rec) in enumerate(zip(cases, records, strict=True)):
        try:
            result = read_case(case, rec)
        except (CaseFailed, ValueError) as exc:
            outcome.failed[case.name] = str(exc)
            continue
        mine = [b for b in outcome.blocks if b["case"] == number]
        steps = [WARMUP_STEPS + i for i in range(len(result.measured_s))]
        factors = step_factors(mine, steps, calibration_s) if calibration_s is not None else ()
        outcome.results.append(replace(result, speed_factors=factors, reference_drift=case_drift(mine)))
    return outcome


def precheck_case(case: Case, profile: str | None) -> None:
    """Refuse (one-line ``ValueError`` naming the case) what ``nspsim_runtime.train`` would refuse for
    ``case`` at its rank count: options, planner and its options, trace, sizes, and a ``profile``
    made for another machine or rank count; run before any case launches."""
    from nspsim.workload import build_workload
    from nspsim_runtime.training.args import parse_args
    from nspsim_runtime.training.trainer import check_planner

    extra = ["--profile", profile] if profile not in (None, ANALYTIC) else []
    try:
        args = parse_args([*case.train_args(), *extra])
        workload = build_workload(args.workload_on(world=case.ranks, device_type="cpu"))
        check_planner(args, workload, "cpu")
    except (ValueError, TypeError, SystemExit) as exc:  # TypeError: a case value of the wrong type
        raise ValueError(f"case {case.name}: {exc}") from None


def _last_error(log: Path) -> str:
    text = log.read_text(errors="replace").splitlines()
    lines = [
        ln for ln in text if ln.startswith(("nspsim_runtime.train", "nspsim_runtime.validation")) and "error" in ln
    ] or [ln for ln in text if "error" in ln.lower()]
    return lines[-1].strip()[:300] if lines else "no error line in its output"


def read_case(case: Case, records: Path) -> CaseResult:
    """The :class:`CaseResult` of a finished case's records."""
    return case_result(case, load_step_records(str(records))[WARMUP_STEPS:], f"case {case.name}")


def records_case(path: str) -> CaseResult:
    """The :class:`CaseResult` of an existing ``nspsim_runtime.train --records`` file (its own predictions,
    made with whatever profile that run used); the batches key comes from the resolved configuration
    written beside it. :class:`CaseFailed` when a step has no prediction or the configuration is missing."""
    from nspsim_runtime.training.outputs import output_paths

    config_path = output_paths(path)[1]
    try:
        recs = load_step_records(path)
    except ValueError as exc:
        raise CaseFailed(str(exc)) from None
    if not config_path.exists():
        raise CaseFailed(f"{path}: no {config_path.name} beside it (nspsim_runtime.train --records writes one)")
    try:
        config = read_json(config_path, "nspsim_runtime.train resolved config")
    except ValueError as exc:
        raise CaseFailed(str(exc)) from None
    workload = config.get("workload") if isinstance(config, dict) else None
    if not isinstance(workload, dict):
        raise CaseFailed(f"{config_path}: not a nspsim_runtime.train resolved config (no 'workload' object)")
    first = recs[0]
    try:
        planner = str(first.get("planner_spec") or first["planner"])
        ranks = first["num_gpus"]
        if isinstance(ranks, bool) or not isinstance(ranks, int) or any(r.get("num_gpus") != ranks for r in recs):
            raise CaseFailed(f"{path}: num_gpus must be one integer in every record, got {ranks!r} first")
        case = Case(
            ranks=ranks,
            planner=planner,
            label=f"{Path(path).stem} ({planner} @{ranks})",
            trace=str(workload.get("trace", "")),
            model=str(workload.get("model", first["model"])),
            tokens_per_batch=int(workload.get("tokens_per_batch", 1)),
            max_context=int(workload.get("max_context", 1)),
            seed=int(workload.get("seed", 0)),
            steps=max(len(recs), WARMUP_STEPS + 2),
            start_batch=int(first["batch_index"]),
        )
    except KeyError as exc:
        raise CaseFailed(
            f"{path}: its first record has no {exc.args[0]!r} (not a nspsim_runtime.train step record)"
        ) from None
    except (TypeError, ValueError) as exc:
        raise CaseFailed(f"{path}: {' '.join(str(exc).split())}") from None
    kept = recs[WARMUP_STEPS:] if len(recs) > WARMUP_STEPS + 1 else recs
    return case_result(case, kept, path)


MIN_S, MAX_S = 1e-9, 1e6
"""A measured or predicted step lies between a nanosecond and 11 days: anything else is not a time a
record can hold (a subnormal step made the error infinite and the JSON unwritable)."""


def case_result(case: Case, kept: list[dict[str, Any]], where: str) -> CaseResult:
    """Measured and predicted steps of ``case`` from its ``kept`` step records; :class:`CaseFailed`
    naming ``where`` when a step has no prediction or a number in them is not a finite time (each
    step time > 0, each prediction and breakdown part >= 0): the one place those numbers enter."""
    for i, r in enumerate(kept):
        step = r.get("step", i)
        if r.get("simulated_step_time_s") is None:
            note = r.get("simulated_note") or "no prediction"
            raise CaseFailed(f"{where}: step {step} has no prediction ({note})")
        for key in ("step_time_s", "simulated_step_time_s"):
            value = r.get(key)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not MIN_S <= value <= MAX_S:
                raise CaseFailed(f"{where}: step {step}: {key} is {value!r}, not a time from {MIN_S:g} to {MAX_S:g} s")
        for key in ("breakdown_s", "simulated_breakdown_s"):
            parts = r.get(key) or {}
            if not isinstance(parts, dict) or any(
                isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < math.inf for v in parts.values()
            ):
                raise CaseFailed(f"{where}: step {step}: {key} must map categories to finite seconds >= 0")
    return CaseResult(
        label=case.name,
        ranks=case.ranks,
        planner=case.planner,
        batches=case.batches,
        measured_s=tuple(float(r["step_time_s"]) for r in kept),
        predicted_s=tuple(float(r["simulated_step_time_s"]) for r in kept),
        measured_breakdown_s=_mean_breakdown([r.get("breakdown_s") or {} for r in kept]),
        predicted_breakdown_s=_mean_breakdown([r.get("simulated_breakdown_s") or {} for r in kept]),
    )


def _mean_breakdown(parts: list[dict[str, float]]) -> dict[str, float]:
    return {k: float(np.mean([p.get(k, 0.0) for p in parts])) for k in BREAKDOWN_CATEGORIES}
