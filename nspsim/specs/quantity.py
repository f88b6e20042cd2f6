"""Physical quantities written with their units (``"400 Gb/s"``, ``"80 GiB"``, ``"989 TFLOP/s"``,
``"34.3 us"``), read by pint into plain SI floats.

A private pint registry defines only the dimensions hardware files use (time, information,
computation) with SI and binary prefixes, so no unit of another field can be read for one of ours:
pint's default registry reads ``Gb`` as the gilbert (a magnetomotive force) and ``b`` as the barn.
Magnitudes are :class:`~decimal.Decimal`, so ``"3.35 TB/s"`` becomes exactly the float ``3.35e12``
that the literal gives (a preset read from its file equals the spec once written in code, bit for
bit, and plans fingerprint their cluster). Trade-off: a fixed list of units (no ``GT/s``, no
``lanes``), each a name the field's documentation uses.

pint is imported on the first quantity read, not with nspsim: it takes about 0.3 s to import.
"""

from __future__ import annotations

import functools
import math
import re
from decimal import Decimal, InvalidOperation
from typing import Any

UNIT_WORDS = {
    "B": ("a size in bytes", '"80 GiB"'),
    "B/s": ("a bandwidth", '"46 GB/s" or "400 Gb/s"'),
    "FLOP/s": ("a compute rate", '"989 TFLOP/s"'),
    "s": ("a time", '"34.3 us"'),
}
"""The units a hardware field may have: what the quantity is, in words, and an example."""

_DEFINITIONS = (
    "second = [time] = s = sec",
    "bit = [information] = b",
    "byte = 8 * bit = B",
    "FLOP = [computation] = flop",
    "FLOPS = FLOP / second",
    "kilo- = 1e3 = k-",
    "mega- = 1e6 = M-",
    "giga- = 1e9 = G-",
    "tera- = 1e12 = T-",
    "peta- = 1e15 = P-",
    "exa- = 1e18 = E-",
    "milli- = 1e-3 = m-",
    "micro- = 1e-6 = u- = µ- = μ-",
    "nano- = 1e-9 = n-",
    "kibi- = 2**10 = Ki-",
    "mebi- = 2**20 = Mi-",
    "gibi- = 2**30 = Gi-",
    "tebi- = 2**40 = Ti-",
    "pebi- = 2**50 = Pi-",
)


_FORM = re.compile(
    r"^\s*(?P<number>(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)\s*(?P<unit>[A-Za-zµμ]+(?:\s*/\s*[A-Za-zµμ]+)?)\s*$"
)
"""A quantity is a non-negative decimal number, then a unit or a unit per unit: ``80 GiB``, ``46 GB/s``."""


@functools.cache
def _registry() -> Any:
    """The hardware unit registry (built once per process; immutable after)."""
    import pint

    registry: Any = pint.UnitRegistry(None, non_int_type=Decimal)
    for line in _DEFINITIONS:
        registry.define(line)
    return registry


def parse_quantity(value: object, unit: str, what: str) -> float:
    """``value`` (text such as ``"400 Gb/s"``) in ``unit`` (one of :data:`UNIT_WORDS`) as a finite,
    non-negative float; ``ValueError`` naming ``what`` and the fix otherwise. A bare number is refused:
    a unit is what makes ``80`` mean 80 GiB rather than 80 bytes."""
    words, example = UNIT_WORDS[unit]
    if isinstance(value, bool) or not isinstance(value, str):
        raise ValueError(f"{what}: write {words} with its unit, e.g. {example} (got {value!r})")
    form = _FORM.match(value)
    if form is None:
        raise ValueError(f"{what}: {value!r} is not a number followed by a unit; write e.g. {example}")
    import pint

    registry = _registry()
    try:
        quantity = registry.Quantity(Decimal(form["number"]), form["unit"].replace(" ", ""))
        converted = quantity.to(unit).magnitude
    except pint.DimensionalityError:
        raise ValueError(f"{what}: {value!r} is not {words}; write e.g. {example}") from None
    except (pint.errors.UndefinedUnitError, pint.errors.DefinitionSyntaxError) as exc:
        raise ValueError(f"{what}: {value!r} has an unknown unit ({exc}); write e.g. {example}") from None
    try:
        number = float(converted)
    except (OverflowError, ValueError, InvalidOperation):
        number = math.nan
    if not math.isfinite(number) or number < 0:
        raise ValueError(f"{what}: {value!r} must be a finite, non-negative quantity")
    return number
