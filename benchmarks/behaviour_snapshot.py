"""Behaviour snapshot: plan hashes, simulated step times, timeline digests, compare results and
runtime loss curves on fixed reference cases, written as one JSON document.

A restructure that claims "no behaviour change" runs this before and after and diffs the two files:

    python benchmarks/behaviour_snapshot.py -o before.json
    ... change ...
    python benchmarks/behaviour_snapshot.py -o after.json --diff before.json

Every case goes through the public command lines (``nspsim plan/simulate/compare`` and
``torchrun -m nspsim_runtime.train``), so the snapshot does not depend on module paths. Planning-time and
wall-clock fields are dropped; everything else is compared exactly (FlexSP's MILP runs under its
deterministic work limit, so its plans are reproducible).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

BIN = Path(sys.executable).parent
# (label, workload flags): the default, a memory-bound 235B case, a Ring case and a small tiny-model case.
WORKLOADS: list[tuple[str, list[str]]] = [
    ("30b-h100-wiki", []),
    (
        "235b-h200-code-384k",
        ["--model", "qwen3-235b-a22b", "--cluster", "h200", "--training", "paper-235b"]
        + ["--max-context", "384k", "--trace", "code"],
    ),
    ("30b-ring-code", ["--backend", "ring", "--trace", "code", "--gpus", "32", "--tokens-per-batch", "1M"]),
    (
        "tiny-cpu",
        [
            "--model",
            "tiny",
            "--cluster",
            "cpu",
            "--gpus",
            "4",
            "--tokens-per-batch",
            "16k",
            "--max-context",
            "4k",
            "--token-budget",
            "5k",
        ],
    ),
]
PLANNERS: list[list[str]] = [
    ["--planner", "static", "-O", "degree=8"],
    ["--planner", "flexsp"],
    ["--planner", "basp"],
    ["--planner", "nsp2l"],
    ["--planner", "nsp"],
    ["--planner", "greedy"],
]
BATCHES = [0, 3]
# Plans are written as routed (--prepare none) and simulated as routed, fully prepared, serially, and
# with the default preparation (the planner's; sim3, added when --prepare became one flag).
PLAN_FLAGS = ["--prepare", "none"]
SIM_FLAGS: list[list[str]] = [
    ["--prepare", "none"],
    ["--prepare", "all"],
    ["--mode", "serial", "--prepare", "none"],
    [],
]
VOLATILE = {
    "planning_time_s",
    "planning_cpu_s",
    "wall_s",
    "elapsed_s",
    "simulation_time_s",
    "sim_wall_s",
    "timestamp",
    "date",
    "planning_s",
    "time_s",
}


def _volatile(key: str) -> bool:
    """Wall-clock figures and simulator speed rates: they differ from run to run."""
    return (
        key in VOLATILE
        or key.endswith("_per_s")
        or any(w in key for w in ("wall", "planning_time", "elapsed", "solve_time"))
    )


def _scrub(value: Any) -> Any:
    """Drop wall-clock fields (they differ run to run) and absolute temp paths."""
    if isinstance(value, dict):
        return {k: _scrub(v) for k, v in value.items() if not _volatile(k)}
    if isinstance(value, list):
        return [_scrub(v) for v in value]
    if isinstance(value, str) and value.startswith(tempfile.gettempdir()):
        return Path(value).name
    return value


def _run(cmd: list[str], cwd: Path) -> dict[str, Any]:
    out = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        return {"rc": out.returncode, "stderr_tail": out.stderr.strip().splitlines()[-1:]}
    return {"rc": 0, "json": json.loads(out.stdout)}


def plan_case(label: str, flags: list[str], planner: list[str], batch: int, work: Path) -> dict[str, Any]:
    """Plan one batch, then simulate the plan under each simulator flag set (with a timeline)."""
    name = f"{label}-{'-'.join(planner[1:]).replace('=', '')}-{batch}"
    plan_path = work / f"{name}.json"
    res: dict[str, Any] = {
        "plan": _run(
            [
                str(BIN / "nspsim"),
                "plan",
                *planner,
                *flags,
                *PLAN_FLAGS,
                "--batch-index",
                str(batch),
                "--json",
                "-o",
                str(plan_path),
            ],
            work,
        )
    }
    if res["plan"]["rc"] != 0:
        return {name: res}
    res["plan"]["file_sha"] = hashlib.sha256(_canonical_plan(plan_path)).hexdigest()[:16]
    doc = json.loads(plan_path.read_text())
    doc["metadata"].pop("prepared", None)  # as routed and unrecorded, so sim3 prepares as the planner declares
    plan_path.write_text(json.dumps(doc))
    for i, sim in enumerate(SIM_FLAGS):
        tl = work / f"{name}-tl{i}.json"
        r = _run([str(BIN / "nspsim"), "simulate", str(plan_path), *sim, "--json", "--timeline", str(tl)], work)
        if tl.exists():
            r["timeline_sha"] = hashlib.sha256(_canonical_timeline(tl)).hexdigest()[:16]
        res[f"sim{i}"] = r
    return {name: res}


def _canonical_plan(path: Path) -> bytes:
    doc = json.loads(path.read_text())
    doc.pop("metadata", None)
    return json.dumps(doc, sort_keys=True).encode()


def _canonical_timeline(path: Path) -> bytes:
    doc = json.loads(path.read_text())
    doc.pop("otherData", None)
    return json.dumps(doc, sort_keys=True).encode()


def compare_case(label: str, flags: list[str], work: Path) -> dict[str, Any]:
    """Every default planner (prepared as compare prepares them) on two batches."""
    return {
        f"compare-{label}": _run([str(BIN / "nspsim"), "compare", *flags, "--iters", "2", "--json", "--quiet"], work)
    }


def runtime_case(planner: str, ranks: int, work: Path) -> dict[str, Any]:
    """A short gloo run; the loss curve and plan hashes must not change."""
    rec = work / f"rt-{planner.replace(':', '-').replace('=', '')}-{ranks}.jsonl"
    cmd = [
        str(BIN / "torchrun"),
        "--standalone",
        "--nproc-per-node",
        str(ranks),
        "-m",
        "nspsim_runtime.train",
        "--planner",
        planner,
        "--trace",
        "wikipedia",
        "--model",
        "tiny",
        "--steps",
        "3",
        "--tokens-per-batch",
        "16k",
        "--max-context",
        "4k",
        "--token-budget",
        "5k",
        "--seed",
        "0",
        "--prepare",
        "recompute",
        "--records",
        str(rec),
    ]
    out = subprocess.run(
        cmd,
        cwd=Path(__file__).resolve().parents[1],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    key = f"runtime-{planner}-{ranks}"
    if out.returncode != 0:
        return {key: {"rc": out.returncode, "stderr_tail": out.stderr.strip().splitlines()[-3:]}}
    rows = [json.loads(line) for line in rec.read_text().splitlines() if line.strip()]
    return {
        key: {
            "rc": 0,
            "loss": [r.get("loss") for r in rows],
            "plan_hash": [r.get("plan_hash") for r in rows],
            "simulated": [r.get("simulated_step_time_s") for r in rows],
            "samples_per_degree": [r.get("samples_per_degree") for r in rows],
        }
    }


def snapshot(jobs: int, runtime: bool) -> dict[str, Any]:
    """Run every reference case; keys are case names, values their scrubbed outputs."""
    work = Path(tempfile.mkdtemp(prefix="nspsim-snap-"))
    try:
        result: dict[str, Any] = {}
        with ThreadPoolExecutor(jobs) as pool:
            futs = [
                pool.submit(plan_case, lab, fl, pl, b, work)
                for lab, fl in WORKLOADS
                for pl in PLANNERS
                for b in BATCHES
            ]
            futs += [pool.submit(compare_case, lab, fl, work) for lab, fl in WORKLOADS]
            for f in futs:
                result.update(f.result())
        if runtime:
            for planner, ranks in [("nsp", 2), ("static:degree=2", 2), ("flexsp", 4), ("nsp", 4)]:
                result.update(runtime_case(planner, ranks, work))
        return _scrub(result)  # type: ignore[no-any-return]
    finally:
        shutil.rmtree(work, ignore_errors=True)


def diff(a: Any, b: Any, path: str = "") -> list[str]:
    """Paths where two snapshots differ."""
    if isinstance(a, dict) and isinstance(b, dict):
        out: list[str] = []
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                out.append(f"{path}/{k}: only in {'after' if k not in a else 'before'}")
            else:
                out += diff(a[k], b[k], f"{path}/{k}")
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True)) for d in diff(x, y, f"{path}[{i}]")]
    return [] if a == b else [f"{path}: {str(a)[:80]} != {str(b)[:80]}"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-o", "--output", required=True, type=Path)
    ap.add_argument("--diff", type=Path, help="an earlier snapshot to compare against")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--no-runtime", action="store_true", help="skip the torchrun loss-curve cases")
    ap.add_argument("--reuse", action="store_true", help="diff the existing --output file instead of rerunning")
    args = ap.parse_args()
    snap = _scrub(json.loads(args.output.read_text())) if args.reuse else snapshot(args.jobs, not args.no_runtime)
    args.output.write_text(json.dumps(snap, indent=1, sort_keys=True))
    print(f"{len(snap)} cases -> {args.output}")
    if args.diff:
        diffs = diff(_scrub(json.loads(args.diff.read_text())), snap)
        print("\n".join(diffs[:50]) or "identical")
        print(f"{len(diffs)} differences")
        return 1 if diffs else 0
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
