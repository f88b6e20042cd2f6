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

Every coefficient must lie in its plausible range (:data:`PLAUSIBLE`), so a unit slip (119.5 for
119.5 GB/s, 150 for 150 TFLOP/s, 10 for 10 us) is a one-line error naming the key and its unit, not
a simulated step of 197,019,447 s. The ranges, and why:

============  =============  ===========================================================================
quantity      range          reasoning
============  =============  ===========================================================================
FLOP/s        1e8 .. 1e17    one slow CPU core running the gloo tests reaches ~1e9-1e10; an H100 peaks
                             at ~1e15 (dense bf16) and a B200 at ~4.5e15 (fp8): 1e17 leaves 20x headroom
bytes/s       1e6 .. 1e13    gloo on loopback or a 1 GbE NIC moves >1e8; NVLink 5 is 1.8e12 per GPU:
                             1e13 leaves 5x headroom; a value in GB/s (119.5) falls far below 1e6
seconds       1e-8 .. 1      a collective's latency is ~1e-6 (NVLink) to ~1e-3 (gloo over TCP); 10 ns
                             is below any launch, a second is a unit slip (microseconds given as s)
tokens        1 .. 2**36     a length-table point is a sequence length; 2**36 is the longest length a
                             trace may hold (``nspsim.trace.base.MAX_LENGTH``)
============  =============  ===========================================================================

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

from nspsim.jsonfile import read_json
from nspsim.trace.base import MAX_LENGTH

FORMAT = "nspsim-profile"
VERSION = 1

_LENGTH_TABLES = ("attn_fwd_flops_by_length", "attn_bwd_flops_by_length")
_DEGREE_TABLES = ("alltoall_bw_by_degree", "p2p_bw_by_degree", "latency_s_by_degree")
_SCALARS = ("nonattn_flops", "allgather_bw")
_META = ("format", "version", "name", "source", "notes")


@dataclass(frozen=True, kw_only=True)
class Plausible:
    """The plausible range ``[low, high]`` of one kind of coefficient, its unit and an example of the
    unit written right (for the error message)."""

    unit: str
    low: float
    high: float
    example: str

    def __post_init__(self) -> None:
        if not 0 < self.low < self.high:
            raise ValueError(f"a plausible range needs 0 < low < high, got {self.low}..{self.high}")

    def check(self, value: float, what: str) -> None:
        """``ValueError`` naming ``what`` and the unit unless ``low <= value <= high``."""
        if not self.low <= value <= self.high:
            raise ValueError(
                f"{what} = {_num(value)} {self.unit} is outside the plausible range "
                f"{_num(self.low)}..{_num(self.high)} {self.unit}; give {self.example}"
            )


FLOPS = Plausible(unit="FLOP/s", low=1e8, high=1e17, example="FLOP per second, e.g. 1.5e14 for 150 TFLOP/s")
BANDWIDTH = Plausible(unit="B/s", low=1e6, high=1e13, example="bytes per second, e.g. 119.5e9 for 119.5 GB/s")
LATENCY = Plausible(unit="s", low=1e-8, high=1.0, example="seconds, e.g. 1e-5 for 10 us")
LENGTH = Plausible(unit="tokens", low=1.0, high=float(MAX_LENGTH), example="a sequence length in tokens, e.g. 8192")

PLAUSIBLE: Mapping[str, Plausible] = {
    "attn_fwd_flops_by_length": FLOPS,
    "attn_bwd_flops_by_length": FLOPS,
    "nonattn_flops": FLOPS,
    "allgather_bw": BANDWIDTH,
    "alltoall_bw_by_degree": BANDWIDTH,
    "p2p_bw_by_degree": BANDWIDTH,
    "latency_s_by_degree": LATENCY,
}
"""The range each profile key's values must lie in (module docstring: the reasons)."""
MAX_DEGREE = 2**20  # an SP degree is at most the GPU count; no cluster has a million GPUs


def _num(x: float) -> str:
    """A number as people write it: ``1e6``, ``1e-8``, ``1``, ``119.5``, ``6.872e10``."""
    text = f"{x:.4g}"
    mantissa, e, exponent = text.partition("e")
    return f"{mantissa}e{int(exponent)}" if e else text


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
        for length, value in zip(self.lengths, self.values, strict=True):
            LENGTH.check(length, "length")
            FLOPS.check(value, f"throughput at length {_num(length)}")

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

    def __post_init__(self) -> None:
        for key in _SCALARS:
            value = getattr(self, key)
            if value is not None:
                PLAUSIBLE[key].check(value, key)
        for key in _DEGREE_TABLES:
            for degree, value in getattr(self, key).items():
                PLAUSIBLE[key].check(value, f"{key}[{degree}]")

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
    try:
        return Profile(**kwargs)
    except ValueError as exc:
        raise ValueError(f"{origin}: {exc}") from None


def builtin_profile_names() -> tuple[str, ...]:
    """Profiles shipped in ``nspsim/profiles`` (usable by name wherever a profile path is accepted)."""
    folder = importlib.resources.files("nspsim") / "profiles"
    return tuple(sorted(p.name.removesuffix(".json") for p in folder.iterdir() if p.name.endswith(".json")))


def load_profile(path: str | Path) -> Profile:
    """Read and validate a profile file, or a built-in profile by name."""
    known = ", ".join(builtin_profile_names())
    if not str(path).strip():
        raise ValueError(f"cost profile: empty path; give a profile file or a built-in profile ({known})")
    if str(path) in builtin_profile_names():
        text = (importlib.resources.files("nspsim") / "profiles" / f"{path}.json").read_text()
        return parse_profile(json.loads(text), str(path))
    if not Path(path).exists():
        raise ValueError(f"cannot read profile {path}: No such file or directory (built-in profiles: {known})")
    data = read_json(path, "cost profile")  # names the file in every error (undecodable bytes too)
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a profile must be a JSON object")
    return parse_profile(data, str(path))


def _positive(value: Any, what: str) -> float:
    number = math.nan
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            number = float(value)
        except OverflowError:  # an integer beyond float range (10**400)
            number = math.inf
    if not math.isfinite(number) or number <= 0:
        raise ValueError(f"{what} must be a positive number, got {_cut(repr(value))}")
    return number


def _cut(text: str) -> str:
    return text if len(text) <= 40 else f"{text[:20]}... ({len(text)} characters)"


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
        text = str(key)
        if not (text.isascii() and text.isdecimal()) or len(text) > 7 or not 1 <= int(text) <= MAX_DEGREE:
            raise ValueError(f"{what}: degree {_cut(repr(key))} is not a positive integer <= {MAX_DEGREE:,} (2**20)")
        out[int(text)] = _positive(val, f"{what}[{key}]")
    return out
