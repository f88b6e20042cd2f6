"""Layering rules (docs/DESIGN.md): one-way layers, checked on the import graph read from the source
(``tests/support/import_graph.py``: every import statement, lazy ones included) and, for nspsim, by really
importing every module with torch, plotly, runtime and studies blocked."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from import_graph import external_imports, find_cycles, import_graph, module_name

ROOT = Path(__file__).resolve().parents[2]
GRAPH = import_graph(ROOT, ["nspsim", "nspsim_runtime", "nspsim_studies"])

# Layers of nspsim, lowest first. A module may import its own layer and the layers below it, never above.
NSPSIM_LAYERS: list[tuple[str, ...]] = [
    ("nspsim.units", "nspsim.options", "nspsim.sp_tree", "nspsim.records", "nspsim.jsonfile", "nspsim.output_files"),
    ("nspsim.trace", "nspsim.specs"),
    ("nspsim.cost",),
    ("nspsim.plan",),
    ("nspsim.workload",),
    ("nspsim.execution",),
    ("nspsim.planners", "nspsim.simulator"),
    ("nspsim.compare", "nspsim.validation"),
    ("nspsim.sweep", "nspsim.api"),
    ("nspsim.cli", "nspsim.__main__"),
]


def layer_of(module: str) -> int | None:
    """Index of the nspsim layer that ``module`` belongs to (a package prefix match), else None."""
    for i, layer in enumerate(NSPSIM_LAYERS):
        if any(module == p or module.startswith(p + ".") for p in layer):
            return i
    return None


def _under(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def test_every_nspsim_module_has_a_layer() -> None:
    unplaced = sorted(m for m in GRAPH if _under(m, "nspsim") and m != "nspsim" and layer_of(m) is None)
    assert unplaced == [], f"add these modules to NSPSIM_LAYERS: {unplaced}"


def test_nspsim_layers_import_only_downwards() -> None:
    upward = [
        f"{a} -> {b}"
        for a, targets in GRAPH.items()
        if _under(a, "nspsim") and a != "nspsim"
        for b in targets
        if _under(b, "nspsim") and b != "nspsim" and (layer_of(b) or 0) > (layer_of(a) or 0)
    ]
    assert upward == []


def test_planners_and_simulator_do_not_import_each_other() -> None:
    """What both need (activation, recompute, issue order, layout) lives in nspsim.execution."""
    crossing = [
        f"{a} -> {b}"
        for a, targets in GRAPH.items()
        for b in targets
        if (_under(a, "nspsim.planners") and _under(b, "nspsim.simulator"))
        or (_under(a, "nspsim.simulator") and _under(b, "nspsim.planners"))
    ]
    assert crossing == []


PLANNER_FAMILIES = ("nspsim.planners.nsp", "nspsim.planners.flexsp", "nspsim.planners.static")
FAMILY_USES = {("nspsim.planners.nsp", "nspsim.planners.static")}  # NSP's static seeds


def test_planner_families_import_only_the_shared_parts() -> None:
    """Shared planner parts (base, estimate, finish, proxy, packing, ...) never import a family; a
    family imports another only where declared (NSP packs static seeds); the registry imports all."""
    family = {m: f for m in GRAPH for f in PLANNER_FAMILIES if _under(m, f)}
    basp_megatron = ("nspsim.planners.basp", "nspsim.planners.megatron_cp")
    crossing = []
    for a, targets in GRAPH.items():
        if not _under(a, "nspsim.planners") or a == "nspsim.planners":
            continue
        for b in targets:
            if b not in family or family.get(a) == family[b]:
                continue
            shared = a not in family and not a.startswith(basp_megatron)
            if shared or (a in family and (family[a], family[b]) not in FAMILY_USES):
                crossing.append(f"{a} -> {b}")
    assert crossing == []


def test_nspsim_never_imports_torch_plotly_runtime_or_studies() -> None:
    forbidden = {"torch", "plotly", "nspsim_runtime", "nspsim_studies", "transformers"}
    offenders = {
        m: sorted(names & forbidden) for m, names in external_imports(ROOT, ["nspsim"]).items() if names & forbidden
    }
    assert offenders == {}


# Imports by name at run time, which the import graph cannot see: each must be named by a module-level
# constant listed here, so a new one fails this test until it is reviewed.
DYNAMIC_IMPORTS = {
    ("nspsim.cli.commands.compare", "REPORT_RENDERER"): ("nspsim_studies.renderers.compare_report",),
    ("nspsim.cli.commands.plot", "PLOT_RENDERER"): ("nspsim_studies.renderers.sweep_report",),
    ("nspsim.cli.commands.validate", "REPORT_RENDERER"): ("nspsim_studies.renderers.reference_report",),
    ("nspsim.planners.flexsp.highs_solve", "_SOURCES"): ("scipy.optimize._highspy._core", "highspy._core"),
    ("nspsim_runtime.validate", "REPORT_RENDERER"): ("nspsim_studies.renderers.validation_report",),
    ("nspsim_runtime.hf", "TRANSFORMERS"): ("transformers",),
}


def _dynamic_imports(path: Path) -> list[str]:
    """Arguments (source text) of every ``import_module(...)`` / ``__import__(...)`` call in a file."""
    tree = ast.parse(path.read_text())
    calls = [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.Call)
        and (
            (isinstance(n.func, ast.Attribute) and n.func.attr == "import_module")
            or (isinstance(n.func, ast.Name) and n.func.id in ("import_module", "__import__"))
        )
    ]
    return [ast.unparse(c.args[0]) if c.args else "" for c in calls]


def _constant(module: str, name: str) -> object:
    path = ROOT / (module.replace(".", "/") + ".py")
    if not path.exists():
        path = ROOT / module.replace(".", "/") / "__init__.py"
    for node in ast.parse(path.read_text()).body:
        targets = (
            node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        )
        if any(isinstance(t, ast.Name) and t.id == name for t in targets) and node.value is not None:
            return ast.literal_eval(node.value)
    raise AssertionError(f"{module}.{name} is not a module-level constant")


def test_every_import_by_name_in_nspsim_is_declared() -> None:
    """nspsim and the runtime load other code by name only through the constants above; the report
    renderers of ``nspsim_studies/renderers/`` are the only studies modules they may load (lazily, when a
    report is asked for), so plotly stays out."""
    found = {}
    for path in sorted([*(ROOT / "nspsim").rglob("*.py"), *(ROOT / "nspsim_runtime").rglob("*.py")]):
        args = _dynamic_imports(path)
        if args:
            found[module_name(ROOT, path)] = args
    for (module, const), values in DYNAMIC_IMPORTS.items():
        value = _constant(module, const)
        as_tuple = (value,) if isinstance(value, str) else tuple(value)
        assert as_tuple == values, f"{module}.{const} = {value!r}"
    undeclared = sorted(set(found) - {m for m, _ in DYNAMIC_IMPORTS})
    assert undeclared == [], f"these modules import by name; declare them in DYNAMIC_IMPORTS: {undeclared}"
    studies = [v for (m, _), vals in DYNAMIC_IMPORTS.items() for v in vals if v.split(".")[0] == "nspsim_studies"]
    assert studies == [
        "nspsim_studies.renderers.compare_report",
        "nspsim_studies.renderers.sweep_report",
        "nspsim_studies.renderers.reference_report",
        "nspsim_studies.renderers.validation_report",
    ]
    renderers = ROOT / "nspsim_studies" / "renderers"
    assert sorted(f"nspsim_studies.renderers.{p.stem}" for p in renderers.glob("*_report.py")) == sorted(studies)


def test_no_import_cycles_among_project_modules() -> None:
    assert find_cycles(GRAPH) == []


def test_cycle_finder_sees_a_cycle() -> None:
    """The cycle check can fail: a constructed graph with a three-module circle and a self-free tail."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"e"}}
    assert find_cycles(graph) == [["a", "b", "c"]]


def test_import_graph_reads_lazy_and_relative_imports(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("from . import leaf\n")
    (pkg / "sub" / "leaf.py").write_text("def f():\n    from pkg.top import X\n    return X\n")
    (pkg / "top.py").write_text("from .sub.leaf import f\nX = 1\n")
    graph = import_graph(tmp_path, ["pkg"])
    assert graph["pkg.sub"] == {"pkg.sub.leaf"}
    assert graph["pkg.sub.leaf"] == {"pkg.top"}
    assert graph["pkg.top"] == {"pkg.sub.leaf"}
    assert find_cycles(graph) == [["pkg.sub.leaf", "pkg.top"]]


BLOCKER = """
import importlib.abc, sys
BLOCKED = {'torch', 'plotly', 'nspsim_runtime', 'nspsim_studies'}
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in BLOCKED:
            raise ImportError('blocked by layering test: ' + name)
        return None
sys.meta_path.insert(0, Block())
import pkgutil, importlib, nspsim
for mod in pkgutil.walk_packages(nspsim.__path__, 'nspsim.'):
    if mod.name != 'nspsim.__main__':
        importlib.import_module(mod.name)
bad = sorted(m for m in sys.modules if m.split('.')[0] in BLOCKED)
assert not bad, bad
print('ok', len([m for m in sys.modules if m.startswith('nspsim')]))
"""


@pytest.mark.timeout(120)
def test_every_nspsim_module_imports_with_torch_plotly_runtime_studies_blocked() -> None:
    out = subprocess.run([sys.executable, "-c", BLOCKER], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("ok")
