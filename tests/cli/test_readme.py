"""README.md runs top to bottom on a clean checkout: every command of its ``sh`` blocks, in order, in a
copy of the tracked files, with the test's environment standing for ``make demo`` / ``make test``.

A command is run unless :data:`NOT_RUN` names it (by its first words) with the reason: set-up
commands, runs of minutes, and what needs their output. A README command this test does not know
is run; one it lists that the README lost fails the test, so the list cannot go stale. ``python``
is this interpreter and ``nspsim`` its console script, both importing the copy (``PYTHONPATH``).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

from checkout import ROOT, tracked_copy

NOT_RUN = {
    "make demo": "the set-up command: this test's environment is what it installs",
    "make test": "the set-up command that runs this test",
    "make runtime": "installs torch and transformers, which this environment has (make test installs them)",
    "nspsim compare --model qwen3-235b-a22b": "minutes: FlexSP's MILPs for Qwen3-235B over 5 batches",
    "python -m nspsim_runtime.calibrate": "minutes of measurement",
    "python -m nspsim_runtime.validate": "minutes: a suite of real runs, with the calibration's profile",
    "python -m nspsim_runtime.run --standalone --nproc-per-node 2": "needs out/profile.json from the calibration",
    "nspsim compare --model tiny --cluster cpu --gpus 2 --trace code": "needs out/profile.json from the calibration",
}
SLOWEST_S = 120


def readme_commands(text: str) -> list[str]:
    """The commands of the ``sh`` blocks, continuation lines joined and comments dropped."""
    commands = []
    for block in re.findall(r"```sh\n(.*?)```", text, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            if words:
                commands.append(shlex.join(words))
    return commands


def skipped(command: str) -> str | None:
    return next((why for prefix, why in NOT_RUN.items() if command.startswith(prefix)), None)


def test_the_readme_runs_top_to_bottom(tmp_path: Path) -> None:
    commands = readme_commands((ROOT / "README.md").read_text())
    assert {p for p in NOT_RUN if any(c.startswith(p) for c in commands)} == set(NOT_RUN)  # none stale
    repo = tracked_copy(tmp_path / "repo")
    bindir = str(Path(sys.executable).parent)
    env = {**os.environ, "PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}", "PYTHONPATH": str(repo)}
    ran = []
    for command in commands:
        if skipped(command):
            continue
        argv = shlex.split(command)
        argv = [sys.executable, *argv[1:]] if argv[0] == "python" else argv
        started = time.perf_counter()
        out = subprocess.run(argv, cwd=repo, env=env, capture_output=True, text=True, timeout=SLOWEST_S * 3)
        seconds = time.perf_counter() - started
        assert out.returncode == 0, f"{command}\n{out.stderr[-3000:]}"
        assert "Traceback" not in out.stderr, command
        ran.append((command, seconds))
    print("\n".join(f"{s:6.1f} s  {c[:100]}" for c, s in ran))
    assert len(ran) >= 15, ran
    assert (repo / "out" / "nsp.plans.jsonl").is_file() and (repo / "out" / "sweep-sweep" / "report.html").is_file()


pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]
