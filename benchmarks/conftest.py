"""Collect ``bench_*.py`` files here (pytest only collects ``test_*.py`` by default).

Benchmarks run with ``make bench`` (``pytest benchmarks -m benchmark --benchmark-only -p no:xdist``);
the default test run never sees this directory (``testpaths = ["tests"]``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest


def pytest_collect_file(file_path: Path, parent: Any) -> Any:
    """Treat ``bench_*.py`` as test modules (a file named on the command line is collected by pytest
    itself)."""
    if parent.session.isinitpath(file_path):
        return None
    if file_path.suffix == ".py" and file_path.name.startswith("bench_"):
        return pytest.Module.from_parent(parent, path=file_path)
    return None
