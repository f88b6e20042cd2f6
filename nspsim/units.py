"""Parsing and formatting of token counts and byte sizes used across the CLI and specs.

Token counts accept plain integers and binary suffixes: k = 1024, M = 1024**2, G = 1024**3
(``192k`` = 196,608; ``2M`` = 2,097,152). Suffixes are case-insensitive; decimals are allowed when
the result is a whole number (``1.5k`` = 1536).
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

_SUFFIX = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3}
_PATTERN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmg]?)\s*$", re.IGNORECASE)

KIB = 1024
GIB = 1024**3

MAX_TOKENS = 2**53
"""The largest token count accepted anywhere (flags, configs): token counts meet floats in the cost and
memory models (``token_budget * (1 + slack)``, tokens times bytes per token), and above 2**53 a float
no longer holds every integer, so a larger count would silently change. It is still 8 million times
the 1G-token batch limit, so no real count comes near it."""
_MAX_DIGITS = 30  # more digits before the point than 2**53 * 2**30 has: surely too large


def parse_tokens(text: str | int) -> int:
    """Parse a positive token count such as ``"65536"``, ``"192k"`` or ``"2M"``, exactly (no float on
    the way: ``99999999999999999999`` is not rounded to 1e20), and at most :data:`MAX_TOKENS`."""
    if isinstance(text, int):
        value = text
    else:
        match = _PATTERN.match(text)
        if match is None:
            raise ValueError(f"invalid token count {_shown(text)} (use an integer with optional k/M suffix, e.g. 192k)")
        number, suffix = match.groups()
        whole, _, fraction = number.partition(".")
        fraction = fraction.rstrip("0")
        if len(whole.lstrip("0")) > _MAX_DIGITS:  # refused before any conversion: 400 digits stay text
            raise ValueError(f"token count {_shown(text)} is above the limit of {MAX_TOKENS:,} (2**53) tokens")
        # m / 2**30 has at most 30 decimals, so a longer fraction is never whole under any suffix
        if len(fraction) > _MAX_DIGITS:
            raise ValueError(f"token count {_shown(text)} is not a whole number of tokens")
        scale = 10 ** len(fraction)
        exact = Fraction(int(whole.lstrip("0") or "0") * scale + int(fraction or "0"), scale) * _SUFFIX[suffix.lower()]
        if exact.denominator != 1:
            raise ValueError(f"token count {_shown(text)} is not a whole number of tokens")
        value = int(exact)
    if value <= 0:
        raise ValueError(f"token count must be positive, got {_shown(str(text))}")
    if value > MAX_TOKENS:
        raise ValueError(f"token count {_shown(str(text))} is above the limit of {MAX_TOKENS:,} (2**53) tokens")
    return value


def _shown(text: str) -> str:
    """``text`` quoted for a message, cut to a readable length (a 400-digit flag stays one short line)."""
    return repr(text) if len(text) <= 40 else f"{text[:20]!r}... ({len(text)} characters)"


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
    """Seconds to three significant digits in the unit that puts them in [1, 1000): ``312 us``,
    ``45.6 ms``, ``1.23 s`` (seconds are never scaled up: ``1230 s``; below a microsecond, ``ns``)."""
    if not math.isfinite(s) or s == 0:
        return f"{s:g} s"
    units = (("s", 1.0), ("ms", 1e-3), ("us", 1e-6), ("ns", 1e-9))
    k = next((i for i, (_, scale) in enumerate(units) if abs(s) >= scale), len(units) - 1)
    value = float(f"{s / units[k][1]:.3g}")  # rounded: 999.96 ms becomes 1000 ms, then 1.00 s
    if abs(value) >= 1000 and k > 0:
        k, value = k - 1, value / 1000
    digits = max(0, 2 - math.floor(math.log10(abs(value))))
    return f"{value:.{digits}f} {units[k][0]}"
