"""Training entry point: plan each batch one step ahead, execute it with NSP, record every step.

    torchrun --nproc-per-node 4 -m nspsim_runtime.train --planner nsp --trace wikipedia --model tiny \\
        --steps 20 --tokens-per-batch 8k --max-context 2k --seed 0 --records out/nsp.jsonl

Every rank builds the same workload (``nspsim.workload``) against a cluster preset describing the
machine actually used (``cpu`` under gloo by default, one "GPU" per process), the same model from the
seed and the same batches (``BatchSampler.batch(i)`` is random access). Rank 0 plans batch ``i + 1``
on a background thread while batch ``i`` executes (optionally simulating the plan too) and
broadcasts each plan; the executor checks that all ranks hold the same plan before its first
collective. Rank 0 gathers every rank's phase times and writes one JSONL record per step
(:mod:`nspsim_runtime.records`: the critical rank's breakdown, every rank's, the planner spec as given) and,
next to it, the resolved configuration (``<records>.config.json``) and the executed plans
(``<records>.plans.jsonl``); ``--config <records>.config.json`` reads a run's config back as the
defaults (flags given override them). The pieces live in :mod:`nspsim_runtime.training` (arguments, distributed
set-up, planning ahead, outputs, the trainer); this module is the entry point only.

With the same seed, batches and initial weights the loss curve does not depend on the planner: every
plan computes the same function of the same tokens, only the placement differs.

``--accumulate W`` runs gradient-accumulation windows: every W batches are planned together by the
window planner (samples may move between the W passes), executed as W passes whose gradients
accumulate (the loss normalised by the window's tokens) and ended by one optimizer step; one record
per pass, one window plan per window in the plan log (:mod:`nspsim_runtime.training.trainer`).

Bad arguments end with one line ``nspsim_runtime.train: error: ...`` and exit status 2. A distributed
failure (a peer died or stalled past ``--comm-timeout``, plans differ) ends every rank with one line
``nspsim_runtime.train: rank R: error: ...`` and exit status 1; a rank stuck outside a collective is ended
by its watchdog after ``--step-timeout``, and one whose torchrun agent is gone by the same watchdog.
Ctrl-C (which torchrun forwards to its ranks) ends every rank with one line
``nspsim_runtime.train: rank R: interrupted`` and exit status 130 (143 for SIGTERM, :mod:`nspsim_runtime.cli`);
the finished steps stay in the ``.partial`` files (:mod:`nspsim_runtime.training.outputs`).
"""

from __future__ import annotations

import os

from nspsim_runtime.cli import exit_on_interrupt, fail

PROG = "nspsim_runtime.train"
"""The program name in every line this entry point prints (``nspsim_runtime.training.args.PROG``)."""


def main(argv: list[str] | None = None) -> None:
    """Entry point (see the module docstring)."""
    rank = int(os.environ["RANK"]) if "RANK" in os.environ else None
    exit_on_interrupt(PROG, rank)
    # Imported only now, deliberately not at the top: importing torch takes seconds (tens on a loaded
    # machine), and a Ctrl-C meanwhile must end the rank with one line, not a traceback per rank.
    from nspsim_runtime.training.args import parse_args
    from nspsim_runtime.training.trainer import run

    try:
        args = parse_args(argv)
    except ValueError as exc:
        fail(PROG, exc, 2, hard=True)
    try:
        run(args)
    except ValueError as exc:
        fail(PROG, exc, 2, rank, hard=True)
    except Exception as exc:  # noqa: BLE001 (distributed failures: one clear line, then exit)
        fail(PROG, exc, 1, rank, hard=True)
    os._exit(0)


if __name__ == "__main__":
    main()
