"""Content keys of sweep units: what a cached plan or simulation depends on, hashed.

A unit is one (point, planner spec, batch). Two keys, so that plans outlive simulator changes:

* plan key = sha256 of the point's workload identity (its config with the sha256 of every input file
  it names: a trace, profile or model file, so editing a file re-keys it), the planner and its
  options, the absolute batch index, and the *planner-side code version*: a hash of every nspsim
  source and data file except ``simulator/``, ``compare/``, ``sweep/`` and ``cli/``, plus the built-in
  trace data (``nspsim_traces/``). Given the batch's content (:func:`batch_content`: its lengths and what
  ``max_context`` dropped), the key holds that instead of ``max_context``, which only decides which
  samples a batch keeps: points that differ only in max context share every batch that came out
  identical (Figure 7's 192K and 384K wikipedia batches all do: no sample above 192K is drawn), so
  its plan and simulation run once; the row of each point still carries its own batch statistics;
* simulation key = plan key + the preparation (tree-level recompute, optimised issue order) + the
  simulator mode + the *simulator-side code version*: ``simulator/``, ``compare/`` and
  ``sweep/work.py`` (the unit function).

A window unit (W > 1: one planner spec on the W batches of one window) has one key, the *window key*:
the plan key's parts with every source batch's content, the window size W, the window planner's
candidate set (:data:`nspsim.compare.steps.WINDOW_CANDIDATES`), the preparation, the mode and *both*
code versions. It has no separate plan key because the simulator judges between the candidates, so
which plans a window keeps depends on the simulator: a simulator change re-plans windows. A point's
key gains its window only when W > 1, so every key of a spec without windows is what it was.

So an edit under ``nspsim/simulator/`` re-simulates every unit and re-plans none (FlexSP's MILP
solves are kept), while an edit to a planner, the cost model or the memory model re-keys both.
Trade-off: the versions hash whole source trees, not the functions a result really used, so an edit
to an unrelated planner also invalidates the others' plans; precise dependency tracking would need
the import graph and still miss data read at run time. Hashing ~150 files takes a few milliseconds.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nspsim.compare.specs import PlannerSpec
from nspsim.compare.steps import WINDOW_CANDIDATES
from nspsim.workload import WorkloadConfig, input_digests

PACKAGE = Path(__file__).resolve().parents[1]  # nspsim/
ROOT = PACKAGE.parent
SOURCE_SUFFIXES = (".py", ".json", ".toml")  # .toml: the cluster presets
SIMULATOR_SIDE = ("simulator", "compare", "sweep/work.py")
NOT_PLANNER_SIDE = ("simulator", "compare", "sweep", "cli")
KEY_LENGTH = 32  # hex digits of sha256 kept: 128 bits, no collision in any sweep


@dataclass(frozen=True, kw_only=True)
class CodeVersions:
    """The two code versions that cached results depend on."""

    planner: str
    simulator: str


def source_files(root: Path, include: Iterable[str] = ("",), exclude: Iterable[str] = ()) -> list[Path]:
    """Source and data files (``*.py``, ``*.json``, ``*.toml``; no ``__pycache__``) under ``root/<include>``,
    skipping ``root/<exclude>`` (folders or files, relative to ``root``), sorted."""
    excluded = [root / e for e in exclude]
    found: set[Path] = set()
    for part in include:
        base = root / part
        candidates = [base] if base.is_file() else base.rglob("*")
        for path in candidates:
            if path.suffix not in SOURCE_SUFFIXES or "__pycache__" in path.parts or not path.is_file():
                continue
            if any(path == e or e in path.parents for e in excluded):
                continue
            found.add(path)
    return sorted(found)


def code_version(root: Path, files: Iterable[Path]) -> str:
    """sha256 over each file's path (relative to ``root``) and bytes."""
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()[:KEY_LENGTH]


def code_versions(package: Path = PACKAGE) -> CodeVersions:
    """The planner-side and simulator-side versions of the nspsim tree at ``package`` (module docstring)."""
    root = package.parent
    planner = source_files(package, exclude=NOT_PLANNER_SIDE)
    traces = source_files(root / "nspsim_traces") if (root / "nspsim_traces").is_dir() else []
    return CodeVersions(
        planner=code_version(root, [*planner, *traces]),
        simulator=code_version(root, source_files(package, include=SIMULATOR_SIDE)),
    )


def workload_identity(config: WorkloadConfig) -> dict[str, Any]:
    """The config's plain values plus the digest of every file it names (trace, profile, model, cluster:
    :func:`nspsim.workload.input_digests`)."""
    data = config.to_dict()
    data["backend"] = str(config.backend)
    data["inputs"] = input_digests(config)
    return data


def digest(data: Any) -> str:
    """sha256 of canonical JSON (sorted keys; non-JSON values such as enums by ``str``)."""
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:KEY_LENGTH]


def point_key(identity: dict[str, Any], window: int = 1) -> str:
    """The key of a grid point: its workload identity, and its window when above 1."""
    return digest({"kind": "point", "workload": identity, **({"window": window} if window != 1 else {})})


def batch_content(lengths: Iterable[int], dropped_samples: int, dropped_tokens: int) -> str:
    """Digest of a batch's content: its lengths in draw order and what ``max_context`` dropped."""
    return digest({"kind": "batch", "lengths": list(lengths), "dropped": [dropped_samples, dropped_tokens]})


def plan_key(
    identity: dict[str, Any],
    spec: PlannerSpec,
    batch_index: int,
    versions: CodeVersions,
    content: str | None = None,
) -> str:
    """Key of the plan of ``spec``'s planner on batch ``batch_index`` of the workload; with the batch's
    ``content`` (:func:`batch_content`) the key holds it in place of ``max_context`` (module docstring)."""
    workload = identity if content is None else {k: v for k, v in identity.items() if k != "max_context"}
    return digest(
        {
            "kind": "plan",
            "workload": workload,
            "planner": spec.planner,
            "options": spec.options,
            "batch_index": batch_index,
            **({} if content is None else {"batch": content}),
            "code": versions.planner,
        }
    )


def sim_key(plan: str, spec: PlannerSpec, versions: CodeVersions) -> str:
    """Key of the prepared-and-simulated step of the plan keyed ``plan`` (module docstring)."""
    return digest(
        {
            "kind": "sim",
            "plan": plan,
            "tree_recompute": spec.preparation.tree_recompute,
            "optimize_order": spec.preparation.optimize_order,
            "mode": str(spec.mode),
            "code": versions.simulator,
        }
    )


def window_key(
    identity: dict[str, Any],
    spec: PlannerSpec,
    batch_index: int,
    window: int,
    versions: CodeVersions,
    contents: Sequence[str] | None = None,
) -> str:
    """Key of the window unit of ``spec`` on the ``window`` batches from ``batch_index`` (module
    docstring); with the batches' ``contents`` the key holds them in place of ``max_context``."""
    workload = identity if contents is None else {k: v for k, v in identity.items() if k != "max_context"}
    return digest(
        {
            "kind": "window",
            "workload": workload,
            "planner": spec.planner,
            "options": spec.options,
            "batch_index": batch_index,
            "window": window,
            "candidates": list(WINDOW_CANDIDATES),
            **({} if contents is None else {"batches": list(contents)}),
            "tree_recompute": spec.preparation.tree_recompute,
            "optimize_order": spec.preparation.optimize_order,
            "mode": str(spec.mode),
            "code": {"planner": versions.planner, "simulator": versions.simulator},
        }
    )
