"""The compiled least-loaded fill equals its numpy reference, bit for bit: units, loads and tokens, on
random inputs with ties (integer costs), surcharges, full units and items no unit can take, on few
units and many."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nspsim.planners.packing import (
    least_loaded_fill,
    least_loaded_fill_many,
    least_loaded_fill_many_rounds,
    least_loaded_fill_rounds,
)


@st.composite
def fills(draw: st.DrawFn) -> tuple[np.ndarray, ...]:
    states = draw(st.integers(1, 4))
    units = draw(st.one_of(st.integers(1, 9), st.integers(10, 70)))
    items = draw(st.integers(0, 40))
    ints = st.integers(0, 6)  # small integers: many exact ties
    loads = np.array([[draw(ints) for _ in range(units)] for _ in range(states)], dtype=np.float64)
    tokens = np.array([[draw(ints) * 10 for _ in range(units)] for _ in range(states)], dtype=np.float64)
    cost = np.sort(np.array([draw(st.integers(1, 8)) for _ in range(items)], dtype=np.float64))[::-1].copy()
    if draw(st.booleans()):
        cost = cost * draw(st.floats(0.01, 3.0))  # non-integer sums as well
    item_tokens = np.array([draw(st.integers(1, 30)) for _ in range(items)], dtype=np.float64)
    budget = float(draw(st.integers(10, 120)))
    surcharge = np.array([[draw(st.sampled_from([0.0, 0.5, 2.0])) for _ in range(units)] for _ in range(states)])
    return loads, tokens, cost, item_tokens, np.array([budget]), surcharge


def _same(a: tuple[np.ndarray, ...], b: tuple[np.ndarray, ...]) -> None:
    for x, y in zip(a, b):
        assert x.dtype == y.dtype and x.shape == y.shape and np.array_equal(x, y)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fills())
def test_compiled_fill_equals_the_numpy_rounds(case: tuple[np.ndarray, ...]) -> None:
    loads, tokens, cost, item_tokens, budget, surcharge = case
    b = float(budget[0])
    for s in range(loads.shape[0]):
        args = (loads[s], tokens[s], cost, item_tokens, b, surcharge[s])
        _same(least_loaded_fill(*args), least_loaded_fill_rounds(*args))
        _same(least_loaded_fill(*args[:5]), least_loaded_fill_rounds(*args[:5]))  # no surcharge
    many = (loads, tokens, cost, item_tokens, b, surcharge)
    _same(least_loaded_fill_many(*many), least_loaded_fill_many_rounds(*many))
    _same(
        least_loaded_fill_many(*many[:5], np.zeros_like(surcharge)),
        least_loaded_fill_many_rounds(*many[:5], np.zeros_like(surcharge)),
    )


def test_the_inputs_are_left_untouched() -> None:
    loads, tokens = np.array([1.0, 0.0]), np.array([0.0, 5.0])
    cost, item_tokens, surcharge = np.array([3.0, 1.0]), np.array([2.0, 2.0]), np.array([0.5, 0.5])
    before = [a.copy() for a in (loads, tokens, cost, item_tokens, surcharge)]
    units, new_loads, _ = least_loaded_fill(loads, tokens, cost, item_tokens, 10.0, surcharge)
    assert units.tolist() == [1, 0] and new_loads.tolist() == [2.5, 3.5]
    for a, b in zip((loads, tokens, cost, item_tokens, surcharge), before):
        assert np.array_equal(a, b)


def test_without_a_writable_cache_the_kernels_compile_per_process() -> None:
    """numba refuses ``cache=True`` when it finds no writable cache folder (a read-only install with
    ``NUMBA_CACHE_DIR`` unusable); the kernels then compile without the disk cache instead of failing."""
    import subprocess
    import sys

    code = (
        "import numba\n"
        "real = numba.njit\n"
        "def refusing(*args, **kwargs):\n"
        "    if kwargs.get('cache'):\n"
        "        raise RuntimeError(\"cannot cache function '_fill_sequential': no locator available\")\n"
        "    return real(*args, **kwargs)\n"
        "numba.njit = refusing\n"
        "from nspsim.planners.packing import least_loaded_fill\n"
        "print(least_loaded_fill([0.0, 0.0], [0.0, 0.0], [2.0, 1.0], [1.0, 1.0], 10.0)[0].tolist())\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-1500:]
    assert done.stdout.strip() == "[0, 1]"
