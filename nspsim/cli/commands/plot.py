"""``nspsim plot RESULTS [-o REPORT.html]``: redraw a sweep's trade-off report from its files.

RESULTS is a sweep directory (what ``nspsim sweep SPEC.toml -o DIR`` wrote) or the ``results.parquet``
in it. The rows, the summary (``summary.parquet``, else ``summary.csv``) and the resolved config
(``sweep.config.json``) are read with pandas and pyarrow, checked (the columns the figures need, a
readable Parquet file, a JSON object), and handed in memory to the renderer, written by default as
``DIR/report.html`` beside the config that made it (elsewhere, with ``-o``, the sweep's config is
written beside the report as ``REPORT.config.json``). :func:`write_report` is the same step for
``nspsim sweep -o DIR``, which draws the report after the run.

As ``compare`` does with its report, the module named by ``PLOT_RENDERER`` (``studies``, where plotly
lives) is imported by that name, lazily, and must provide ``render(results, summary, config) -> str``;
the layering test checks the name. pandas is imported only when a report is drawn, so every other
command starts without it. Any bad input (a missing directory, a directory that is not a sweep, a
corrupt Parquet file, missing columns) is one line ``nspsim: error: ...`` and exit status 2.
"""

from __future__ import annotations

import argparse
import importlib
import io
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nspsim.cli.flags import emit
from nspsim.cli.outputs import output_file, write_output
from nspsim.cli.renderer_error import renderer_error
from nspsim.jsonfile import dumps_json, read_bytes, read_json

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

PLOT_RENDERER = "nspsim_studies.renderers.sweep_report"  # the studies module that draws a sweep (module doc)
RESULTS_FILE, SUMMARY_FILE, SUMMARY_CSV, CONFIG_FILE, REPORT_FILE = (
    "results.parquet",
    "summary.parquet",
    "summary.csv",
    "sweep.config.json",
    "report.html",
)
REQUIRED_COLUMNS = (
    "point",
    "planner",
    "baseline",
    "batch_index",
    "step_time_s",
    "normalized",
    "error",
    "bd_sp_exposed_comm",
    "bd_comm_wait",
    "planning_time_s",
    "load_over_lower_bound",
    "share_over_128k",
)
SUMMARY_COLUMNS = ("point", "planner")


@dataclass(frozen=True, kw_only=True)
class SweepFiles:
    """A sweep's tables and resolved config, read and checked (:func:`load_sweep`)."""

    directory: Path
    results_path: Path
    results: pd.DataFrame
    summary: pd.DataFrame
    config: dict[str, Any]

    def __post_init__(self) -> None:
        missing = [c for c in REQUIRED_COLUMNS if c not in self.results.columns]
        if missing:
            raise ValueError(
                f"{self.results_path} is not a sweep's results: it lacks the column(s) {', '.join(missing)}"
            )
        if self.results.empty:
            raise ValueError(f"{self.results_path} has no rows; rerun the sweep")
        if any(c not in self.summary.columns for c in SUMMARY_COLUMNS):
            raise ValueError(f"the summary in {self.directory} lacks the columns point and planner; rerun the sweep")


def sweep_directory(text: str) -> tuple[Path, Path]:
    """(directory, results file) of RESULTS: a sweep directory or the Parquet file of its rows."""
    path = Path(text)
    if not text.strip():
        raise ValueError("RESULTS is empty; give a sweep directory or its results.parquet")
    if not path.exists():
        raise ValueError(f"{text} does not exist; give a sweep directory (nspsim sweep SPEC.toml -o DIR)")
    if path.is_dir():
        results = path / RESULTS_FILE
        if not results.is_file():
            raise ValueError(
                f"{text} is not a sweep directory: it has no {RESULTS_FILE} (nspsim sweep SPEC.toml -o {text} "
                "writes one)"
            )
        return path, results
    return path.parent, path


def load_sweep(text: str) -> SweepFiles:
    """Read and check a sweep's rows, summary and config (module docstring); one-line ``ValueError``s."""
    from nspsim.sweep.results import ROW_SCHEMA, SUMMARY_SCHEMA  # pyarrow, only when a sweep is read

    directory, results_path = sweep_directory(text)
    config_path = directory / CONFIG_FILE
    if not config_path.is_file():
        raise ValueError(f"{directory} is not a sweep directory: it has no {CONFIG_FILE} beside {results_path.name}")
    config = read_json(config_path, "sweep config")
    if not isinstance(config, dict):
        raise ValueError(f"{config_path}: a sweep config is a JSON object, got {type(config).__name__}")
    results = _checked(_read_table(results_path, "sweep results"), ROW_SCHEMA, results_path)
    if (directory / SUMMARY_FILE).is_file():
        summary_path = directory / SUMMARY_FILE
    elif (directory / SUMMARY_CSV).is_file():
        summary_path = directory / SUMMARY_CSV
    else:
        raise ValueError(f"{directory} is not a sweep directory: it has neither {SUMMARY_FILE} nor {SUMMARY_CSV}")
    summary = _checked(_read_table(summary_path, "sweep summary"), SUMMARY_SCHEMA, summary_path)
    return SweepFiles(directory=directory, results_path=results_path, results=results, summary=summary, config=config)


def _checked(table: pd.DataFrame, schema: pa.Schema, path: Path) -> pd.DataFrame:
    """``table`` if its columns are the sweep schema's kinds (a column the schema has as numbers holds
    numbers; which columns must exist, :class:`SweepFiles` checks); a one-line ``ValueError`` naming
    the file and column otherwise."""
    import pandas as pd
    import pyarrow as pa

    named = ("step_time_s", "planning_time_s", "normalized")
    measures = [c for c in table.columns if c in named or str(c).startswith("bd_")]
    for column in measures:
        values = pd.to_numeric(table[column], errors="coerce")
        if bool(((values < 0) | values.isin([float("inf"), float("-inf")])).any()):
            raise ValueError(f"{path}: column {column!r} holds negative or infinite values (rerun the sweep)")
    if {"step_time_s", "oom", "error"} <= set(table.columns):  # a row with no time must say why
        silent = pd.to_numeric(table["step_time_s"], errors="coerce").isna() & ~table["oom"].astype(bool)
        silent &= table["error"].fillna("").astype(str).eq("")
        if bool(silent.any()):
            raise ValueError(f"{path}: a row has no step time, no out-of-memory and no error (rerun the sweep)")
    keys = [c for c in ("point", "planner", "batch_index") if c in table.columns]
    if len(keys) == 3 and bool(table.duplicated(subset=keys).any()):
        raise ValueError(
            f"{path}: a (point, planner, batch_index) appears twice; its rows would count twice (rerun the sweep)"
        )
    for field in schema:
        numeric = pa.types.is_integer(field.type) or pa.types.is_floating(field.type)
        if not numeric or field.name not in table.columns or pd.api.types.is_numeric_dtype(table[field.name]):
            continue
        given = table[field.name].dropna()  # an all-null column (no token budget anywhere) reads as objects
        if any(isinstance(v, bool) or not isinstance(v, (int, float)) for v in given):
            raise ValueError(
                f"{path}: column {field.name!r} holds {table[field.name].dtype} values, not numbers (rerun the sweep)"
            )
    return table


def _read_table(path: Path, what: str) -> pd.DataFrame:
    """A Parquet (or, by its suffix, CSV) file as a DataFrame; a one-line ``ValueError`` if unreadable."""
    import pandas as pd
    import pyarrow as pa

    data = read_bytes(path, what)
    try:
        if path.suffix.lower() == ".csv":
            return pd.read_csv(io.BytesIO(data))
        return pd.read_parquet(io.BytesIO(data))
    except (ValueError, OSError, pa.ArrowException, pd.errors.ParserError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        kind = "CSV" if path.suffix.lower() == ".csv" else "Parquet"
        raise ValueError(f"{path} is not a readable {kind} file ({first}); rerun the sweep") from None


def _renderer() -> Any:
    """The ``PLOT_RENDERER`` module, imported lazily (plotly lives in the studies layer)."""
    try:
        return importlib.import_module(PLOT_RENDERER)
    except ImportError as exc:
        raise renderer_error(PLOT_RENDERER, exc, "draw the sweep report") from None


def report_path(sweep: SweepFiles, output: str | None) -> Path:
    """Where the report goes: ``output`` (checked, an ``.html`` name) or ``DIR/report.html``."""
    text = str(sweep.directory / REPORT_FILE) if output is None else output
    if Path(text).suffix.lower() not in (".html", ".htm"):
        raise ValueError(f"report path {text!r} must end with .html after a file name, e.g. report.html")
    inputs = (str(sweep.results_path), str(sweep.directory / CONFIG_FILE))
    siblings = () if _beside(Path(text), sweep) else (".config.json",)
    return output_file(text, flag="-o", inputs=inputs, siblings=siblings, make_parent=True)


def _beside(path: Path, sweep: SweepFiles) -> bool:
    """Whether ``path`` lies in the sweep directory (then the sweep's own config is beside it)."""
    return path.parent.resolve() == sweep.directory.resolve()


def write_report(directory: str | Path, output: str | None = None) -> Path:
    """Draw the report of the sweep in ``directory`` and write it (``DIR/report.html`` by default);
    the path written. For ``nspsim sweep -o DIR`` after its run and for ``nspsim plot``."""
    sweep = load_sweep(str(directory))
    path = report_path(sweep, output)
    _write(sweep, path, _renderer())
    return path


def _write(sweep: SweepFiles, path: Path, renderer: Any) -> None:
    page = renderer.render(sweep.results, sweep.summary, sweep.config)
    siblings = {}
    if not _beside(path, sweep):
        config = {**sweep.config, "results_path": str(sweep.results_path)}
        sibling = path.with_suffix(".config.json")
        if sibling.is_file() and not _plot_config(sibling):
            raise ValueError(
                f"-o {path}: {sibling} exists and is not the config of an earlier plot; it would be overwritten "
                "(choose another name)"
            )
        siblings[".config.json"] = dumps_json(config, what="sweep config", indent=2)
    write_output(path, page, flag="-o", siblings=siblings)


def _plot_config(path: Path) -> bool:
    """Whether ``path`` holds what :func:`_write` writes beside a report (a sweep config naming its results)."""
    try:
        data = read_json(path, "plot config")
    except ValueError:
        return False
    return isinstance(data, dict) and "results_path" in data and "points" in data


def cmd_plot(args: argparse.Namespace) -> int:
    """Load the sweep, draw its report, and say where it went."""
    sweep = load_sweep(args.results)
    path = report_path(sweep, args.output)
    renderer = _renderer()
    _write(sweep, path, renderer)
    rows = sweep.results
    batches = int(rows[["point", "batch_index"]].drop_duplicates().shape[0])
    data: dict[str, Any] = {
        "report_path": str(path),
        "results_path": str(sweep.results_path),
        "points": int(rows["point"].nunique()),
        "planners": [str(p) for p in rows["planner"].unique()],
        "rows": len(rows),
        "batches": batches,
        "failed": int((rows["error"].fillna("") != "").sum()),
    }
    text = (
        f"report {path}: {data['points']} point(s) x {len(data['planners'])} planner(s), {batches} batches, "
        f"{data['rows']} rows ({data['failed']} failed)"
    )
    emit(args, data, text)
    return 0


def register(sub: argparse._SubParsersAction[Any]) -> None:
    """Add ``plot``."""
    p = sub.add_parser(
        "plot",
        help="draw a sweep's trade-off report (HTML) from its results",
        epilog="exit status: 0 with a report; 2 for a usage error or unreadable sweep files",
    )
    p.add_argument("results", metavar="RESULTS", help="a sweep directory (nspsim sweep -o DIR) or its results.parquet")
    p.add_argument(
        "-o",
        "--output",
        default=None,
        metavar="REPORT.html",
        help="where to write the report (default: DIR/report.html)",
    )
    p.add_argument("--json", action="store_true", help="print JSON (the report's path and what it rests on)")
    p.set_defaults(func=cmd_plot)
