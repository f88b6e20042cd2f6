"""Calibrate this machine: ``python -m nspsim_runtime.calibrate -o profile.json [--ranks N] [--model tiny]``.

Starts N local gloo ranks (one thread each, as ``torchrun`` runs the runtime on CPU), measures on all
of them at once what the simulator charges (:mod:`nspsim_runtime.calibration.measure`: attention kernels by
length and heads per rank, non-attention and head time by tokens, the optimizer, all-to-all /
ring-hop / all-gather / reduce-scatter per group size, the overlap slowdown, real executor steps
whose time beyond the isolated tables becomes ``micro_batch_s`` and a per-token layer cost), fits it
(:mod:`nspsim_runtime.calibration.fit`) and writes a version-2 nspsim cost profile with its provenance (host,
CPU, torch, threads, ranks, date, command) and how fast the machine was while measured: the speed
reference (:mod:`nspsim_runtime.calibration.reference`) taken before, between and after the phases,
and the load, steal and CPU frequency before and during (:mod:`nspsim_runtime.machine`), which
``nspsim_runtime.validate`` compares its own runs with. Compute figures are the mean over ranks of each rank's
median; collective figures the slowest rank's (a collective ends when its last member does).

Use the profile wherever a cost profile is accepted: ``nspsim_runtime.train --profile``, ``nspsim
plan/simulate/compare --profile``, ``python -m nspsim_runtime.validate --profile``. A profile measured at N
ranks describes runs of up to N ranks sharing this machine's cores the same way; calibrate at the
rank count you will run. Bad options end with one line ``nspsim_runtime.calibrate: error: ...`` and status 2
before any measurement.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import socket
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from nspsim.cli.flags import Parser
from nspsim.cli.outputs import output_file, write_output
from nspsim.cost.profile import parse_profile
from nspsim.sp_tree import is_power_of_two
from nspsim.specs.hf import resolve_model
from nspsim.specs.model import MODEL_PRESETS
from nspsim_runtime.calibration.fit import LinkMeasurement, Measurements, build_profile, lockstep_table
from nspsim_runtime.calibration.measure import CalibrationConfig, calibrate_rank
from nspsim_runtime.calibration.reference import reference_summary
from nspsim_runtime.cli import EXIT_USAGE, exit_on_interrupt, fail
from nspsim_runtime.kernels import select_kernel
from nspsim_runtime.launch import LaunchError, RankEnv, run_ranks
from nspsim_runtime.machine import snapshot
from nspsim_runtime.machine import summarise as machine_summary

PROG = "nspsim_runtime.calibrate"
MAX_RANKS = 8
CLUSTER = "cpu"  # the preset a CPU calibration describes (nspsim_runtime.train plans against it on CPU)


def build_parser() -> Parser:
    """The command line; errors raise ``ValueError`` (one line)."""
    p = Parser(
        prog=PROG,
        description="Measure this machine with the runtime's own kernels and gloo collectives on N ranks at once "
        "and write an nspsim cost profile (version 2) with its provenance.",
    )
    p.add_argument("-o", "--output", default=None, help="profile JSON to write (default: print it)")
    p.add_argument("--ranks", type=int, default=2, help=f"local ranks measured at once, a power of two <= {MAX_RANKS}")
    p.add_argument("--model", default="tiny", help="built-in model whose shapes are timed (tiny, tiny-moe)")
    p.add_argument("--kernel", default="auto", help="attention kernel (as nspsim_runtime.train --kernel)")
    p.add_argument("--name", default=None, help="profile name (default: cpu-<N>ranks-<model>)")
    p.add_argument("--quick", action="store_true", help="few points and repeats (a plumbing check, not a profile)")
    return p


def _check(args: Any) -> None:
    if not (1 <= args.ranks <= MAX_RANKS and is_power_of_two(args.ranks)):
        raise ValueError(f"--ranks must be a power of two from 1 to {MAX_RANKS}, got {args.ranks}")
    if args.model not in MODEL_PRESETS or args.model.startswith("qwen"):
        raise ValueError(
            f"--model {args.model!r}: calibration times the built-in runtime model's layers; give tiny or tiny-moe"
        )
    select_kernel(args.kernel, torch.device("cpu"))  # an unknown or unavailable kernel fails before any launch
    if args.output is not None:
        output_file(args.output, flag="--output", make_parent=True)


def provenance(args: Any, argv: list[str]) -> dict[str, Any]:
    """Where and how the numbers were measured."""
    return {
        "host": socket.gethostname(),
        "device": _cpu_name(),
        "cores": os.cpu_count(),
        "platform": platform.platform(),
        "torch": torch.__version__,
        "threads": 1,
        "ranks": args.ranks,
        "kernel": args.kernel,
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": " ".join(["python -m nspsim_runtime.calibrate", *argv]),
    }


def drift_provenance(rank0: dict[str, Any], before: dict[str, Any], ranks: int) -> dict[str, Any]:
    """The provenance of how fast the machine was: the speed reference's samples and median (what a
    validation scales its predictions by), and the machine before (idle) and during the measurements."""
    during = rank0["machine"]
    return {
        "speed_reference": reference_summary(rank0["speed_reference"]),
        "machine": {"before": before, "during": machine_summary(during, busy_ranks=ranks), "samples": during},
    }


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "cpu"


def host_cores(curve: dict[int, float], ranks: int) -> float:
    """Kernels the host runs at full speed at once, from the sharing curve: ``n / slowdown(n)`` at the
    largest ``n`` measured (``ranks`` when nothing slowed down by more than 5%)."""
    n = max(curve)
    return float(ranks) if curve[n] < 1.05 else n / curve[n]


def combine(results: list[dict[str, Any]], model: str) -> Measurements:
    """One :class:`Measurements` from every rank's (all measured with every rank busy at once, as a
    balanced step runs): compute is the mean over ranks, collectives the slowest rank's; the sharing
    curve gives the cores, with which the simulator speeds up kernels when fewer ranks compute at
    once (:mod:`nspsim.simulator.sharing`)."""
    spec = resolve_model(model)
    att = results[0]["attention"]
    curve = results[0]["sharing"]
    cores = host_cores(curve, len(results))

    def mean(path: tuple[str, ...]) -> list[float]:
        values = []
        for r in results:
            v: Any = r
            for key in path:
                v = v[key]
            values.append(np.asarray(v, dtype=np.float64))
        return [float(x) for x in np.mean(values, axis=0)]

    heads = sorted(att["fwd"])
    n_exec = len(results[0]["executor"]["tokens"])
    links = []
    for i, link in enumerate(results[0]["links"]):
        worst = np.max([np.asarray(r["links"][i].seconds) for r in results], axis=0)
        links.append(
            LinkMeasurement(
                collective=link.collective,
                group_size=link.group_size,
                nbytes=link.nbytes,
                seconds=tuple(float(x) for x in worst),
            )
        )
    return Measurements(  # executor steps: the mean over ranks, like the other compute figures
        model=model,
        head_dim=spec.head_dim,
        attn_lengths=tuple(att["lengths"]),
        attn_fwd_s={h: tuple(mean(("attention", "fwd", h))) for h in heads},
        attn_bwd_s={h: tuple(mean(("attention", "bwd", h))) for h in heads},
        layer_tokens=tuple(results[0]["layers"]["tokens"]),
        nonattn_fwd_s=tuple(mean(("layers", "nf"))),
        nonattn_bwd_s=tuple(mean(("layers", "nb"))),
        head_fwd_s=tuple(mean(("layers", "hf"))),
        head_bwd_s=tuple(mean(("layers", "hb"))),
        optimizer_s=float(np.mean([r["optimizer_s"] for r in results])),
        step_s=float(np.max([r["step_s"] for r in results])),
        micro_batch_s=0.0,  # fitted from the executor timings by build_profile
        num_layers=spec.num_layers,
        exec_tokens=tuple(results[0]["executor"]["tokens"]),
        exec_local_s=tuple(float(np.mean([r["executor"]["local"][i] for r in results])) for i in range(n_exec)),
        exec_sp_s=tuple(float(np.mean([r["executor"]["sp"][i] for r in results])) for i in range(n_exec))
        if "sp" in results[0]["executor"]
        else (),
        links=tuple(links),
        overlap_slowdown=float(np.mean([r["overlap_slowdown"] for r in results])),
        element_bytes=4,  # the runtime computes and communicates in fp32 on CPU
        host_cores=cores,
        sharing_curve={int(n): float(s) for n, s in curve.items()},
        lockstep=_lockstep(results),
        attn_full_lengths=tuple(att.get("full_lengths", ())),
        attn_full_fwd_s={h: tuple(mean(("attention", "full_fwd", h))) for h in att.get("full_fwd", {})},
        attn_full_bwd_s={h: tuple(mean(("attention", "full_bwd", h))) for h in att.get("full_bwd", {})},
    )


def _lockstep(results: list[dict[str, Any]]) -> dict[int, tuple[tuple[float, ...], tuple[float, ...]]]:
    """Per group size, the lockstep table of the ranks' mean work and mean time in the collective
    (:func:`nspsim_runtime.calibration.fit.lockstep_table`)."""
    out = {}
    for size in results[0].get("lockstep", {}).get("sizes", []):
        work = np.mean([r["lockstep"]["work_s"][size] for r in results], axis=0)
        inside = np.mean([r["lockstep"]["in_collective_s"][size] for r in results], axis=0)
        out[int(size)] = lockstep_table(work.tolist(), inside.tolist())
    return out


def summary(profile: dict[str, Any]) -> str:
    """A few lines a person reads: throughputs at the longest length, layer times, link fits."""
    lines = [f"profile {profile['name']} ({profile['provenance']['device']}, {profile['provenance']['ranks']} ranks)"]
    for key in ("attn_fwd_flops_by_heads", "attn_bwd_flops_by_heads"):
        cells = ", ".join(
            f"{h} heads {table[-1][1] / 1e9:.2f}" for h, table in sorted(profile[key].items(), key=lambda x: -int(x[0]))
        )
        longest = int(next(iter(profile[key].values()))[-1][0])
        lines.append(f"  {key.split('_')[1]} attention GFLOP/s at {longest} tokens: {cells}")
    full_fwd, full_bwd = (profile.get(f"attn_full_{p}_flops_by_length") for p in ("fwd", "bwd"))
    if full_fwd and full_bwd:
        n, fwd, bwd = int(full_fwd[-1][0]), full_fwd[-1][1] / 1e9, full_bwd[-1][1] / 1e9
        lines.append(f"  full-block attention GFLOP/s at {n} x {n}: {fwd:.2f} fwd, {bwd:.2f} bwd")
    for key in ("nonattn_fwd_s_by_tokens", "nonattn_bwd_s_by_tokens", "head_fwd_s_by_tokens", "head_bwd_s_by_tokens"):
        table = profile[key]
        err = profile["fit"][key]["affine_max_rel_error"]
        lines.append(
            f"  {key.removesuffix('_s_by_tokens'):<12} {table[0][1] * 1e3:.3f} ms @ {int(table[0][0])} .. "
            f"{table[-1][1] * 1e3:.2f} ms @ {int(table[-1][0])} tokens (affine fit within {err:.0%})"
        )
    lines.append(
        f"  optimizer    {profile['optimizer_s'] * 1e3:.2f} ms per step; step control traffic "
        f"{profile['step_s'] * 1e3:.2f} ms"
    )
    for name, fits in profile["collectives"].items():
        cells = ", ".join(f"{g}: {lat * 1e6:.0f} us + {bw / 1e9:.2f} GB/s" for g, (lat, bw) in fits.items())
        lines.append(f"  {name:<14} {cells}")
    ex = profile["fit"].get("executor")
    if ex:
        lines.append(
            f"  executor     {ex['micro_batch_s'] * 1e3:.2f} ms per micro-batch + "
            f"{ex['per_token_layer_s'] * 1e6:.2f} us per token and layer beyond the isolated tables"
        )
    for size, table in profile.get("lockstep_wait_by_size", {}).items():
        cells = ", ".join(f"{w * 1e3:.1f} ms after {d * 1e3:.0f} ms" for d, w in table)
        lines.append(f"  lockstep wait, groups of {size}: {cells}")
    lines.append(f"  overlap slowdown {profile['overlap_slowdown']:.2f}x (recorded, not applied)")
    curve = ", ".join(f"{n} at once {s:.2f}x" for n, s in profile["fit"]["sharing_curve"].items())
    lines.append(f"  core sharing: {curve} -> {profile['host_cores']:.2f} cores")
    ref, machine = profile["provenance"].get("speed_reference"), profile["provenance"].get("machine")
    if ref and machine:
        during = machine["during"]
        lines.append(
            f"  speed reference {ref['median_s'] * 1e3:.1f} ms, moved {ref['drift']:.0%} during calibration; "
            f"steal {_share(during['steal'])}, foreign load {_share(during['foreign_load'])} per core"
        )
    return "\n".join(lines)


def _share(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0%}"


def main(argv: list[str] | None = None) -> None:
    """Measure, fit, write (or print) the profile and print a summary on stderr."""
    argv = sys.argv[1:] if argv is None else argv
    try:
        args = build_parser().parse_args(argv)
        _check(args)
    except ValueError as exc:
        fail(PROG, exc, EXIT_USAGE)
    exit_on_interrupt(PROG)  # Ctrl-C during the measurements: one line, status 130
    cfg = CalibrationConfig(model=args.model, kernel=args.kernel, quick=args.quick)
    started = time.perf_counter()
    before = snapshot()
    print(f"{PROG}: measuring on {args.ranks} rank(s) at once ...", file=sys.stderr, flush=True)
    # ranks wait at a barrier while rank 0 measures kernels alone (a minute or more): a long group timeout
    try:
        results = run_ranks(_rank, args.ranks, cfg, timeout_s=1800, comm_timeout_s=900)
    except LaunchError as exc:  # a rank failed: its first line says why
        fail(PROG, RuntimeError(str(exc).splitlines()[1] if len(str(exc).splitlines()) > 1 else str(exc)), 1)
    name = args.name or f"{CLUSTER}-{args.ranks}ranks-{args.model}"
    profile = build_profile(combine(results, args.model), name=name, provenance=provenance(args, argv), cluster=CLUSTER)
    profile["provenance"]["wall_s"] = round(time.perf_counter() - started, 1)
    profile["provenance"].update(drift_provenance(results[0], before, args.ranks))
    parse_profile(profile, name)  # what we write must load
    text = json.dumps(profile, indent=1)
    if args.output is None:
        print(text)
    else:
        write_output(Path(args.output), text + "\n", flag="--output")
    print(summary(profile), file=sys.stderr)
    print(
        f"{PROG}: done in {time.perf_counter() - started:.0f} s" + (f", wrote {args.output}" if args.output else ""),
        file=sys.stderr,
    )


def _rank(env: RankEnv, cfg: CalibrationConfig) -> dict[str, Any]:
    return calibrate_rank(env, cfg)


if __name__ == "__main__":
    main()
