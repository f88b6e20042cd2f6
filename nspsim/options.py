"""Typed ``key=value`` options and numeric command-line values: one parser for every entry point.

Planner options arrive as text from ``nspsim plan --option``, ``nspsim compare --planners
name:key=value+...`` and ``nspsim_runtime.train --planner-option``; all of them go through
:func:`parse_option`, so one spelling means one value everywhere. Value rules, in order:

* ``true`` / ``false`` (any case) -> ``bool``;
* an integer literal (``8``, ``-1``, ``1_000``) -> ``int``;
* a decimal number (``0.5``, ``1e-3``) -> ``float``; ``nan`` and ``inf`` are refused (no option
  means "not a number" and a non-finite limit would silently disable a check);
* anything else -> the text itself (``auto``, ``attn-fwd``, ``highs``). Planners validate types
  and ranges of their own options.

Surrounding blanks are stripped; an empty key or value is an error. Trade-off: no lists or ``None``
(JSON would allow them) because no option takes them, and a value that looks numeric can never be a
string. The argparse types :func:`positive_float` and :func:`non_negative_float` refuse ``nan``
and ``inf``, which ``float`` accepts.
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Iterable

OptionValue = bool | int | float | str
_INTEGER = re.compile(r"[+-]?\d[\d_]*")


def parse_value(text: str) -> OptionValue:
    """The typed value of ``text`` (see the module docstring); ``ValueError`` for nan/inf or empty text."""
    value = text.strip()
    if not value:
        raise ValueError("an option value must not be empty")
    if value.lower() in ("true", "false"):
        return value.lower() == "true"
    try:
        return int(value)
    except ValueError:
        if _INTEGER.fullmatch(value):  # an integer literal beyond int()'s 4300-digit limit
            raise ValueError(f"integer option value with {len(value):,} characters is too large") from None
    try:
        number = float(value)
    except ValueError:
        return value
    if not math.isfinite(number):
        raise ValueError(f"option value {_shown(value)} is not a finite number")
    return number


def _shown(text: str) -> str:
    """``text`` quoted for a message, cut to a readable length (a 5000-digit value stays one short line)."""
    return repr(text) if len(text) <= 40 else f"{text[:20]!r}... ({len(text):,} characters)"


def parse_option(text: str) -> tuple[str, OptionValue]:
    """``KEY=VALUE`` as ``(key, typed value)``; ``ValueError`` with a one-line hint otherwise."""
    key, sep, raw = text.partition("=")
    if not sep or not key.strip() or not raw.strip():
        raise ValueError(f"option {_shown(text)} must look like KEY=VALUE, e.g. beam_width=8")
    try:
        return key.strip(), parse_value(raw)
    except ValueError as exc:
        raise ValueError(f"option {_shown(text)}: {exc}") from None


def parse_options(items: Iterable[str]) -> dict[str, OptionValue]:
    """Several ``KEY=VALUE`` items as a dict; a key given twice is an error."""
    out: dict[str, OptionValue] = {}
    for item in items:
        key, value = parse_option(item)
        if key in out:
            raise ValueError(f"option {key!r} is given twice")
        out[key] = value
    return out


def _finite_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
    return value


def positive_float(text: str) -> float:
    """argparse type: a finite number > 0."""
    value = _finite_float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text!r}")
    return value


def non_negative_float(text: str) -> float:
    """argparse type: a finite number >= 0."""
    value = _finite_float(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text!r}")
    return value


def fraction(text: str) -> float:
    """argparse type for a ``--max-mape`` (``nspsim validate``, ``nspsim_runtime.validate``): a fraction (0.1) or
    a percentage (10%), positive and finite."""
    raw = text.strip()
    try:
        value = float(raw[:-1]) / 100 if raw.endswith("%") else float(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a fraction such as 0.1 or a percentage such as 10%, got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive finite number, got {text!r}")
    if value > 1 and not raw.endswith("%"):
        raise argparse.ArgumentTypeError(
            f"a fraction is at most 1 (0.1 is 10%; write {raw}% for a percentage), got {text!r}"
        )
    return value
