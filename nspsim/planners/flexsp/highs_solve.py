"""A MILP solve with HiGHS under a *deterministic* work limit (FlexSP's solver, docs/planners.md).

``scipy.optimize.milp`` only offers a wall-clock limit and a branch-and-bound node limit. FlexSP's
MILP spends most of a short solve at the root node (presolve, cut rounds, sub-MIP heuristics), where
a node limit never binds, so a wall-clock stop made the plan depend on machine load (the same batch
gave different plans). HiGHS's own MIP search is deterministic when single-threaded; only *where* it
is stopped is not. This module runs HiGHS (the copy recent scipy releases bundle, else ``highspy``)
single-threaded with a fixed random seed and stops it after ``work_limit`` of its
MIP limit checks - the points at which HiGHS itself tests its node, time and gap limits (every
root separation round, heuristic call and search node of the main solve). The number of checks a
solve has made is a function of the model and options only, so the stopping point, and the
solution, is reproducible for a given HiGHS build. The wall-clock ``time_limit`` stays as a safety
net; the result records which limit stopped the solve (``"work-limit"`` is reproducible,
``"time-limit"`` is not).

Trade-off: a check is a coarse unit of work (a root sub-MIP heuristic can run for a while between
two checks), so the work limit maps to wall time only roughly; docs/planners.md gives measured
seconds for the defaults.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import numpy as np
import numpy.typing as npt
from scipy import sparse

FloatArray = npt.NDArray[np.float64]
_SOURCES = ("scipy.optimize._highspy._core", "highspy._core")  # scipy's copy first: the environment pins it
FIXED_OPTIONS: Mapping[str, bool | int | float | str] = MappingProxyType(
    {"output_flag": False, "threads": 1, "random_seed": 0}
)


@dataclass(frozen=True)
class HighsResult:
    """Solution vector (``None`` if none was found), stop reason and limit checks used."""

    x: FloatArray | None
    status: str
    checks: int


def _core() -> Any:
    """The low-level HiGHS bindings (scipy's bundled copy, else ``highspy``)."""
    for name in _SOURCES:
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    raise ValueError(
        "FlexSP's deterministic HiGHS solve needs the HiGHS bindings recent scipy releases bundle "
        "(scipy.optimize._highspy) or the highspy package: upgrade scipy or pip install highspy"
    )


def _finite(values: FloatArray, core: Any) -> FloatArray:
    """HiGHS's infinity in place of +-inf."""
    out: FloatArray = np.where(
        np.isposinf(values), core.kHighsInf, np.where(np.isneginf(values), -core.kHighsInf, values)
    )
    return out


def _model(
    core: Any,
    cost: FloatArray,
    matrix: sparse.csr_matrix,
    rows: tuple[FloatArray, FloatArray],
    cols: tuple[FloatArray, FloatArray],
    integrality: FloatArray,
) -> Any:
    lp = core.HighsLp()
    csc = matrix.tocsc()
    lp.num_col_, lp.num_row_ = int(cost.size), int(matrix.shape[0])
    lp.col_cost_ = cost
    lp.col_lower_, lp.col_upper_ = _finite(cols[0], core), _finite(cols[1], core)
    lp.row_lower_, lp.row_upper_ = _finite(rows[0], core), _finite(rows[1], core)
    lp.a_matrix_.format_ = core.MatrixFormat.kColwise
    lp.a_matrix_.num_col_, lp.a_matrix_.num_row_ = lp.num_col_, lp.num_row_
    lp.a_matrix_.start_, lp.a_matrix_.index_, lp.a_matrix_.value_ = csc.indptr, csc.indices, csc.data
    kinds = core.HighsVarType
    lp.integrality_ = [kinds.kInteger if v else kinds.kContinuous for v in integrality.tolist()]
    return lp


def solve_highs(
    cost: FloatArray,
    matrix: sparse.csr_matrix,
    rows: tuple[FloatArray, FloatArray],
    cols: tuple[FloatArray, FloatArray],
    integrality: FloatArray,
    *,
    time_limit: float,
    work_limit: int,
    mip_gap: float,
    start: FloatArray | None = None,
) -> HighsResult:
    """Minimise ``cost @ x`` s.t. ``rows[0] <= matrix @ x <= rows[1]``, ``cols[0] <= x <= cols[1]``,
    integer where ``integrality`` is nonzero, from the feasible point ``start`` if given; stop after
    ``work_limit`` limit checks or ``time_limit`` seconds, whichever comes first."""
    core = _core()
    highs = core._Highs()
    options = {**FIXED_OPTIONS, "time_limit": float(time_limit), "mip_rel_gap": float(mip_gap)}
    for key, value in options.items():
        highs.setOptionValue(key, value)
    highs.passModel(_model(core, cost, matrix, rows, cols, integrality))
    if start is not None:
        solution = core.HighsSolution()
        solution.col_value = start
        solution.value_valid = True
        highs.setSolution(solution)
    checks = [0]

    def on_check(_kind: int, _message: str, _out: Any, data_in: Any, _user: Any) -> None:
        checks[0] += 1
        if checks[0] >= work_limit:
            data_in.user_interrupt = True

    highs.setCallback(on_check, None)
    highs.startCallback(core.cb.HighsCallbackType.kCallbackMipInterrupt)
    highs.run()
    status = _status(core, highs.getModelStatus())
    solution = highs.getSolution()
    x = np.asarray(solution.col_value, dtype=np.float64) if solution.value_valid else None
    return HighsResult(x=x, status=status, checks=checks[0])


def _status(core: Any, model_status: Any) -> str:
    names = core.HighsModelStatus
    table = {
        names.kOptimal: "optimal",
        names.kInterrupt: "work-limit",
        names.kTimeLimit: "time-limit",
        names.kInfeasible: "infeasible",
        names.kUnbounded: "unbounded",
    }
    return table.get(model_status, "error")
