"""Measured cost profiles: a JSON file whose coefficients override the analytic defaults.

Format (every coefficient optional; units are FLOP/s, bytes/s and seconds)::

    {
      "format": "nspsim-profile", "version": 1,
      "name": "flexsp-a100", "source": "where the numbers come from",
      "attn_fwd_flops_by_length": [[1024, 1.2e14], [8192, 1.9e14], [131072, 2.1e14]],
      "attn_bwd_flops_by_length": [[1024, 0.9e14], [131072, 1.6e14]],
      "nonattn_flops": 1.5e14,
      "alltoall_bw_by_degree": {"2": 119.5e9, "8": 96.5e9, "16": 10.3e9},
      "p2p_bw_by_degree": {"2": 150e9, "16": 20e9},
      "allgather_bw": 40e9,
      "latency_s_by_degree": {"2": 1e-5, "16": 3e-5}
    }

Throughput tables are interpolated linearly in log2(length) and clamped at the ends; bandwidth
tables are looked up by exact degree, with the nearest smaller profiled degree as fallback (a
degree below the smallest profiled one uses the smallest). Trade-off: a table per coefficient is
simple to measure and to read, but it cannot express interactions between coefficients.
"""

from __future__ import annotations

import importlib.resources
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from nspsim.jsonfile import parse_json

FORMAT = "nspsim-profile"
VERSION = 1

_LENGTH_TABLES = ("attn_fwd_flops_by_length", "attn_bwd_flops_by_length")
_DEGREE_TABLES = ("alltoall_bw_by_degree", "p2p_bw_by_degree", "latency_s_by_degree")
_SCALARS = ("nonattn_flops", "allgather_bw")
_META = ("format", "version", "name", "source", "notes")


@dataclass(frozen=True, kw_only=True)
class LengthTable:
    """Throughput as a function of sequence length, piecewise linear in log2(length)."""

    lengths: tuple[float, ...]
    values: tuple[float, ...]

    def __post_init__(self) -> None:
        if not self.lengths or len(self.lengths) != len(self.values):
            raise ValueError("a length table needs one value per length and at least one point")
        if any(b <= a for a, b in zip(self.lengths, self.lengths[1:])) or min(self.lengths) <= 0:
            raise ValueError("a length table's lengths must be positive and strictly increasing")
        if min(self.values) <= 0:
            raise ValueError("a length table's throughputs must be positive")

    def __call__(self, lengths: np.ndarray) -> np.ndarray:
        """Interpolated throughput for each length."""
        x = np.log2(np.maximum(np.asarray(lengths, dtype=np.float64), 1.0))
        return np.interp(x, np.log2(self.lengths), self.values)


@dataclass(frozen=True, kw_only=True)
class Profile:
    """Parsed profile. ``None`` / empty tables mean "use the analytic default"."""

    name: str = "analytic"
    source: str = ""
    attn_fwd_flops_by_length: LengthTable | None = None
    attn_bwd_flops_by_length: LengthTable | None = None
    nonattn_flops: float | None = None
    allgather_bw: float | None = None
    alltoall_bw_by_degree: Mapping[int, float] = field(default_factory=dict)
    p2p_bw_by_degree: Mapping[int, float] = field(default_factory=dict)
    latency_s_by_degree: Mapping[int, float] = field(default_factory=dict)

    @staticmethod
    def lookup(table: Mapping[int, float], degree: int) -> float | None:
        """Value for ``degree``: exact, else the nearest smaller profiled degree, else the smallest."""
        if not table:
            return None
        if degree in table:
            return table[degree]
        smaller = [d for d in table if d <= degree]
        return table[max(smaller) if smaller else min(table)]


def parse_profile(data: Mapping[str, Any], origin: str = "profile") -> Profile:
    """Validate a decoded JSON profile; ``ValueError`` naming the bad key otherwise."""
    if data.get("format") != FORMAT or data.get("version") != VERSION:
        raise ValueError(f'{origin}: not an nspsim profile (need "format": "{FORMAT}", "version": {VERSION})')
    unknown = set(data) - set(_LENGTH_TABLES) - set(_DEGREE_TABLES) - set(_SCALARS) - set(_META)
    if unknown:
        raise ValueError(f"{origin}: unknown profile keys {sorted(unknown)}")
    kwargs: dict[str, Any] = {"name": str(data.get("name", "profile")), "source": str(data.get("source", ""))}
    for key in _LENGTH_TABLES:
        if key in data:
            kwargs[key] = _length_table(data[key], f"{origin}: {key}")
    for key in _DEGREE_TABLES:
        if key in data:
            kwargs[key] = _degree_table(data[key], f"{origin}: {key}")
    for key in _SCALARS:
        if key in data:
            kwargs[key] = _positive(data[key], f"{origin}: {key}")
    return Profile(**kwargs)


def builtin_profile_names() -> tuple[str, ...]:
    """Profiles shipped in ``nspsim/profiles`` (usable by name wherever a profile path is accepted)."""
    folder = importlib.resources.files("nspsim") / "profiles"
    return tuple(sorted(p.name.removesuffix(".json") for p in folder.iterdir() if p.name.endswith(".json")))


def load_profile(path: str | Path) -> Profile:
    """Read and validate a profile file, or a built-in profile by name."""
    if str(path) in builtin_profile_names():
        text = (importlib.resources.files("nspsim") / "profiles" / f"{path}.json").read_text()
        return parse_profile(json.loads(text), str(path))
    try:
        text = Path(path).read_text()
    except OSError as exc:
        known = ", ".join(builtin_profile_names())
        raise ValueError(f"cannot read profile {path}: {exc.strerror} (built-in profiles: {known})") from None
    data = parse_json(text, where=str(path), what="cost profile")
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a profile must be a JSON object")
    return parse_profile(data, str(path))


def _positive(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{what} must be a positive number, got {value!r}")
    return float(value)


def _length_table(value: Any, what: str) -> LengthTable:
    if not isinstance(value, list) or not all(isinstance(p, list) and len(p) == 2 for p in value):
        raise ValueError(f"{what} must be a list of [length, value] pairs")
    try:
        return LengthTable(
            lengths=tuple(_positive(p[0], what) for p in value), values=tuple(_positive(p[1], what) for p in value)
        )
    except ValueError as exc:
        raise ValueError(f"{what}: {exc}") from None


def _degree_table(value: Any, what: str) -> dict[int, float]:
    if not isinstance(value, dict):
        raise ValueError(f"{what} must be an object mapping degree to value")
    out: dict[int, float] = {}
    for key, val in value.items():
        if not str(key).isdigit() or int(key) < 1:
            raise ValueError(f"{what}: degree {key!r} is not a positive integer")
        out[int(key)] = _positive(val, f"{what}[{key}]")
    return out
