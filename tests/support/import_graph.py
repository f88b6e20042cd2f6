"""The import graph of the project's packages, read from the source with :mod:`ast` (nothing is run).

Every ``import`` and ``from ... import`` statement counts, at module top or inside a function, so a
lazy import cannot hide a dependency. ``from pkg import name`` is an edge to ``pkg.name`` when that
is a module of the project, else to ``pkg`` (a package's ``__init__``). Relative imports are
resolved against the importing module. Imports only seen by a type checker (under
``if TYPE_CHECKING:``) count too: they are still a dependency of the design.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path


def module_name(root: Path, path: Path) -> str:
    """Dotted module name of ``path`` below ``root`` (``pkg/__init__.py`` is ``pkg``)."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def project_modules(root: Path, packages: Iterable[str]) -> dict[str, Path]:
    """Every module of ``packages`` (top-level folder names below ``root``), by dotted name."""
    return {module_name(root, p): p for pkg in packages for p in sorted((root / pkg).rglob("*.py"))}


def imported_names(
    tree: ast.AST, module: str, is_package: bool, modules: Mapping[str, Path] | None = None
) -> list[str]:
    """Absolute dotted names a module's syntax tree imports, anywhere in it.

    ``import a.b`` gives ``a.b``; ``from pkg import name`` gives ``pkg.name`` when that is one of
    ``modules``, else ``pkg`` (a name taken from the package's ``__init__`` or an outside module).
    """
    out: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(node, module, is_package)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                out.append(sub if modules is not None and sub in modules else base)
    return out


def _resolve(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    parts = module.split(".")
    anchor = parts if is_package else parts[:-1]
    anchor = anchor[: len(anchor) - (node.level - 1)]
    return ".".join([*anchor, *([node.module] if node.module else [])])


def import_graph(root: Path, packages: Iterable[str]) -> dict[str, set[str]]:
    """``graph[a]`` = the project modules that module ``a`` imports (outside imports are dropped)."""
    modules = project_modules(root, packages)
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        names = imported_names(tree, name, path.name == "__init__.py", modules)
        graph[name] = {d for d in names if d in modules} - {name}
    return graph


def find_cycles(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan's algorithm), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def external_imports(root: Path, packages: Iterable[str]) -> dict[str, set[str]]:
    """``out[module]`` = top-level names of every package a module imports (project ones included)."""
    out: dict[str, set[str]] = {}
    for name, path in project_modules(root, packages).items():
        tree = ast.parse(path.read_text(), filename=str(path))
        out[name] = {d.split(".")[0] for d in imported_names(tree, name, path.name == "__init__.py") if d}
    return out
