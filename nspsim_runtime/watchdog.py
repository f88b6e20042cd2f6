"""A per-process watchdog: if an armed deadline passes, say why and end the process.

Collectives already fail after the process-group timeout (gloo and NCCL raise), so a dead peer ends
every blocked rank with an error. The watchdog covers what a collective timeout cannot: a rank stuck
outside a collective (a hung kernel, a deadlocked thread) that its peers are waiting for. It never
interrupts a healthy step; on expiry it prints one line to stderr and exits with status 3 (an
in-process exception cannot reach a thread blocked in C++). One per process, owned by the caller.

With ``watch_parent`` it also ends the process (same line, same status) once its parent is gone: a
rank whose torchrun agent was killed would otherwise train on, unsupervised, for as long as its
peers live. The parent is polled (``os.getppid()`` changes when the parent dies and the process is
re-parented), not ``prctl(PR_SET_PDEATHSIG)``, which fires when the *thread* that started the process
ends and is Linux-only. Only launchers that own their children (torchrun) ask for it: a plain
``python -m nspsim_runtime.train`` may outlive its shell on purpose (``nohup``).
"""

from __future__ import annotations

import os
import sys
import threading
import time

EXIT_CODE = 3


class Watchdog:
    """``arm(what, seconds)`` before a bounded piece of work, ``disarm()`` after it."""

    def __init__(self, *, rank: int, prog: str = "runtime", watch_parent: bool = False) -> None:
        self.rank, self.prog = rank, prog
        self._parent = os.getppid() if watch_parent else None
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
                self._abort(f"{what} did not finish in time (a peer is stuck or dead); aborting this rank")
            if self._parent is not None and os.getppid() != self._parent:
                self._abort(f"its launcher (parent process {self._parent}, torchrun) is gone; ending this rank")

    def _abort(self, why: str) -> None:
        sys.stderr.write(f"{self.prog}: rank {self.rank}: error: {why}\n")
        sys.stderr.flush()
        os._exit(EXIT_CODE)
