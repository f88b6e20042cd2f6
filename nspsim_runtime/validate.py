"""Validate the simulator against measured runs on this machine: ``python -m nspsim_runtime.validate``.

Runs every case (:mod:`nspsim_runtime.validation.cases`: the built-in suite at ``--ranks``, the held-out
suite, or ``--cases FILE``) through the real runtime with a cost profile (``--profile``, else a fresh
``nspsim_runtime.calibrate`` at each rank count, written to ``DIR/profile-<N>ranks.json``), and reports per
case the measured step time (mean and standard deviation after warm-up), the prediction, the signed
relative error and the per-category errors; overall MAPE, maximum and geometric-mean absolute error;
and whether the simulator orders right every pair of cases on the same batches whose measured order
is decided (:mod:`nspsim_runtime.validation.stats`), with Kendall's tau.

The cases of a rank count run interleaved in one process group (:mod:`nspsim_runtime.validation.run`):
rounds of one block of ``--block-steps`` steps per case, in an order shuffled per round with
``--seed`` (drawn when not given; recorded in ``validation.config.json``), so a machine that drifts
over minutes slows every strategy alike. A speed reference (the calibration's kernel mix, every rank
busy) runs between consecutive blocks; each case reports, beside its raw prediction and error, its
speed factor (its blocks' reference over the calibration's), the corrected prediction and its error,
and the largest move of the reference within one of its blocks (flagged above 10%:
:mod:`nspsim_runtime.validation.drift`). The load average, CPU steal and frequency before, during and
after the run are recorded beside the calibration's (:mod:`nspsim_runtime.machine`).

Each case's error is also given off its rank count's common level (``dev``; ``!`` when it stands
out: :mod:`nspsim_runtime.validation.level`): the part no speed common to the interleaved run explains.
The first line printed (and ``verdict`` in the JSON, and the report's first line) names the cause of
the error: within ``--max-mape``, the machine moved, or the model is wrong (rules in
:mod:`nspsim_runtime.validation.drift`). Exit status: 0 within ``--max-mape`` (or without it);
1 (``EXIT_FAILED_MAPE``) when the MAPE is above ``--max-mape`` and a case stands out from the common
level, or on a steady machine: *the model is wrong*; 4 (``EXIT_MACHINE_MOVED``) when it is above but
no case stands out and the speed-corrected MAPE is within, or the speed reference, steal or foreign
load crossed their thresholds: *the machine moved*, rerun on a quiet machine; 3 when some case
failed (the others still reported).

``-o DIR`` (default ``out/validation``) receives ``validation.json``, the resolved configuration
(``validation.config.json``), the profile(s) used, every case's records and log, and ``report.html``
(predicted against measured, per-category errors, the case table). ``--json`` prints the result
object instead of the table. Bad options, and cases whose planner, trace, sizes
or profile ``nspsim_runtime.train`` would refuse, end with one line ``nspsim_runtime.validate: error: ...`` and
status 2 before anything runs.
"""

from __future__ import annotations

import importlib
import json
import math
import secrets
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from nspsim.cli.flags import Parser, shown, silence_closed_stdout
from nspsim.cli.progress import Bar
from nspsim.cli.renderer_error import renderer_error
from nspsim.cost.profile import load_profile
from nspsim.options import fraction
from nspsim_runtime.cli import EXIT_USAGE, exit_on_interrupt, fail
from nspsim_runtime.machine import snapshot
from nspsim_runtime.machine import summarise as machine_summary
from nspsim_runtime.validation.cases import SUITES, Case, dump_cases, load_cases
from nspsim_runtime.validation.drift import EXIT_MACHINE_MOVED, Machine, Verdict, verdict
from nspsim_runtime.validation.level import Deviation, deviations, spread, step_error_se
from nspsim_runtime.validation.run import ANALYTIC, CaseFailed, GroupOutcome, precheck_case, records_case, run_group
from nspsim_runtime.validation.stats import CaseResult, Summary, summarise

PROG = "nspsim_runtime.validate"
REPORT_RENDERER = "nspsim_studies.renderers.validation_report"
"""The module that draws ``report.html`` (loaded by name: the runtime does not import studies)."""
EXIT_FAILED_MAPE = 1
EXIT_FAILED_CASES = 3
"""Some cases failed (the others are reported and written); distinct from a MAPE above ``--max-mape``."""
assert EXIT_MACHINE_MOVED not in (EXIT_FAILED_MAPE, EXIT_FAILED_CASES, EXIT_USAGE)


def build_parser() -> Parser:
    """The command line; errors raise ``ValueError`` (one line)."""
    p = Parser(prog=PROG, description="Run validation cases through the runtime and compare measured with simulated "
               "step times (errors per case, MAPE, strategy order).")  # fmt: skip
    p.add_argument("--ranks", type=int, nargs="+", default=[2], help="rank counts of the built-in suite (e.g. 2 4)")
    p.add_argument("--suite", choices=sorted(SUITES), default="default", help="built-in suite (default: default)")
    p.add_argument("--cases", default=None, help="JSON list of cases (nspsim_runtime.train options plus ranks)")
    p.add_argument(
        "--profile",
        default=None,
        help="cost profile to predict with (default: calibrate first; 'analytic': the cpu preset, no profile)",
    )
    p.add_argument("-o", "--output", default="out/validation", help="output directory (default: out/validation)")
    p.add_argument("--json", action="store_true", help="print the result as one JSON object")
    p.add_argument("--max-mape", type=fraction, default=None, help="exit 1 when the MAPE is above this (0.1 or 10%%)")
    p.add_argument("--case-timeout", type=float, default=900.0, help="seconds one case may run (default 900)")
    p.add_argument(
        "--seed", type=int, default=None, help="seed of the case order in each round (default: drawn, recorded)"
    )
    p.add_argument("--block-steps", type=int, default=1, help="steps of a case per round after warm-up (default 1)")
    p.add_argument("--list", action="store_true", help="print the cases as --cases reads them and exit")
    p.add_argument(
        "--records",
        nargs="+",
        default=None,
        metavar="FILE",
        help="validate existing nspsim_runtime.train --records files (their own predictions) instead of running cases",
    )
    return p


def resolve_cases(args: Any) -> list[Case]:
    """The cases to run (``ValueError`` for bad input)."""
    for n in args.ranks:
        if n < 1 or n > 8 or n & (n - 1):
            raise ValueError(f"--ranks takes powers of two from 1 to 8, got {n}")
    if not 0 < args.case_timeout < math.inf:
        raise ValueError(f"--case-timeout must be a positive number of seconds, got {args.case_timeout}")
    if args.max_mape is not None and not 0 < args.max_mape < math.inf:
        raise ValueError(f"--max-mape must be a positive fraction (0.1 for 10%), got {args.max_mape}")
    if args.block_steps < 1:
        raise ValueError(f"--block-steps must be at least 1, got {args.block_steps}")
    if args.seed is not None and not 0 <= args.seed < 2**32:
        raise ValueError(f"--seed must be an integer from 0 to 2**32 - 1, got {args.seed}")
    if not args.output.strip():
        raise ValueError("-o: the output folder is empty")
    if Path(args.output).exists() and not Path(args.output).is_dir():
        raise ValueError(f"-o {args.output}: exists and is not a folder")
    if args.cases is not None:
        return load_cases(args.cases)
    return SUITES[args.suite](tuple(sorted(set(args.ranks))))


def _calibrate(ranks: int, out: Path) -> str:
    target = out / f"profile-{ranks}ranks.json"
    cmd = [sys.executable, "-m", "nspsim_runtime.calibrate", "--ranks", str(ranks), "-o", str(target)]
    done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, check=False)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"calibration at {ranks} ranks failed: {last}")
    return str(target)


def table(results: list[CaseResult], failed: dict[str, str], devs: tuple[Deviation, ...] = ()) -> str:
    """The per-case table a person reads (``dev``: the error off the common level, ``!`` when it stands out;
    ``devs`` aligned with ``results``, or empty)."""
    lines = [
        f"{'case':<36} {'meas s':>8} {'std':>7} {'pred s':>8} {'error':>7} {'dev':>7} {'speed':>6} {'corr s':>8} "
        f"{'c.err':>7} {'drift':>6}  worst category"
    ]
    for i, r in enumerate(results):
        d = devs[i] if devs else None
        dev = f"{_num(None if d is None else d.deviation, '+6.1%')}{'!' if d is not None and d.stands_out else ' '}"
        worst = max(r.breakdown_error.items(), key=lambda kv: abs(kv[1]), default=("-", 0.0))
        corrected = r.corrected_predicted_step_s
        lines.append(
            f"{shown(r.label):<36} {r.measured_step_s:8.3f} {r.measured_std_s:7.3f} {r.predicted_step_s:8.3f} "
            f"{r.error:+7.1%} {dev} {_num(r.speed_factor, '6.2f')} {_num(corrected, '8.3f')} "
            f"{_num(r.corrected_error, '+7.1%')} "
            f"{_num(r.reference_drift, '6.0%')}{'!' if r.flagged else ' '} {worst[0]} {worst[1]:+.1%}"
        )
    for label, why in failed.items():
        lines.append(f"{shown(label):<36} failed: {shown(why)}")
    return "\n".join(lines)


def _num(value: float | None, spec: str) -> str:
    width = int(spec.lstrip("+").split(".")[0])
    return f"{'n/a':>{width}}" if value is None else format(value, spec)


def _validate_records(args: Any, argv: list[str]) -> None:
    """``--records``: the statistics of existing runs, written and printed as for run cases."""
    results: list[CaseResult] = []
    failed: dict[str, str] = {}
    seen: set[Path] = set()
    for path in args.records:
        if Path(path).resolve() in seen:
            failed[path] = "given twice; the second is left out"
            continue
        seen.add(Path(path).resolve())
        try:
            results.append(records_case(path))
        except CaseFailed as exc:
            failed[path] = str(exc)
    if not results:
        first = next(iter(failed.values()))
        fail(PROG, RuntimeError(f"none of the {len(failed)} records file(s) could be compared; first: {first}"), 1)
    _report(args, argv, results, failed, profiles={}, started=time.perf_counter())


def main(argv: list[str] | None = None) -> None:
    """Run the validation and report it."""
    argv = sys.argv[1:] if argv is None else argv
    try:
        args = build_parser().parse_args(argv)
        cases = resolve_cases(args)
        if args.profile is not None and args.profile != ANALYTIC:
            load_profile(args.profile)  # a bad profile fails before any run
        if args.records is None:
            for case in cases:  # what nspsim_runtime.train would refuse fails here, not after each launch
                precheck_case(case, args.profile)
    except ValueError as exc:
        fail(PROG, exc, EXIT_USAGE)
    if args.list:
        try:
            print(dump_cases(cases), flush=True)
        except BrokenPipeError:  # `--list | head`: the reader left; nothing to report
            sys.exit(silence_closed_stdout())
        return
    exit_on_interrupt(PROG)
    if args.records is not None:
        _validate_records(args, argv)
        return
    out = Path(args.output)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        fail(PROG, ValueError(f"-o {out}: {exc.strerror}"), EXIT_USAGE)
    started = time.perf_counter()
    before = snapshot()
    if args.seed is None:
        args.seed = secrets.randbelow(2**32)
    profiles: dict[int, str] = {}
    try:
        for n in sorted({c.ranks for c in cases}):
            if args.profile is not None:
                profiles[n] = args.profile
            else:
                print(f"{PROG}: calibrating at {n} ranks ...", file=sys.stderr, flush=True)
                profiles[n] = _calibrate(n, out)
    except RuntimeError as exc:
        fail(PROG, exc, 1)
    results: list[CaseResult] = []
    failed: dict[str, str] = {}
    groups: dict[int, GroupOutcome] = {}
    indexed = list(enumerate(cases))
    for n in Bar(sorted(profiles), desc="rank counts", unit="group", file=sys.stderr, disable=args.json):
        members = [(i, c) for i, c in indexed if c.ranks == n]
        groups[n] = run_group(
            members, profiles[n], out, args.case_timeout, seed=args.seed, block_steps=args.block_steps
        )
        results += groups[n].results
        failed.update(groups[n].failed)
    if not results:
        fail(PROG, RuntimeError(f"every case failed; first: {next(iter(failed.values()))}"), 1)
    _report(args, argv, results, failed, profiles=profiles, started=started, cases=cases, groups=groups, before=before)


def drift_section(
    results: list[CaseResult], groups: dict[int, GroupOutcome], before: dict[str, Any], profiles: dict[int, str]
) -> tuple[Machine, dict[str, Any]]:
    """The machine as the run saw it (for the verdict) and the JSON of it: the speed references and their
    spread, the calibration's reference per rank count, and the load, steal and frequency before, during
    (at every reference) and after the run, beside the calibration's own."""
    references = [s for g in groups.values() for _, s in g.references]
    samples = [m for g in groups.values() for m in g.machine]
    ranks = max(groups, default=1)
    during = machine_summary([before, *samples, snapshot()], busy_ranks=ranks) if samples else None
    factors = sorted(r.speed_factor for r in results if r.speed_factor is not None)
    machine = Machine(
        run_drift=max(references) / min(references) - 1.0 if references else None,
        median_factor=factors[len(factors) // 2] if factors else None,
        flagged=sum(r.flagged for r in results),
        steal=None if during is None else during["steal"],
        foreign_load=None if during is None else during["foreign_load"],
        foreign_cpu=None if during is None else during.get("foreign_cpu"),
    )
    calibration: dict[str, Any] = {}
    for n, p in profiles.items():
        prov = {} if p == ANALYTIC else dict(load_profile(p).provenance)
        ref, mach = prov.get("speed_reference") or {}, prov.get("machine") or {}
        calibration[str(n)] = {"reference_s": ref.get("median_s"), "reference_drift": ref.get("drift"),
                               "machine": mach.get("during")}  # fmt: skip
    section = {
        **machine.__dict__,
        "calibration": calibration,
        "references": {str(n): g.references for n, g in groups.items()},
        "machine": {"before": before, "during": during, "samples": samples},
        "rounds": {str(n): g.blocks for n, g in groups.items()},
    }
    return machine, section


def _report(
    args: Any,
    argv: list[str],
    results: list[CaseResult],
    failed: dict[str, str],
    *,
    profiles: dict[int, str],
    started: float,
    cases: list[Case] | None = None,
    groups: dict[int, GroupOutcome] | None = None,
    before: dict[str, Any] | None = None,
) -> None:
    """Write ``-o DIR`` (JSON, config, profiles, report.html), print the verdict line then the table or
    JSON, and exit as ``--max-mape`` and the verdict say (module docstring)."""
    out = Path(args.output)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        fail(PROG, ValueError(f"-o {out}: {exc.strerror}"), EXIT_USAGE)
    summary = summarise(results)
    used = {str(n): ANALYTIC if p == ANALYTIC else str(load_profile(p).name) for n, p in profiles.items()}
    if args.records is not None:
        used = {"records": "the profile each run used (its records' profile field)"}
    machine, drift = drift_section(results, groups or {}, before or snapshot(), profiles)
    devs = case_deviations(results, args.max_mape)
    # only cases run interleaved share the machine's drift; --records may come from runs far apart
    judged = verdict(summary.mape, summary.corrected_mape, machine, args.max_mape, devs if groups else ())
    payload: dict[str, Any] = {
        "verdict": judged.to_dict(),
        "cases": [{**r.to_dict(), **d.to_dict()} for r, d in zip(results, devs, strict=True)],
        "failed": failed,
        **summary.to_dict(),
        "spread": spread(devs),
        "profile": used,
        "drift": drift,
        "seed": args.seed,
        "block_steps": args.block_steps,
        "wall_s": time.perf_counter() - started,
    }
    config = {
        "argv": argv,
        "cases": [c.to_dict() for c in cases or []],
        "records": args.records,
        "profiles": profiles,
        "seed": args.seed,
        "block_steps": args.block_steps,
    }
    _write(out, payload, config, profiles)
    if args.json:
        print(json.dumps(payload))
    else:
        print(judged.line)
        print(table(results, failed, devs))
        print(_totals(summary, started, out, spread(devs)))
    _exit(args, judged, summary, failed)


def case_deviations(results: list[CaseResult], max_mape: float | None) -> tuple[Deviation, ...]:
    """Each case's deviation from its rank count's common level (:mod:`nspsim_runtime.validation.level`)."""
    rows = [(r.label, r.ranks, r.error, step_error_se(r.measured_s, r.predicted_s)) for r in results]
    return deviations(rows, max_mape)


def _totals(summary: Summary, started: float, out: Path, around: float | None) -> str:
    corrected = "n/a" if summary.corrected_mape is None else f"{summary.corrected_mape:.1%}"
    level = "" if around is None else f", {around:.1%} around the common level"
    tau = summary.kendall_tau if summary.kendall_tau is None else round(summary.kendall_tau, 3)
    return (
        f"MAPE {summary.mape:.1%} (speed-corrected {corrected}{level})  max {summary.max_abs_error:.1%}  "
        f"geomean {summary.geomean_abs_error:.1%}  pairs resolved {summary.pairs_resolved}, agree "
        f"{summary.pairs_agree}  Kendall tau {tau}  ({time.perf_counter() - started:.0f} s; {out}/report.html)"
    )


def _write(out: Path, payload: dict[str, Any], config: dict[str, Any], profiles: dict[int, str]) -> None:
    try:
        (out / "validation.json").write_text(json.dumps(payload, indent=1, allow_nan=False))
        (out / "validation.config.json").write_text(json.dumps(config, indent=1))
        for n, p in profiles.items():
            target = out / f"profile-{n}ranks.json"
            if p != ANALYTIC and Path(p).exists() and Path(p).resolve() != target.resolve():
                shutil.copyfile(p, target)
        try:
            renderer = importlib.import_module(REPORT_RENDERER)
        except ImportError as exc:
            fail(PROG, renderer_error(REPORT_RENDERER, exc, "build the HTML report"), EXIT_USAGE)
        renderer.write(out / "report.html", payload)
    except OSError as exc:
        fail(PROG, ValueError(f"-o {out}: cannot write {exc.filename or out} ({exc.strerror})"), EXIT_USAGE)


def _exit(args: Any, judged: Verdict, summary: Summary, failed: dict[str, str]) -> None:
    if failed:
        first = next(iter(failed.items()))
        print(f"{PROG}: {len(failed)} case(s) failed; first: {first[0]}: {first[1]}", file=sys.stderr)
        sys.exit(EXIT_FAILED_CASES)
    if args.max_mape is not None and summary.mape > args.max_mape:
        cause = "the model is wrong" if judged.exit_code == EXIT_FAILED_MAPE else "the machine moved"
        print(f"{PROG}: MAPE {summary.mape:.1%} is above --max-mape {args.max_mape:.1%}: {cause}", file=sys.stderr)
        sys.exit(judged.exit_code)


if __name__ == "__main__":
    main()
