"""Validate the simulator against measured runs on this machine: ``python -m nspsim_runtime.validate``.

Runs every case (:mod:`nspsim_runtime.validation.cases`: the built-in suite at ``--ranks``, the held-out
suite, or ``--cases FILE``) through the real runtime with a cost profile (``--profile``, else a fresh
``nspsim_runtime.calibrate`` at each rank count, written to ``DIR/profile-<N>ranks.json``), and reports per
case the measured step time (mean and standard deviation after warm-up), the prediction, the signed
relative error and the per-category errors; overall MAPE, maximum and geometric-mean absolute error;
and whether the simulator orders right every pair of cases on the same batches whose measured order
is decided (:mod:`nspsim_runtime.validation.stats`), with Kendall's tau.

``-o DIR`` (default ``out/validation``) receives ``validation.json``, the resolved configuration
(``validation.config.json``), the profile(s) used, every case's records and log, and ``report.html``
(predicted against measured, per-category errors, the case table). ``--json`` prints the result
object instead of the table; ``--max-mape X`` exits 1 when the MAPE is above X; a run in which some
case failed exits 3 (the others still reported). Bad options, and cases whose planner, trace, sizes
or profile ``nspsim_runtime.train`` would refuse, end with one line ``nspsim_runtime.validate: error: ...`` and
status 2 before anything runs.
"""

from __future__ import annotations

import importlib
import json
import math
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
from nspsim_runtime.validation.cases import SUITES, Case, dump_cases, load_cases
from nspsim_runtime.validation.run import ANALYTIC, CaseFailed, precheck_case, records_case, run_case
from nspsim_runtime.validation.stats import CaseResult, summarise

PROG = "nspsim_runtime.validate"
REPORT_RENDERER = "nspsim_studies.renderers.validation_report"
"""The module that draws ``report.html`` (loaded by name: the runtime does not import studies)."""
EXIT_FAILED_MAPE = 1
EXIT_FAILED_CASES = 3
"""Some cases failed (the others are reported and written); distinct from a MAPE above ``--max-mape``."""


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


def table(results: list[CaseResult], failed: dict[str, str]) -> str:
    """The per-case table a person reads."""
    lines = [f"{'case':<36} {'meas s':>8} {'std':>7} {'pred s':>8} {'error':>7}  worst category"]
    for r in results:
        worst = max(r.breakdown_error.items(), key=lambda kv: abs(kv[1]), default=("-", 0.0))
        lines.append(
            f"{shown(r.label):<36} {r.measured_step_s:8.3f} {r.measured_std_s:7.3f} {r.predicted_step_s:8.3f} "
            f"{r.error:+7.1%}  {worst[0]} {worst[1]:+.1%}"
        )
    for label, why in failed.items():
        lines.append(f"{shown(label):<36} failed: {shown(why)}")
    return "\n".join(lines)


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
    for i, case in enumerate(Bar(cases, desc="cases", unit="case", file=sys.stderr, disable=args.json)):
        try:
            results.append(run_case(case, i, profiles[case.ranks], out, args.case_timeout))
        except CaseFailed as exc:
            failed[case.name] = str(exc)
    if not results:
        fail(PROG, RuntimeError(f"every case failed; first: {next(iter(failed.values()))}"), 1)
    _report(args, argv, results, failed, profiles=profiles, started=started, cases=cases)


def _report(
    args: Any,
    argv: list[str],
    results: list[CaseResult],
    failed: dict[str, str],
    *,
    profiles: dict[int, str],
    started: float,
    cases: list[Case] | None = None,
) -> None:
    """Write ``-o DIR`` (JSON, config, profiles, report.html), print the table or JSON, apply ``--max-mape``."""
    out = Path(args.output)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        fail(PROG, ValueError(f"-o {out}: {exc.strerror}"), EXIT_USAGE)
    summary = summarise(results)
    used = {str(n): ANALYTIC if p == ANALYTIC else str(load_profile(p).name) for n, p in profiles.items()}
    if args.records is not None:
        used = {"records": "the profile each run used (its records' profile field)"}
    payload: dict[str, Any] = {
        "cases": [r.to_dict() for r in results],
        "failed": failed,
        **summary.to_dict(),
        "profile": used,
        "wall_s": time.perf_counter() - started,
    }
    config = {
        "argv": argv,
        "cases": [c.to_dict() for c in cases or []],
        "records": args.records,
        "profiles": profiles,
    }
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
    if args.json:
        print(json.dumps(payload))
    else:
        print(table(results, failed))
        print(
            f"MAPE {summary.mape:.1%}  max {summary.max_abs_error:.1%}  geomean {summary.geomean_abs_error:.1%}  "
            f"pairs resolved {summary.pairs_resolved}, agree {summary.pairs_agree}  "
            f"Kendall tau {summary.kendall_tau if summary.kendall_tau is None else round(summary.kendall_tau, 3)}  "
            f"({time.perf_counter() - started:.0f} s; {out}/report.html)"
        )
    if failed:
        first = next(iter(failed.items()))
        print(f"{PROG}: {len(failed)} case(s) failed; first: {first[0]}: {first[1]}", file=sys.stderr)
        sys.exit(EXIT_FAILED_CASES)
    if args.max_mape is not None and summary.mape > args.max_mape:
        print(f"{PROG}: MAPE {summary.mape:.1%} is above --max-mape {args.max_mape:.1%}", file=sys.stderr)
        sys.exit(EXIT_FAILED_MAPE)


if __name__ == "__main__":
    main()
