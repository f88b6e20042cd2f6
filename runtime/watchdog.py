"""A per-process watchdog: if an armed deadline passes, say why and end the process.

Collectives already fail after the process-group timeout (gloo and NCCL raise), so a dead peer ends
every blocked rank with an error. The watchdog covers what a collective timeout cannot: a rank stuck
outside a collective (a hung kernel, a deadlocked thread) that its peers are waiting for. It never
interrupts a healthy step; on expiry it prints one line to stderr and exits with status 3 (an
in-process exception cannot reach a thread blocked in C++). One per process, owned by the caller.
"""

from __future__ import annotations

import os
import sys
import threading
import time

EXIT_CODE = 3


class Watchdog:
    """``arm(what, seconds)`` before a bounded piece of work, ``disarm()`` after it."""

    def __init__(self, *, rank: int) -> None:
        self.rank = rank
        self._lock = threading.Lock()
        self._deadline: float | None = None
        self._what = ""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="nsp-watchdog", daemon=True)
        self._thread.start()

    def arm(self, what: str, seconds: float) -> None:
        """Expect ``what`` to finish within ``seconds``."""
        with self._lock:
            self._deadline, self._what = time.monotonic() + seconds, what

    def disarm(self) -> None:
        """The armed work finished."""
        with self._lock:
            self._deadline = None

    def close(self) -> None:
        """Stop watching."""
        self._stop.set()

    def _watch(self) -> None:
        while not self._stop.wait(0.2):
            with self._lock:
                expired = self._deadline is not None and time.monotonic() > self._deadline
                what = self._what
            if expired:
                sys.stderr.write(
                    f"runtime: rank {self.rank}: error: {what} did not finish in time "
                    "(a peer is stuck or dead); aborting this rank\n"
                )
                sys.stderr.flush()
                os._exit(EXIT_CODE)
