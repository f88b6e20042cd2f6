"""``EmpiricalTrace``: a trace that is a fixed array of observed lengths (usually read from a file).

``sample`` draws uniformly with replacement. ``materialize`` repeats every length ``n // N`` times and
adds ``n % N`` lengths drawn without replacement, so a sample as large as the file reproduces the file
exactly. Trade-off: the trace never produces a length the file does not hold, and the whole array is
kept in memory (a read-only int64 copy).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from nspsim.trace.base import IntArray, LengthTrace, _check_count, _positive_ints, _seeded


@dataclass(frozen=True, kw_only=True, eq=False)
class EmpiricalTrace(LengthTrace):
    """A fixed array of lengths (usually read from a file). A read-only int64 copy is kept.
    Equality compares identity, not the lengths."""

    lengths: IntArray

    def __post_init__(self) -> None:
        super().__post_init__()
        arr = _positive_ints(self.lengths, f"trace {self.name!r}: lengths").copy()
        arr.flags.writeable = False
        object.__setattr__(self, "lengths", arr)

    def sample(self, n: int, rng: np.random.Generator) -> IntArray:
        """Uniform draws with replacement from the lengths."""
        _check_count(n, "n")
        return self.lengths[rng.integers(0, self.lengths.size, size=n)]

    def materialize(self, n: int | None = None, seed: int = 0) -> IntArray:
        """The lengths in file order when ``n`` is None. Otherwise ``n // N`` copies of every length,
        plus a random subset of ``n % N`` lengths drawn without replacement, shuffled."""
        if n is None:
            return self.lengths.copy()
        _check_count(n, "n")
        rng = _seeded(seed)
        reps, rest = divmod(n, self.lengths.size)
        extra = self.lengths[rng.choice(self.lengths.size, size=rest, replace=False)]
        return rng.permutation(np.concatenate([np.tile(self.lengths, reps), extra]))

    def share_at_most(self, length: int) -> float:
        """Fraction of the lengths that are ``<= length``."""
        return float(np.count_nonzero(self.lengths <= length)) / self.lengths.size

    @property
    def max_length(self) -> int:
        """The longest length in the array."""
        return int(self.lengths.max())
