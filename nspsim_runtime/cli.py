"""Command-line error policy shared by the runtime's entry points (``nspsim_runtime.train``, ``nspsim_runtime.report``).

Bad arguments end with exactly one line ``<prog>: error: <message>`` on stderr and exit status 2:
:class:`nspsim.cli.flags.Parser` turns argparse's usage-plus-message exit into a ``ValueError``
(``CliError``) the entry point reports with :func:`fail`. Trade-off: no usage dump on error
(``--help`` still prints it). An interrupted run ends with one line ``<prog>: [rank R: ]interrupted``
and status 130 (Ctrl-C, which torchrun forwards to its ranks as SIGINT), or 143 for SIGTERM (what
torchrun sends every rank when one of them failed, or when it is stopped itself), with no traceback
(:func:`exit_on_interrupt`).
"""

from __future__ import annotations

import os
import signal
import sys
from types import FrameType
from typing import NoReturn

EXIT_USAGE = 2

INTERRUPTS = {
    signal.SIGINT: "interrupted",
    signal.SIGTERM: "interrupted (SIGTERM: torchrun stops every rank when one fails or it is stopped itself)",
}
"""The signals that end a run, with what the one line says. The status is 128 + the signal number,
as a shell reports a process the signal ended (130 for Ctrl-C, 143 for SIGTERM)."""


def _where(rank: int | None) -> str:
    return f"rank {rank}: " if rank is not None else ""


def fail(prog: str, exc: BaseException, code: int, rank: int | None = None, hard: bool = False) -> NoReturn:
    """Write ``prog: [rank R: ]error: <first line of exc>`` and exit with ``code``; ``hard`` skips
    interpreter teardown (``os._exit``: a distributed peer may be gone and teardown could block)."""
    where = _where(rank)
    first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    sys.stderr.write(f"{prog}: {where}error: {first}\n")
    sys.stderr.flush()
    if hard:
        os._exit(code)
    sys.exit(code)


def exit_on_interrupt(prog: str, rank: int | None = None) -> None:
    """From now on SIGINT and SIGTERM end this process with one line ``prog: [rank R: ]interrupted``
    (:data:`INTERRUPTS`) and status 128 + the signal number, from the main thread, without teardown
    (``os._exit``: the process group may have lost peers, and a traceback per rank is what this
    replaces). Call it in the main thread of an entry point, before any work. Trade-off: a main
    thread blocked inside a C++ collective handles the signal when the collective returns, which is at
    once when the interrupted peers exit, else after the group timeout."""

    def interrupted(signum: int, _frame: FrameType | None) -> None:
        os.write(2, f"{prog}: {_where(rank)}{INTERRUPTS[signal.Signals(signum)]}\n".encode())
        os._exit(128 + signum)

    for sig in INTERRUPTS:
        signal.signal(sig, interrupted)
