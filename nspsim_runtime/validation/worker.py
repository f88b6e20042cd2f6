"""One long-lived process group that runs every validation case of a rank count, interleaved:
``python -m nspsim_runtime.run --standalone --nproc-per-node N -m nspsim_runtime.validation.worker PLAN.json``.

``PLAN.json`` (written by :func:`nspsim_runtime.validation.run.run_group`) holds each case's
``nspsim_runtime.train`` options and records path, the schedule (:mod:`nspsim_runtime.validation.rounds`:
rounds of ``[case, first step, count, warm-up]`` blocks), the model and kernel of the speed reference
and where to write the blocks. Every rank builds one :class:`~nspsim_runtime.training.trainer.Trainer`
per case (rank 0 plans every case's batches then, before any step: no planner beside a measured
step), then walks the schedule: the speed reference (:mod:`nspsim_runtime.calibration.reference`),
then the block's steps through the trainer exactly as ``nspsim_runtime.train`` runs them (same
records, same predictions from the same profile), then the reference again, which also opens the
next block. Rank 0 takes a machine snapshot (:mod:`nspsim_runtime.machine`, with every rank's process
id, so that the ranks' own CPU time is told from other jobs') at every reference and writes
``{"blocks": [...], "references": [...], "machine": [...]}``.

Why one group rather than a launch per block: a launch of ``nspsim_runtime.run`` with 2 ranks cost
8.1 s on the 2-core development VM from the plan file to the first reference (imports, rendezvous,
model builds, plans of two tiny cases; measured with the machine busy), and a relaunched case needs
its warm-up step again (1-3 s for the suites' cases), against 1-3 s of measured step: an 11-case
suite in 3 measured rounds would spend ~5 minutes launching instead of ~10 s. Trade-off: the cases
share a process, so one allocator, thread pool and cache see every strategy in turn (each case
still drops its own first step as warm-up), and a case that fails mid-run ends the whole group
(cases the train options would refuse are refused before the launch, ``precheck_case``).
Bad input or a failure ends every rank with one line ``nspsim_runtime.validation.worker: ...``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

PROG = "nspsim_runtime.validation.worker"


def _execute(plan: dict[str, Any]) -> None:
    import torch.distributed

    from nspsim.specs.hf import resolve_model
    from nspsim.workload import build_workload
    from nspsim_runtime.affinity import pin_to_core
    from nspsim_runtime.calibration.reference import SpeedReference
    from nspsim_runtime.machine import snapshot
    from nspsim_runtime.training.args import parse_args
    from nspsim_runtime.training.distributed import init_distributed
    from nspsim_runtime.training.outputs import Outputs
    from nspsim_runtime.training.trainer import Trainer, check_planner

    d = init_distributed(device="cpu", comm_timeout_s=float(plan["comm_timeout_s"]))
    pin_to_core(d.local_rank, int(os.environ.get("LOCAL_WORLD_SIZE", d.world)))
    trainers: list[Trainer] = []
    outputs: list[Outputs] = []
    complete = False
    try:
        for case in plan["cases"]:
            args = parse_args(case["train_args"])
            workload = build_workload(args.workload_on(world=d.world, device_type="cpu"))
            check_planner(args, workload, "cpu")
            trainers.append(Trainer(args, d, workload))
            outputs.append(Outputs.open(args, d, workload))
        reference = SpeedReference(resolve_model(plan["reference_model"]), plan["reference_kernel"])
        machine: list[dict[str, Any]] = []
        blocks: list[dict[str, Any]] = []
        pids: list[Any] = [os.getpid()]
        if d.world > 1:
            pids = [None] * d.world
            torch.distributed.all_gather_object(pids, os.getpid())
        current = reference.measure()
        if d.rank == 0:
            machine.append(snapshot(pids))
        for number, members in enumerate(plan["schedule"]):
            for case_index, first, count, warmup in members:
                before, started = current, time.time()
                for step in range(first, first + count):
                    out = trainers[case_index].step(step)
                    if out is not None:
                        outputs[case_index].emit(*out)
                current = reference.measure()
                if d.rank == 0:
                    machine.append(snapshot(pids))
                    blocks.append({
                        "round": number, "case": case_index, "first": first, "count": count, "warmup": bool(warmup),
                        "before_s": before, "after_s": current, "start": started, "end": time.time(),
                    })  # fmt: skip
        complete = True
    finally:
        for trainer in trainers:
            trainer.close()
        for output in outputs:
            output.close(complete=complete)
    if d.rank == 0:
        payload = {"blocks": blocks, "references": reference.samples, "machine": machine}
        Path(plan["blocks"]).write_text(json.dumps(payload, indent=1))


def main(argv: list[str] | None = None) -> None:
    """Entry point (module docstring)."""
    from nspsim_runtime.cli import exit_on_interrupt, fail

    argv = sys.argv[1:] if argv is None else argv
    rank = int(os.environ["RANK"]) if "RANK" in os.environ else None
    exit_on_interrupt(PROG, rank)
    try:
        if len(argv) != 1:
            raise ValueError("give one argument, the plan JSON written by nspsim_runtime.validate")
        plan = json.loads(Path(argv[0]).read_text())
    except (OSError, ValueError) as exc:
        fail(PROG, ValueError(str(exc)), 2, rank, hard=True)
    try:
        _execute(plan)
    except ValueError as exc:
        fail(PROG, exc, 2, rank, hard=True)
    except Exception as exc:  # noqa: BLE001 (distributed failures: one clear line, then exit)
        fail(PROG, exc, 1, rank, hard=True)
    os._exit(0)


if __name__ == "__main__":
    main()
