"""``python -m nspsim_runtime.run [torchrun options] -m nspsim_runtime.train ...``: torchrun, ending in one line.

torchrun (``torch.distributed.run``) is how the runtime's ranks start, but when a run ends early its
own agent adds a traceback of its own after the ranks' one-line messages: about 25 lines for a
Ctrl-C (its ``SignalException``) and a "Root Cause" report for a failed rank (``ChildFailedError``).
This entry point runs torchrun's own ``main`` unchanged, with the same options, and replaces those
with one line ``nspsim_runtime.run: ...`` and the ranks' status (130 for Ctrl-C, 128 + the signal for
another, else the failed rank's exit code), so a run launched as the README says ends with one line
per rank and one from the launcher. Bad launcher options (torchrun's own parser, ``--nproc-per-node
0``) are one line and status 2; a Ctrl-C before torch has even loaded is one line too. A rank the
kernel killed (the OOM killer's SIGKILL) is the one named, with 128 + its signal, even when its peers
failed after it. Trade-off: torchrun's detailed failure report (the failing rank's host, pid and
timestamp) is not printed; each rank's own line says what failed.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from types import FrameType
from typing import Any, NoReturn

PROG = "nspsim_runtime.run"
EXIT_USAGE = 2


def _interrupted(signum: int, _frame: FrameType | None) -> None:
    """Until torchrun installs its own handlers: one line, no traceback (the ranks are not started)."""
    os.write(2, f"{PROG}: stopped by {signal.Signals(signum).name} before the ranks started\n".encode())
    os._exit(128 + signum)


def _usage_error(message: str) -> NoReturn:
    print(f"{PROG}: error: {' '.join(message.split())}", file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(EXIT_USAGE)


def _check_options(argv: list[str]) -> None:
    """Parse ``argv`` with torchrun's own parser, each error one line (not its 18-line usage)."""
    from torch.distributed.run import get_args_parser

    parser = get_args_parser()
    parser.prog = PROG
    parser.error = _usage_error  # type: ignore[method-assign]
    args = parser.parse_args(argv)
    nproc = str(args.nproc_per_node)
    if nproc.lstrip("-").isdigit() and int(nproc) < 1:
        _usage_error(f"--nproc-per-node must be at least 1, got {nproc}")


def _first_failure(failures: dict[int, Any]) -> tuple[int, Any]:
    """The rank to name: one the kernel killed (negative exit code: a signal), else torchrun's first."""
    killed = sorted((f.timestamp, rank) for rank, f in failures.items() if f.exitcode < 0)
    if killed:
        rank = killed[0][1]
        return rank, failures[rank]
    rank = min(failures, key=lambda r: (failures[r].timestamp, r))
    return rank, failures[rank]


def main(argv: list[str] | None = None) -> int:
    """Run torchrun with ``argv``; the exit status (see the module docstring)."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _interrupted)
    argv = sys.argv[1:] if argv is None else argv
    _check_options(argv)
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import main as torchrun

    os.environ.setdefault("OMP_NUM_THREADS", "1")  # torchrun's own default, without its banner saying so
    for name in list(logging.Logger.manager.loggerDict):  # torchrun's shutdown chatter (each logger sets a level)
        if name.startswith(("torch.distributed.elastic", "torch.distributed.run")):
            logging.getLogger(name).setLevel(logging.CRITICAL)
    try:
        torchrun(argv)
    except SignalException as exc:
        number = int(exc.sigval)
        print(f"{PROG}: stopped by {signal.Signals(number).name}; every rank was stopped", file=sys.stderr)
        return 128 + number
    except KeyboardInterrupt:
        print(f"{PROG}: stopped by SIGINT; every rank was stopped", file=sys.stderr)
        return 130
    except ChildFailedError as exc:
        rank, failure = _first_failure(exc.failures)
        if failure.exitcode < 0:
            name = signal.Signals(-failure.exitcode).name
            print(f"{PROG}: rank {rank} was killed by {name} (the OOM killer sends SIGKILL)", file=sys.stderr)
            return 128 - int(failure.exitcode)
        print(f"{PROG}: rank {rank} failed (exit {failure.exitcode}); its own line above says why", file=sys.stderr)
        return int(failure.exitcode)
    except (ValueError, AssertionError, argparse.ArgumentError) as exc:  # torchrun's own option checks
        _usage_error(f"invalid launcher options: {exc or type(exc).__name__}")
    return 0


if __name__ == "__main__":
    status = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)  # skip interpreter teardown: torch's rendezvous finalizer fails there after a signal
