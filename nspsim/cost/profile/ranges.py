"""Plausible ranges of profile coefficients, so a unit slip is a one-line error naming the key.

A value in GB/s where bytes/s are expected (119.5 for 119.5e9), TFLOP/s for FLOP/s, or microseconds
for seconds would otherwise become a simulated step of millions of seconds. The ranges, and why:

============  =============  ===========================================================================
quantity      range          reasoning
============  =============  ===========================================================================
FLOP/s        1e6 .. 1e17    one busy CPU thread sharing a core with gloo reaches ~1e8-1e10 (a 2-head,
                             64-token attention call runs at ~1e7); an H100 peaks at ~1e15 (dense bf16)
                             and a B200 at ~4.5e15 (fp8): 1e17 leaves 20x headroom
bytes/s       1e6 .. 1e13    gloo on loopback or a 1 GbE NIC moves >1e8; NVLink 5 is 1.8e12 per GPU:
                             1e13 leaves 5x headroom; a value in GB/s (119.5) falls far below 1e6
seconds       1e-8 .. 1      a collective's latency is ~1e-6 (NVLink) to ~1e-3 (gloo over TCP); 10 ns
              (latencies)    is below any launch, a second is a unit slip (microseconds given as s)
seconds       0 .. 1e3       a measured kernel or layer time; 0 is allowed for a fitted intercept
              (times)
tokens        1 .. 2**36     a table point is a sequence length or a token count; 2**36 is the longest
                             length a trace may hold (``nspsim.trace.base.MAX_LENGTH``)
slowdown      1 .. 10        compute slowed by concurrent communication; below 1 is a speed-up (a
                             measurement error), above 10 a broken measurement
cores         0.5 .. 4096    kernels a CPU host runs at full speed at once (fitted, so fractional);
                             the largest CPU hosts have a few hundred cores
============  =============  ===========================================================================
"""

from __future__ import annotations

from dataclasses import dataclass

from nspsim.trace.base import MAX_LENGTH


def format_number(x: float) -> str:
    """A number as people write it: ``1e6``, ``1e-8``, ``1``, ``119.5``, ``6.872e10``."""
    text = f"{x:.4g}"
    mantissa, e, exponent = text.partition("e")
    return f"{mantissa}e{int(exponent)}" if e else text


@dataclass(frozen=True, kw_only=True)
class Plausible:
    """The plausible range ``[low, high]`` of one kind of coefficient, its unit and an example of the
    unit written right (for the error message)."""

    unit: str
    low: float
    high: float
    example: str

    def __post_init__(self) -> None:
        if not 0 <= self.low < self.high:
            raise ValueError(f"a plausible range needs 0 <= low < high, got {self.low}..{self.high}")

    def check(self, value: float, what: str) -> None:
        """``ValueError`` naming ``what`` and the unit unless ``low <= value <= high``."""
        if not self.low <= value <= self.high:
            raise ValueError(
                f"{what} = {format_number(value)} {self.unit} is outside the plausible range "
                f"{format_number(self.low)}..{format_number(self.high)} {self.unit}; give {self.example}"
            )


FLOPS = Plausible(unit="FLOP/s", low=1e6, high=1e17, example="FLOP per second, e.g. 1.5e14 for 150 TFLOP/s")
BANDWIDTH = Plausible(unit="B/s", low=1e6, high=1e13, example="bytes per second, e.g. 119.5e9 for 119.5 GB/s")
LATENCY = Plausible(unit="s", low=1e-8, high=1.0, example="seconds, e.g. 1e-5 for 10 us")
DURATION = Plausible(unit="s", low=0.0, high=1e3, example="seconds, e.g. 2.5e-4 for 250 us")
LENGTH = Plausible(unit="tokens", low=1.0, high=float(MAX_LENGTH), example="a token count, e.g. 8192")
CORES = Plausible(unit="cores", low=0.5, high=4096.0, example="the cores a host's ranks share, e.g. 2")
SLOWDOWN = Plausible(unit="x", low=1.0, high=10.0, example="a factor >= 1, e.g. 1.15 for 15% slower")
