"""Unit runners for the sweep's process-pool tests (workers import them by name)."""

from __future__ import annotations

import os
import signal

from nspsim.sweep.work import UnitOutcome, UnitTask, run_unit


def killed_on_batch_1(task: UnitTask) -> UnitOutcome:
    """Run the unit, except that the worker running batch 1 is killed (as the OOM killer would)."""
    if task.batch_index == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    return run_unit(task)
