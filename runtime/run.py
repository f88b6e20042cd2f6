"""``python -m runtime.run [torchrun options] -m runtime.train ...``: torchrun, ending in one line.

torchrun (``torch.distributed.run``) is how the runtime's ranks start, but when a run ends early its
own agent adds a traceback of its own after the ranks' one-line messages: about 25 lines for a
Ctrl-C (its ``SignalException``) and a "Root Cause" report for a failed rank (``ChildFailedError``).
This entry point runs torchrun's own ``main`` unchanged, with the same options, and replaces those
with one line ``runtime.run: ...`` and the ranks' status (130 for Ctrl-C, 128 + the signal for
another, else the failed rank's exit code), so a run launched as the README says ends with one line
per rank and one from the launcher. Trade-off: torchrun's detailed failure report (the failing
rank's host, pid and timestamp) is not printed; each rank's own line says what failed.
"""

from __future__ import annotations

import logging
import os
import signal
import sys

PROG = "runtime.run"


def main(argv: list[str] | None = None) -> int:
    """Run torchrun with ``argv``; the exit status (see the module docstring)."""
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import main as torchrun

    os.environ.setdefault("OMP_NUM_THREADS", "1")  # torchrun's own default, without its banner saying so
    for name in list(logging.Logger.manager.loggerDict):  # torchrun's shutdown chatter (each logger sets a level)
        if name.startswith(("torch.distributed.elastic", "torch.distributed.run")):
            logging.getLogger(name).setLevel(logging.CRITICAL)
    try:
        torchrun(sys.argv[1:] if argv is None else argv)
    except SignalException as exc:
        number = int(exc.sigval)
        print(f"{PROG}: stopped by {signal.Signals(number).name}; every rank was stopped", file=sys.stderr)
        return 128 + number
    except KeyboardInterrupt:
        print(f"{PROG}: stopped by SIGINT; every rank was stopped", file=sys.stderr)
        return 130
    except ChildFailedError as exc:
        rank, failure = exc.get_first_failure()  # the root cause; torchrun then stopped the others
        code = failure.exitcode if failure.exitcode > 0 else 128 - failure.exitcode
        print(f"{PROG}: rank {rank} failed (exit {code}); its own line above says why", file=sys.stderr)
        return code
    return 0


if __name__ == "__main__":
    status = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)  # skip interpreter teardown: torch's rendezvous finalizer fails there after a signal
