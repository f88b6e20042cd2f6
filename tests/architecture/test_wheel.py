"""The built wheel: its own top-level names only, every data file a study or report needs, and no
user folder named ``runtime/``, ``studies/`` or ``traces/`` can stand in for ours (docs/DESIGN.md,
"Packaging").

The wheel is built from a copy of the tracked files (a stale ``build/`` folder cannot leak into it),
installed with ``pip --target`` into an empty folder, and run from a folder holding its own
``runtime/``, ``studies/`` and ``traces/`` packages that raise on import: ``compare -o`` and a
figure's quick mode must work and import nspsim's packages from the installed wheel.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from checkout import tracked_copy
from nspsim.cli.renderer_error import renderer_error

OURS = {"nspsim", "nspsim_runtime", "nspsim_studies", "nspsim_traces"}
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("wheel")
    src = tracked_copy(tmp / "src")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp)],
        check=True,
        capture_output=True,
    )
    (built,) = tmp.glob("nspsim-*.whl")
    return built


def test_the_wheel_installs_only_nspsim_names_and_every_data_file(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    assert {n.split("/")[0] for n in names} - {n.split("/")[0] for n in names if ".dist-info" in n} == OURS
    for data in (
        "nspsim_studies/sweeps/fig7.toml",
        "nspsim_studies/profiles/hierarchical-fsdp.json",
        "nspsim_traces/data/wikipedia_hist.json",
        "nspsim/specs/clusters/h100.toml",
        "nspsim/validation/reference/kernels.toml",
    ):
        assert data in names, data


def test_a_users_own_runtime_studies_and_traces_folders_shadow_nothing(wheel: Path, tmp_path: Path) -> None:
    site, work = tmp_path / "site", tmp_path / "work"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), str(wheel)],
        check=True,
        capture_output=True,
    )
    for name in ("runtime", "studies", "traces"):
        (work / name).mkdir(parents=True)
        (work / name / "__init__.py").write_text(f"raise ImportError('the user folder {name}/ was imported')\n")
    env = {**os.environ, "PYTHONPATH": str(site)}

    def run(*argv: str) -> str:
        out = subprocess.run([sys.executable, *argv], cwd=work, env=env, capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr[-2000:]
        return out.stdout

    where = run("-c", "import nspsim, nspsim_runtime, nspsim_studies, nspsim_traces as t; print(t.__file__)")
    assert Path(where.strip()).is_relative_to(site)
    small = ["--model", "tiny", "--cluster", "cpu", "--gpus", "2", "--tokens-per-batch", "8k", "--max-context", "8k"]
    run("-m", "nspsim", "compare", *small, "--iters", "1", "--planners", "static,nsp", "-o", "out/r.html", "--quiet")
    assert (work / "out" / "r.html").stat().st_size > 10_000 and (work / "out" / "r.results.parquet").is_file()
    run("-m", "nspsim_studies.paper_figures.fig10", "--quick", "-o", "out/fig10")
    assert (work / "out" / "fig10" / "fig10.html").is_file()


def test_a_renderer_import_error_names_its_real_cause() -> None:
    module = "nspsim_studies.renderers.compare_report"
    plotly = renderer_error(module, ModuleNotFoundError("No module named 'plotly'", name="plotly"), "draw")
    assert str(plotly) == "cannot draw: plotly is not installed (pip install plotly)"
    gone = renderer_error(module, ModuleNotFoundError("x", name="nspsim_studies"), "draw")
    assert "nspsim_studies.renderers.compare_report is not installed" in str(gone) and "plotly" not in str(gone)
    broken = renderer_error(module, ImportError("cannot import name 'X' from 'numpy'"), "draw")
    assert "importing nspsim_studies.renderers.compare_report failed (ImportError: cannot import" in str(broken)
