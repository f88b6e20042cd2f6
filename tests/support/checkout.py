"""A clean checkout of the repository for tests that run what a newcomer runs: its tracked files
copied to a folder (no ``.venv``, ``build/``, ``out/`` or untracked files)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def tracked_copy(target: Path) -> Path:
    """Copy every file git tracks (or, outside a git checkout, everything but build outputs) to ``target``."""
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=False)
    if listed.returncode == 0:
        for name in filter(None, listed.stdout.decode().split("\0")):
            src = ROOT / name
            if src.is_file():
                (target / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, target / name)
    else:
        shutil.copytree(ROOT, target, ignore=shutil.ignore_patterns(".venv", "build", "*.egg-info", "out", ".git"))
    return target
