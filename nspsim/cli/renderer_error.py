"""The one-line error when a report renderer (a module of ``nspsim_studies.renderers``) cannot be
imported, naming the real cause.

Renderers are loaded lazily by name (the ``*_RENDERER`` constants the layering test declares), so a
failure there is either plotly missing, the renderer itself missing (a broken install), or an error
inside it; only the first is "install plotly". The package name ``nspsim_studies`` is ours alone, so a
user's own ``studies/`` folder cannot stand in for it (docs/DESIGN.md, "Packaging").
"""

from __future__ import annotations


def renderer_error(module: str, exc: ImportError, what: str) -> ValueError:
    """The ``ValueError`` for ``what`` (e.g. "build the HTML report") when importing ``module`` raised
    ``exc``."""
    missing = exc.name if isinstance(exc, ModuleNotFoundError) else None
    if missing is not None and missing.split(".")[0] == "plotly":
        return ValueError(f"cannot {what}: plotly is not installed (pip install plotly)")
    if missing is not None and module.startswith(missing):
        return ValueError(f"cannot {what}: {module} is not installed ({exc}); reinstall nspsim")
    return ValueError(f"cannot {what}: importing {module} failed ({type(exc).__name__}: {exc})")
