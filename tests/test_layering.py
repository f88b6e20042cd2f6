"""Layering rule 1: nspsim never imports torch, plotly or runtime."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

BLOCKER = """
import importlib.abc, sys
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in {'torch', 'plotly', 'runtime'}:
            raise ImportError('blocked by layering test: ' + name)
        return None
sys.meta_path.insert(0, Block())
import pkgutil, importlib, nspsim
for mod in pkgutil.walk_packages(nspsim.__path__, 'nspsim.'):
    if mod.name != 'nspsim.__main__':
        importlib.import_module(mod.name)
bad = sorted(m for m in sys.modules if m.split('.')[0] in {'torch', 'plotly', 'runtime'})
assert not bad, bad
print('ok', len([m for m in sys.modules if m.startswith('nspsim')]))
"""


def test_every_nspsim_module_imports_with_torch_plotly_runtime_blocked() -> None:
    out = subprocess.run([sys.executable, "-c", BLOCKER], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("ok")


def test_no_forbidden_import_statements_in_source() -> None:
    import re

    pattern = re.compile(r"^\s*(import|from)\s+(torch|plotly|runtime)\b", re.MULTILINE)
    offenders = [p.name for p in (ROOT / "nspsim").rglob("*.py") if pattern.search(p.read_text())]
    assert offenders == []
