"""Parsing and formatting of token counts and byte sizes used across the CLI and specs.

Token counts accept plain integers and binary suffixes: k = 1024, M = 1024**2, G = 1024**3
(``192k`` = 196,608; ``2M`` = 2,097,152). Suffixes are case-insensitive; decimals are allowed when
the result is a whole number (``1.5k`` = 1536).
"""

from __future__ import annotations

import re

_SUFFIX = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3}
_PATTERN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmg]?)\s*$", re.IGNORECASE)

KIB = 1024
GIB = 1024**3


def parse_tokens(text: str | int) -> int:
    """Parse a positive token count such as ``"65536"``, ``"192k"`` or ``"2M"``."""
    if isinstance(text, int):
        value = text
    else:
        match = _PATTERN.match(text)
        if match is None:
            raise ValueError(f"invalid token count {text!r} (use an integer with optional k/M suffix, e.g. 192k)")
        number, suffix = match.groups()
        exact = float(number) * _SUFFIX[suffix.lower()]
        if exact != int(exact):
            raise ValueError(f"token count {text!r} is not a whole number of tokens")
        value = int(exact)
    if value <= 0:
        raise ValueError(f"token count must be positive, got {text!r}")
    return value


def format_tokens(n: float) -> str:
    """Short human form: 347, 10.7K, 1.74M (binary units, as the CLI accepts)."""
    for unit, scale in (("M", 1024**2), ("K", 1024)):
        if abs(n) >= scale:
            return f"{n / scale:.3g}{unit}"
    return f"{n:.0f}"


def format_bytes(n: float) -> str:
    """Short human form in GiB / MiB / KiB."""
    for unit, scale in (("GiB", GIB), ("MiB", 1024**2), ("KiB", KIB)):
        if abs(n) >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n:.0f} B"


def format_seconds(s: float) -> str:
    """Seconds with a unit that keeps three significant digits (us, ms, s)."""
    if abs(s) < 1e-3:
        return f"{s * 1e6:.3g} us"
    if abs(s) < 1.0:
        return f"{s * 1e3:.3g} ms"
    return f"{s:.3g} s"
