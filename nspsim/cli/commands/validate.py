"""``nspsim validate``: the simulator against published GPU measurements.

Predicts every row of the built-in reference set (or ``--dataset FILE``s in the same form,
docs/validation.md) with nspsim's specs, cost model and simulator and prints, per row, the published
and simulated figures and the signed error, then MAPE and max |error| per kind (end-to-end, kernel,
collective), over all expressed rows and split into the rows that fitted a shipped coefficient
(``fit``) and those that only check (``check``). Rows the model cannot express are counted per reason.
``--json`` prints the document (``rows``: id, kind, source, published, simulated, error, ...;
``summary``: per kind n, mape, max_abs_error). ``-o DIR`` writes ``DIR/validation.html`` (a
predicted-vs-published scatter per kind, log axes, rows labelled) and ``DIR/validation.json`` beside
it. ``--max-mape X`` exits 1 when some kind's MAPE over its expressed rows exceeds X (0.10 or 10%),
or when a kind has rows but none the model expresses.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path
from typing import Any

from nspsim.cli.flags import emit, shown
from nspsim.cli.outputs import output_file, write_output
from nspsim.cli.renderer_error import renderer_error
from nspsim.jsonfile import dumps_json
from nspsim.options import fraction
from nspsim.validation.dataset import KINDS
from nspsim.validation.run import SPLIT, ValidationResult, validate
from nspsim.validation.summary import reasons

REPORT_RENDERER = "nspsim_studies.renderers.reference_report"  # plotly lives in the studies layer (see compare.py)
EXIT_MAPE = 1
REPORT_NAME = "validation.html"


def cmd_validate(args: argparse.Namespace) -> int:
    """Validate, print the table or JSON, write the report if asked; exit 1 over ``--max-mape``."""
    path = None
    if args.output is not None:
        if not args.output.strip():
            raise ValueError("-o: the output folder is empty")
        folder = Path(args.output)
        if folder.exists() and not folder.is_dir():
            raise ValueError(f"-o {args.output}: not a directory")
    report = _report_module() if args.output is not None else None
    result = validate(args.dataset, kinds=args.kind)  # seconds; a bad dataset fails before -o makes a folder
    if args.output is not None:
        path = output_file(
            str(Path(args.output) / REPORT_NAME),
            flag="-o",
            inputs=tuple(args.dataset or ()),
            siblings=(".json",),
            make_parent=True,
        )
    data = result.to_dict()
    if path is not None and report is not None:
        write_output(
            path, report.render(result), flag="-o", siblings={".json": dumps_json(data, what="validation", indent=2)}
        )
    emit(args, data, format_table(result))
    over = over_limit(result, args.max_mape)
    if over:
        print(f"nspsim: MAPE above {args.max_mape:.4g} ({args.max_mape:.2%}): {', '.join(over)}", file=sys.stderr)
        return EXIT_MAPE
    return 0


def over_limit(result: ValidationResult, limit: float | None) -> list[str]:
    """``kind MAPE`` for every kind whose MAPE exceeds ``limit``, and every kind with rows of which
    none is expressed (no MAPE is no pass)."""
    if limit is None:
        return []
    summary = result.summary()
    if not summary:
        return ["no row of the selected kind(s)"]
    out = []
    for kind, s in summary.items():
        if s.mape is None:
            out.append(f"{kind} (no expressed row of {s.rows})")
        elif s.mape > limit:
            out.append(f"{kind} {s.mape:.1%}")
    return out


def _report_module() -> Any:
    try:
        return importlib.import_module(REPORT_RENDERER)
    except ImportError as exc:
        raise renderer_error(REPORT_RENDERER, exc, "build the HTML report (-o)") from None


def _number(value: float) -> str:
    return f"{value:.4g}"


def format_table(result: ValidationResult) -> str:
    """Rows (grouped by kind), the not-expressible reasons, then the summary per kind."""
    lines = [f"# {SPLIT}", ""]
    head = f"{'id':52s} {'role':5s} {'published':>11s} {'simulated':>11s} {'unit':15s} {'error':>8s}"
    for kind in KINDS:
        rows = [r for r in result.results if r.row.kind == kind and r.error is not None]
        if not rows:
            continue
        lines += [f"## {kind}", head]
        for r in rows:
            sim = r.prediction.simulated or 0.0
            lines.append(
                f"{shown(r.row.id)[:52]:52s} {result.role(r.row):5s} {_number(r.row.published):>11s} "
                f"{_number(sim):>11s} {shown(r.row.unit):15s} {r.error:>+8.1%}"
            )
        lines.append("")
    blocked = [r for r in result.results if r.prediction.reason is not None]
    if blocked:
        lines.append(f"## not expressible ({len(blocked)} rows; --json lists each)")
        for reason, n in reasons(result.results).items():
            lines.append(f"{n:5d}  {shown(reason)}")
        lines.append("")
    lines.append("## summary (error = simulated / published - 1, in the row's unit)")
    lines.append(
        f"{'kind':12s} {'rows':>5s} {'n':>4s} {'MAPE':>7s} {'max|err|':>9s}   "
        f"{'fit: n MAPE':>14s}   {'check: n MAPE':>15s}"
    )
    fit, check = result.split_summary("fit"), result.split_summary("check")
    for kind, s in result.summary().items():
        parts = []
        for split in (fit, check):
            t = split.get(kind)
            parts.append(f"{t.n:4d} {t.mape:7.1%}" if t is not None and t.mape is not None else f"{'-':>12s}")
        mape = "-" if s.mape is None else f"{s.mape:.1%}"
        worst = "-" if s.max_abs_error is None else f"{s.max_abs_error:.1%}"
        lines.append(f"{kind:12s} {s.rows:5d} {s.n:4d} {mape:>7s} {worst:>9s}   {parts[0]:>14s}   {parts[1]:>15s}")
    return "\n".join(lines)


def register(sub: argparse._SubParsersAction[Any]) -> None:
    """Add ``nspsim validate``."""
    p = sub.add_parser(
        "validate",
        help="check the simulator against published GPU measurements",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
        epilog="exit status: 0 with a result; 1 when a kind's MAPE exceeds --max-mape; 2 for a usage error",
    )
    p.add_argument(
        "--dataset",
        action="append",
        default=None,
        metavar="FILE.toml",
        help="a reference file of your own measurements (repeatable; default: the built-in set)",
    )
    p.add_argument("--kind", action="append", choices=KINDS, default=None, help="only rows of this kind (repeatable)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("-o", "--output", default=None, metavar="DIR", help="write DIR/validation.html and .json")
    p.add_argument("--max-mape", type=fraction, default=None, metavar="X", help="exit 1 if a kind's MAPE exceeds X")
    p.set_defaults(func=cmd_validate)
