"""What a run leaves behind: one record per step, assembled on rank 0 from every rank's times.

Each rank measures its own step (:class:`RankTimes`); rank 0 gathers them and writes one
:class:`nspsim_runtime.records.MeasuredStep` per step whose breakdown is the *critical* rank's, the one the
others waited for (every rank's is kept too). Rank 0 prints one line per step and, with
``--records``, writes the JSONL records, the resolved configuration beside them
(``<records>.config.json``: the workload as planned, every other runtime option, world, device,
torch version) and the executed plans (``<records>.plans.jsonl``, replayable with ``nspsim
simulate``). With ``--accumulate W`` (W > 1) a record is a pass and carries its window's fields
(:data:`nspsim_runtime.records.WINDOW_FIELDS`), and the plan log holds one line per window, written
with its first pass: the executed :class:`nspsim.plan.window.WindowPlan` (sources, assignment, every
pass's plan as executed), whose content hash the records name.

A run never touches an earlier run's files until it has finished: it writes the three files as
``<file>.partial`` beside their targets and renames each over its target (``os.replace``, atomic)
only when every step has run. A run that fails or is interrupted leaves the earlier files as they
were and its finished steps in the ``.partial`` files (removed when it failed before its first step;
a later run overwrites them). Trade-off: the partial files are flushed after every step, so a run
that dies keeps its finished steps at the cost of one flush per step.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TextIO

import torch

from nspsim.cli.config_file import COMMAND_KEY
from nspsim.output_files import OutputLock
from nspsim.plan import Plan
from nspsim.plan.window import WindowPlan
from nspsim.records import BREAKDOWN_CATEGORIES
from nspsim.specs.memory import MemoryModel
from nspsim.workload import Workload, input_digests
from nspsim_runtime.prediction import recompute_policy
from nspsim_runtime.records import MeasuredStep
from nspsim_runtime.training.args import PROG, TrainArgs
from nspsim_runtime.training.distributed import Dist
from nspsim_runtime.training.plan_ahead import Planned, PlannedWindow


@dataclass(frozen=True, kw_only=True)
class RankTimes:
    """One rank's measured step: wall time, breakdown (summing to it) and SP communication span."""

    step_s: float
    breakdown_s: dict[str, float]
    sp_comm_s: float


BUSY = ("attn_fwd", "attn_bwd", "attn_remat", "sp_exposed_comm")
"""The categories a rank's own attention work fills (measured inside the executor)."""


def critical_rank(ranks: list[RankTimes]) -> int:
    """The rank the others waited for: the one with the most attention work (:data:`BUSY`), then the
    least ``comm_wait``, then the lowest rank.

    Not simply the least barrier wait: FSDP2 gathers and reduce-scatters every layer, so a rank with
    little attention work waits inside those collectives, where no timer of the executor sees it (it
    lands in ``non_attn``), and reaches the final barrier as late as the busy rank. Measured on a
    2-rank ``static:degree=1`` run of ``code`` batches: the idle rank showed 0.4 s of attention and
    3.8 s of "non-attention" against the busy rank's 4.7 s and 0.6 s, with equal barrier waits."""
    return min(
        range(len(ranks)),
        key=lambda r: (-round(sum(ranks[r].breakdown_s[k] for k in BUSY), 6), ranks[r].breakdown_s["comm_wait"], r),
    )


def measured_record(
    *,
    step: int,
    index: int,
    planned: Planned,
    plan_wait_s: float,
    loss: float,
    ranks: list[RankTimes],
    spec: str,
    memory: MemoryModel,
    model_impl: str = "",
    window: dict[str, Any] | None = None,
) -> MeasuredStep:
    """The :class:`nspsim_runtime.records.MeasuredStep` of one step from every rank's times (a pass of an
    accumulation window: with its :func:`window_fields`)."""
    plan, pred = planned.plan, planned.prediction
    crit = critical_rank(ranks)
    policy, share = recompute_policy(plan, memory)
    return MeasuredStep(
        step=step,
        batch_index=index,
        planner_spec=spec,
        planner=plan.planner,
        plan_hash=plan.content_hash,
        backend=plan.backend,
        num_gpus=len(ranks),
        cluster=plan.cluster.label,
        model=plan.model.name,
        model_impl=model_impl,
        profile="" if plan.profile is None else plan.profile.label,
        profile_fingerprint="" if plan.profile is None else plan.profile.fingerprint,
        num_samples=plan.num_samples,
        num_tokens=int(sum(plan.lengths)),
        dropped_samples=planned.dropped_samples,
        dropped_tokens=planned.dropped_tokens,
        num_micro_batches=plan.num_micro_batches,
        samples_per_degree=plan.samples_per_degree(),
        recompute_policy=policy,
        remat_share=share,
        loss=loss,
        step_time_s=ranks[crit].step_s,
        breakdown_s=ranks[crit].breakdown_s,
        critical_gpu=crit,
        per_gpu_step_time_s=[r.step_s for r in ranks],
        per_gpu_breakdown_s={k: [r.breakdown_s[k] for r in ranks] for k in BREAKDOWN_CATEGORIES},
        sp_comm_s=ranks[crit].sp_comm_s,
        per_gpu_sp_comm_s=[r.sp_comm_s for r in ranks],
        planning_time_s=planned.planning_time_s,
        plan_wait_s=plan_wait_s,
        simulated_mode=pred.mode,
        simulated_step_time_s=pred.step_time_s,
        simulated_breakdown_s=pred.breakdown_s,
        simulated_note=pred.note,
        **(window or {}),
    )


def window_fields(planned: PlannedWindow, window: int, k: int, window_loss: float | None) -> dict[str, Any]:
    """The window fields of pass ``k`` of the run's window ``window`` (``window_loss`` on the last pass)."""
    plan = planned.window
    return {
        "window": window,
        "window_pass": k,
        "window_passes": plan.size,
        "optimizer_step": k == plan.size - 1,
        "window_hash": plan.content_hash,
        "window_candidate": str(plan.metadata.get("window_candidate", "per-step")),
        "window_tokens": plan.total_tokens,
        "window_loss": window_loss,
    }


def output_paths(records: str) -> tuple[Path, Path, Path]:
    """(records, resolved config, executed plans) paths."""
    path = Path(records)
    stem = path.with_suffix("") if path.suffix else path
    return path, stem.with_name(stem.name + ".config.json"), stem.with_name(stem.name + ".plans.jsonl")


PARTIAL_SUFFIX = ".partial"
"""Appended to each output's name while the run that writes it has not finished."""


def partial_path(target: Path) -> Path:
    """Where a run writes ``target`` until it has finished (then renamed over ``target``)."""
    return target.with_name(target.name + PARTIAL_SUFFIX)


def resolved_config(args: TrainArgs, d: Dist, workload: Workload) -> dict[str, Any]:
    """The ``<records>.config.json`` content: ``workload`` is the configuration planned against
    (``args.workload`` with this machine's cluster and GPUs), ``runtime`` every other option."""
    runtime = {k: v for k, v in asdict(args).items() if k != "workload"}
    return {
        COMMAND_KEY: PROG,
        "workload": workload.config.to_dict(),
        "inputs": input_digests(workload.config),
        "runtime": runtime,
        "world": d.world,
        "device": str(d.device),
        "torch": torch.__version__,
        "token_budget": workload.token_budget,
    }


class Outputs:
    """Rank 0's step lines on stdout and, with ``--records``, its three files (nothing elsewhere),
    written as ``.partial`` files until :meth:`close` with ``complete=True`` renames them over their
    targets. A ``--records`` character device (``/dev/null``) gets the records in place and nothing
    beside it (no ``.partial`` file could be renamed over a device, nor should one be)."""

    def __init__(
        self,
        records: TextIO | None = None,
        plans: TextIO | None = None,
        targets: tuple[Path, ...] = (),
        lock: OutputLock | None = None,
    ) -> None:
        self._records, self._plans = records, plans
        self._targets = targets
        self._lock = lock
        self._steps = 0

    @classmethod
    def open(cls, args: TrainArgs, d: Dist, workload: Workload) -> Outputs:
        """Write the resolved config and open the records and plans files, all as ``.partial`` files
        beside their targets (rank 0 with ``--records``)."""
        if d.rank != 0 or args.records is None:
            return cls()
        # a symlinked output is replaced where it points (the link stays), as writing through it would
        targets = tuple(t.resolve() if t.is_symlink() else t for t in output_paths(args.records))
        if targets[0].exists() and not targets[0].is_file():
            return cls(targets[0].open("w"))
        records, config, plans = (partial_path(t) for t in targets)
        records.parent.mkdir(parents=True, exist_ok=True)
        # one run per records file: a second one would share these .partial names (nspsim.output_files)
        stem = targets[1].name.removesuffix(".config.json")  # R and R.jsonl write the same R.config.json
        what, output = "nspsim_runtime.train run with these --records", f"--records {args.records}"
        lock = OutputLock(records.parent, stem, what=what, output=output)  # names the records, not their folder
        config.write_text(json.dumps(resolved_config(args, d, workload), indent=1, sort_keys=True))
        return cls(records.open("w"), plans.open("w"), targets, lock)

    def emit(self, line: str, plan: Plan | WindowPlan | None) -> None:
        """Append the step's record and executed plan (a window's plan with its first pass, nothing with
        the others), then print its summary line (in that order, so whoever sees the line - a user about
        to press Ctrl-C - finds the step in the partial files)."""
        rec = json.loads(line)
        sim = rec["simulated_step_time_s"]
        for f, text in ((self._records, line), (self._plans, None if plan is None else plan.to_json())):
            if f is not None and text is not None:
                f.write(text + "\n")
                f.flush()
        self._steps += 1
        window = "" if "window" not in rec else f" window {rec['window']} pass {rec['window_pass']}"
        print(
            f"step {rec['step']}{window} batch {rec['batch_index']} planner {rec['planner_spec']} "
            f"loss {rec['loss']:.5f} "
            f"time {rec['step_time_s']:.3f}s"
            + (f" (simulated {sim:.3f}s)" if sim is not None else "")
            + f" plan {rec['plan_hash']}",
            flush=True,
        )

    def close(self, *, complete: bool) -> None:
        """Close the files (if any). ``complete``: every step ran, so each ``.partial`` file replaces
        its target (the records last); otherwise the targets stay untouched and the partial files
        keep the finished steps (or are removed if there are none)."""
        for f in (self._records, self._plans):
            if f is not None:
                f.close()
        for target in reversed(self._targets):  # plans, config, records
            if complete:
                os.replace(partial_path(target), target)
            elif self._steps == 0:
                partial_path(target).unlink(missing_ok=True)
        if self._lock is not None:
            self._lock.release()
