"""What a sweep runs: a TOML spec (fixed workload values, axes, the run) read into frozen dataclasses.

Form (every table optional except that a sweep needs a workload to start from; absent keys take the
:class:`nspsim.workload.WorkloadConfig` and :class:`nspsim.compare.RunSpec` defaults; ``[run]`` *is* a
``RunSpec``, the one compare runs)::

    [workload]              # fixed values of any WorkloadConfig field
    model = "qwen3-30b-a3b"
    tokens_per_batch = "1M" # token counts as the CLI takes them (k = 1024, M = 1024**2) or integers
    [zip]                   # lists of one length that vary together (a zip), crossed with [axes]
    model = ["qwen3-30b-a3b", "qwen3-235b-a22b"]
    cluster = ["h100", "h200"]
    [axes]                  # lists; the grid is their product, the first axis varying slowest
    trace = ["wikipedia", "path/to/lengths.txt"]
    gpus = [16, 32]
    [run]                   # what every point runs, as compare does
    planners = ["static-best", "nsp"]
    iters = 2
    first_batch = 0
    mode = "stream"
    planner_options = { flexsp = { time_limit = 10 } }
    baseline = "static-paper" # optional: the planner to normalise to (compare's --baseline)
    prepare = "planner"     # optional: compare's --prepare (default: as each planner declares)
    window = 4              # optional: batches per optimizer step (compare's --window; default 1)

``window`` may instead be an axis (``[axes] window = [1, 2, 4, 8]``, or a ``[zip]`` list): the gradient-
accumulation window is then one more dimension of the grid, and a point is a workload *and* a window
(:meth:`SweepSpec.grid`). ``iters`` must be a multiple of every window. A spec that never sets a window
above 1 reads, keys and writes exactly as before windows existed.

Paths (a trace, profile or model file) are relative to the current directory, as the CLI's flags are.
Everything is checked when the spec is read, before anything runs: an unknown table or key, an empty
or repeated axis, a key both fixed and swept, a value of the wrong type, or a grid of more than
:data:`MAX_POINTS` points ends in one ``ValueError`` line naming the table and key (or the lists' lengths).

Zipped axes: the ``[zip]`` lists must have one length n; their i-th values form the i-th of n
combined values, which act as one more axis placed *before* the ``[axes]`` ones (so the zip varies
slowest); a zip key may be neither fixed nor in ``[axes]``, and two zip positions may not be equal.
A point's identity (its key) is still its resolved workload, so a spec without ``[zip]`` keys its
points exactly as before. Trade-off: one zip group per spec (a table, not an array of tables), enough
for "the model fixes the cluster" designs and read at a glance; two independent zips, or conditional
axes, remain several specs.
"""

from __future__ import annotations

import itertools
import math
import tomllib
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from nspsim.compare.specs import CompareConfig, RunSpec
from nspsim.execution.prepare import PREPARE_CHOICES
from nspsim.jsonfile import read_bytes
from nspsim.specs.backend import BACKENDS
from nspsim.units import parse_tokens
from nspsim.workload import WorkloadConfig

TOKEN_FIELDS = ("tokens_per_batch", "max_context", "token_budget")
INT_FIELDS = ("gpus", "seed", "spmax", "expert_parallel", "fsdp_prefetch_layers")
STR_FIELDS = ("trace", "model", "cluster", "backend", "profile", "training", "checkpointing", "attention_kernel")
BOOL_FIELDS = ("fused_elementwise", "optimizer_offload")
WORKLOAD_FIELDS = tuple(f.name for f in fields(WorkloadConfig))
RUN_KEYS = ("planners", "iters", "first_batch", "mode", "planner_options", "baseline", "prepare", "window")
WINDOW = "window"  # the one run setting that may also be an axis (module docstring)
TABLES = ("workload", "zip", "axes", "run")
MAX_POINTS = 10_000
"""Grid points a spec may have, counted from its lists before any is built. Every point is resolved and
its batches drawn before the first unit runs, 1.6-2.4 ms a point (measured on the 2-core dev machine,
40 points of tiny/cpu and Qwen3-30B/h100, one batch each): a 1M-point grid meant 30-40 minutes of
silence before the progress bar, then at least 2M units. 10,000 points is at most half a minute."""


@dataclass(frozen=True, kw_only=True)
class SweepSpec:
    """A validated sweep: fixed workload values, the zipped axes and the axes (name -> values, in spec
    order) and the run."""

    workload: dict[str, Any] = field(default_factory=dict)
    axes: dict[str, tuple[Any, ...]] = field(default_factory=dict)
    zip: dict[str, tuple[Any, ...]] = field(default_factory=dict)
    run: RunSpec = field(default_factory=RunSpec)
    name: str = "sweep"

    def compare_config(self, workload: WorkloadConfig, window: int | None = None) -> CompareConfig:
        """The :class:`CompareConfig` one point of the sweep is (no timeline); ``window`` is the point's
        window where the window is an axis."""
        return CompareConfig(workload=workload, run=self.run_at(window), timeline_iteration=None)

    def run_at(self, window: int | None) -> RunSpec:
        """The run of a point whose window is ``window`` (``None``: the ``[run]`` one)."""
        return self.run if window is None or window == self.run.window else replace(self.run, window=window)

    def __post_init__(self) -> None:
        for table, names in (("workload", list(self.workload)), ("zip", list(self.zip)), ("axes", list(self.axes))):
            unknown = [k for k in names if k not in WORKLOAD_FIELDS and (table == "workload" or k != WINDOW)]
            if unknown:
                raise ValueError(f"[{table}] {unknown[0]}: {_not_a_field(unknown[0])}")
        both = [k for k in self.axes if k in self.workload]
        if both:
            raise ValueError(f"[axes] {both[0]}: also fixed in [workload]; give it in one table only")
        self._check_zip()
        for key, axis in self.axes.items():
            if not axis:
                raise ValueError(f"[axes] {key}: an axis needs at least one value")
            if len(set(axis)) != len(axis):
                raise ValueError(f"[axes] {key}: values repeat ({', '.join(map(str, axis))}); list each once")
        self._check_size()
        self._check_windows()
        for config in self._configs():  # WorkloadConfig's own checks (the backend name)
            del config

    def _check_size(self) -> None:
        """At most :data:`MAX_POINTS` points, counted from the lists' lengths (one line naming them)."""
        lengths = {f"[axes] {k}": len(v) for k, v in self.axes.items()}
        if self.zip:
            lengths["[zip]"] = len(next(iter(self.zip.values())))
        count = math.prod(lengths.values())
        if count > MAX_POINTS:
            sizes = " x ".join(f"{n:,} ({name})" for name, n in lengths.items())
            raise ValueError(f"the grid has {count:,} points ({sizes}); a sweep takes at most {MAX_POINTS:,}")

    def _check_windows(self) -> None:
        """A swept window is not also set in ``[run]``, and each is one ``RunSpec`` takes (``iters`` a
        multiple of it): one line naming the table before anything runs."""
        for table, lists in (("zip", self.zip), ("axes", self.axes)):
            if WINDOW not in lists:
                continue
            if self.run.window != 1:
                raise ValueError(
                    f"[{table}] window: also set in [run] (window = {self.run.window}); give it in one table"
                )
            for value in lists[WINDOW]:
                try:
                    self.run_at(value)
                except ValueError as exc:
                    raise ValueError(f"[{table}] window: {exc}") from None

    def _check_zip(self) -> None:
        """The zip's own rules (module docstring): disjoint from the other tables, one length, no repeats."""
        for key in self.zip:
            if key in self.workload or key in self.axes:
                other = "[workload]" if key in self.workload else "[axes]"
                raise ValueError(f"[zip] {key}: also in {other}; give it in one table only")
        lengths = {key: len(values) for key, values in self.zip.items()}
        for key, n in lengths.items():
            if n == 0:
                raise ValueError(f"[zip] {key}: a zipped list needs at least one value")
        if len(set(lengths.values())) > 1:
            listed = ", ".join(f"{k} has {n}" for k, n in lengths.items())
            raise ValueError(f"[zip]: the zipped lists must have one length ({listed})")
        rows = list(zip(*self.zip.values()))
        if len(set(rows)) != len(rows):
            raise ValueError(f"[zip]: positions repeat ({', '.join(map(str, rows))}); list each combination once")

    @property
    def varied(self) -> tuple[str, ...]:
        """The workload fields that vary over the grid: the zipped ones, then the axes."""
        return (*self.zip, *self.axes)

    @property
    def windowed(self) -> bool:
        """Whether some point runs windows of more than one batch (its results then carry the window)."""
        return any(w > 1 for w in self.windows())

    def windows(self) -> list[int]:
        """Every grid point's window (batches per optimizer step), in grid order."""
        return [int(a.get(WINDOW, self.run.window)) for a in self.assignments()]

    def grid(self) -> list[tuple[WorkloadConfig, int]]:
        """Every grid point's resolved workload and window, in grid order."""
        return list(zip(self._configs(), self.windows()))

    def _configs(self) -> list[WorkloadConfig]:
        out = []
        for assignment in self.assignments():
            values = {k: v for k, v in assignment.items() if k != WINDOW}
            try:
                out.append(WorkloadConfig(**self.workload, **values))
            except ValueError as exc:
                raise ValueError(f"[axes] or [workload]: {exc}") from None
        return out

    def assignments(self) -> list[dict[str, Any]]:
        """Every grid point's varied values: the zip (as one axis, slowest) crossed with the product of
        the axes (first axis slowest)."""
        zipped = [dict(zip(self.zip, row)) for row in zip(*self.zip.values())] if self.zip else [{}]
        names = list(self.axes)
        product = [dict(zip(names, values)) for values in itertools.product(*(self.axes[n] for n in names))]
        return [{**z, **a} for z in zipped for a in product]

    def points(self) -> list[WorkloadConfig]:
        """The resolved workload of every grid point, in grid order (with a window axis, points that
        differ only in their window have one workload: :meth:`grid` pairs each with its window)."""
        return self._configs()

    def to_dict(self) -> dict[str, Any]:
        """Plain values for ``sweep.config.json``."""
        zipped = {"zip": {k: list(v) for k, v in self.zip.items()}} if self.zip else {}
        return {
            "name": self.name,
            "workload": dict(self.workload),
            **zipped,
            "axes": {k: list(v) for k, v in self.axes.items()},
            "run": {
                "planners": list(self.run.planners),
                "iters": self.run.iters,
                "first_batch": self.run.first_batch,
                "mode": str(self.run.mode),
                "planner_options": self.run.planner_options,
                **({"baseline": self.run.baseline} if self.run.baseline is not None else {}),
                "prepare": self.run.prepare,
                **({"window": self.run.window} if self.run.window != 1 else {}),
            },
        }


def load_spec(path: str | Path) -> SweepSpec:
    """Read and validate a TOML sweep spec; a one-line ``ValueError`` (naming the file) on any problem."""
    source = Path(path)
    raw = read_bytes(path, "sweep spec")  # regular files and pipes only: a FIFO without a writer cannot hang
    try:
        data = tomllib.loads(raw.decode("utf-8-sig"))  # a leading byte-order mark is not content
    except UnicodeDecodeError as exc:
        raise ValueError(f"sweep spec {path}: cannot read it ({exc})") from None
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"sweep spec {path}: not valid TOML ({exc})") from None
    if not data:
        raise ValueError(
            f"sweep spec {path}: empty; a spec names at least one of the tables {', '.join(TABLES)} "
            "(nspsim_studies/sweeps/ has examples)"
        )
    try:
        return parse_spec(data, name=source.stem)
    except ValueError as exc:
        raise ValueError(f"sweep spec {path}: {exc}") from None


def parse_spec(data: dict[str, Any], name: str = "sweep") -> SweepSpec:
    """A :class:`SweepSpec` from parsed TOML (tables ``workload``, ``zip``, ``axes``, ``run``)."""
    unknown = [k for k in data if k not in TABLES]
    if unknown:
        raise ValueError(f"unknown table or key {unknown[0]!r} (a spec has the tables {', '.join(TABLES)})")
    for table in TABLES:
        if not isinstance(data.get(table, {}), dict):
            raise ValueError(f"{table} must be a table ([{table}]), got {type(data[table]).__name__}")
    workload = {k: _workload_value("workload", k, v) for k, v in data.get("workload", {}).items()}
    lists: dict[str, dict[str, tuple[Any, ...]]] = {}
    for table, what in (("zip", "a zipped axis"), ("axes", "an axis")):
        lists[table] = {}
        for key, values in data.get(table, {}).items():
            if not isinstance(values, list):
                raise ValueError(f"[{table}] {key}: {what} is a list of values, e.g. {key} = [...], got {values!r}")
            lists[table][key] = tuple(_workload_value(table, key, v) for v in values)
    return SweepSpec(workload=workload, zip=lists["zip"], axes=lists["axes"], run=_run(data.get("run", {})), name=name)


def _not_a_field(key: str) -> str:
    if key == WINDOW:
        return "not a workload field: set it in [run] (window = 4) or sweep it in [axes] (window = [1, 2, 4])"
    return f"not a workload field (known: {', '.join(WORKLOAD_FIELDS)})"


def _workload_value(table: str, key: str, value: Any) -> Any:
    """A fixed or axis value of a workload field, as WorkloadConfig takes it (token counts parsed); in
    ``[zip]`` or ``[axes]``, also a window."""
    where = f"[{table}] {key}"
    if key == WINDOW and table != "workload":
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{where}: a window is a positive integer (batches per optimizer step), got {value!r}")
        return value
    if key not in WORKLOAD_FIELDS:
        raise ValueError(f"{where}: {_not_a_field(key)}")
    if key in TOKEN_FIELDS:
        if isinstance(value, bool) or not isinstance(value, int | str):
            raise ValueError(f"{where}: a token count such as 2M, 192k or 65536, got {value!r}")
        try:
            return parse_tokens(value)
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from None
    if key in INT_FIELDS:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{where}: an integer, got {value!r}")
        zero_ok = key in ("seed", "fsdp_prefetch_layers")
        if value < (0 if zero_ok else 1):
            raise ValueError(f"{where}: must be {'>= 0' if zero_ok else 'positive'}, got {value}")
        return value
    if key in BOOL_FIELDS:
        if not isinstance(value, bool):
            raise ValueError(f"{where}: true or false, got {value!r}")
        return value
    if not isinstance(value, str) or not value:
        raise ValueError(f"{where}: a non-empty string, got {value!r}")
    if key == "backend" and value not in BACKENDS:
        raise ValueError(f"{where}: unknown SP backend {value!r} (known: {', '.join(BACKENDS)})")
    return value


def _run(data: dict[str, Any]) -> RunSpec:
    replaced = [k for k in data if k in ("tree_recompute", "optimize_order")]
    if replaced:
        raise ValueError(f'[run] {replaced[0]}: replaced by prepare = "none" | "recompute" | "order" | "all"')
    if "approx_layers" in data:  # a cached exact result must never serve, nor be, an approximate one
        raise ValueError("[run] approx_layers: a sweep simulates exactly; approximate with compare --approx-layers")
    unknown = [k for k in data if k not in RUN_KEYS]
    if unknown:
        raise ValueError(f"[run] {unknown[0]}: unknown key (known: {', '.join(RUN_KEYS)})")
    kwargs: dict[str, Any] = {}
    if "planners" in data:
        planners = data["planners"]
        if not isinstance(planners, list) or not all(isinstance(p, str) for p in planners):
            raise ValueError(f'[run] planners: a list of planner labels, e.g. ["static-best", "nsp"], got {planners!r}')
        kwargs["planners"] = tuple(planners)
    for key in ("iters", "first_batch", "window"):
        if key in data:
            if isinstance(data[key], bool) or not isinstance(data[key], int):
                raise ValueError(f"[run] {key}: an integer, got {data[key]!r}")
            kwargs[key] = data[key]
    if "mode" in data:
        if not isinstance(data["mode"], str):
            raise ValueError(f"[run] mode: a simulation mode name, got {data['mode']!r}")
        kwargs["mode"] = data["mode"]
    if "prepare" in data:
        if data["prepare"] not in PREPARE_CHOICES:
            raise ValueError(f"[run] prepare: one of {', '.join(PREPARE_CHOICES)}, got {data['prepare']!r}")
        kwargs["prepare"] = data["prepare"]
    if "baseline" in data:
        if not isinstance(data["baseline"], str):
            raise ValueError(f'[run] baseline: a compared planner label, e.g. "static-paper", got {data["baseline"]!r}')
        kwargs["baseline"] = data["baseline"]
    if "planner_options" in data:
        options = data["planner_options"]
        if not isinstance(options, dict) or not all(isinstance(v, dict) for v in options.values()):
            raise ValueError(
                f"[run] planner_options: a table of tables, e.g. {{ flexsp = {{ time_limit = 10 }} }}, got {options!r}"
            )
        defaults = RunSpec().planner_options
        kwargs["planner_options"] = {
            name: {**defaults.get(name, {}), **opts} for name, opts in {**defaults, **options}.items()
        }
    try:
        return RunSpec(**kwargs)
    except ValueError as exc:
        raise ValueError(f"[run]: {exc}") from None
