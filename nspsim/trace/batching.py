"""Token-budget batches drawn from a length trace (docs/DESIGN.md: "Batch").

``BatchSampler.batch(index)`` builds batch ``index`` from its own generator,
``numpy.random.default_rng([seed, index])``. Any batch can therefore be rebuilt alone, in any order,
on any rank, with no state carried from earlier batches. The sampler draws lengths in blocks of
1024, 2048, 4096, ... up to 2**20 per block, a fixed schedule. It walks them in draw order:

* a length above ``max_context`` is dropped, and its count and tokens are recorded (the paper drops
  such samples; the simulator reports them);
* a kept length joins the batch while the running total stays within ``tokens_per_batch``; the first
  kept length that would overflow ends the batch and is not included.

The block schedule does not depend on the budget, so with the same seed, index and ``max_context``
a smaller budget gives a prefix of a larger budget's batch. Trade-off: drawing in blocks wastes
some draws after the stopping point (at most one block), in exchange for vectorised sampling.
``max_context <= tokens_per_batch`` guarantees progress. If the trace has no length within
``max_context``, the sampler raises at once; if kept lengths are merely too rare to fill a batch
within ``MAX_DRAWS_PER_BATCH`` draws, it raises instead of hanging.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import KW_ONLY, dataclass

import numpy as np
import numpy.typing as npt

from nspsim.trace import LengthTrace
from nspsim.trace.base import check_seed

DEFAULT_TOKENS_PER_BATCH = 2 * 1024**2
DEFAULT_MAX_CONTEXT = 192 * 1024
MAX_DRAWS_PER_BATCH = 1 << 24
MAX_TOKENS_PER_BATCH = 1 << 30
"""1G tokens, 512 times the paper's 2M: about a million samples of a typical trace, which takes the
planners and the simulator minutes; 10G would take hours and tens of GB, an apparent hang."""
_FIRST_BLOCK = 1 << 10
_LAST_BLOCK = 1 << 20


def _check_nonneg_int(value: object, what: str) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise ValueError(f"{what} must be a non-negative integer, got {value!r}")


def _check_pos_int(value: object, what: str) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
        raise ValueError(f"{what} must be a positive integer, got {value!r}")


@dataclass(frozen=True, kw_only=True)
class Batch:
    """One batch: ``lengths`` in draw order, plus what was dropped for exceeding ``max_context``.

    ``trace``, ``seed`` and ``index`` identify how the batch was drawn; ``trace`` is the trace's
    ``identity`` (its name for a built-in trace, ``x.txt@<content hash>`` for a file). ``fingerprint()``
    hashes the full content, so two ranks can check they hold the same batch.
    """

    lengths: tuple[int, ...]
    trace: str
    seed: int
    index: int
    tokens_per_batch: int
    max_context: int
    dropped_count: int = 0
    dropped_tokens: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "lengths", tuple(int(x) for x in self.lengths))
        _check_nonneg_int(self.seed, "batch seed")
        _check_nonneg_int(self.index, "batch index")
        _check_pos_int(self.tokens_per_batch, "tokens_per_batch")
        _check_pos_int(self.max_context, "max_context")
        if not self.lengths:
            raise ValueError(f"batch {self.index} of trace {self.trace!r} has no samples")
        if min(self.lengths) < 1 or max(self.lengths) > self.max_context:
            raise ValueError(
                f"batch {self.index}: every length must be in [1, max_context={self.max_context}], "
                f"got min {min(self.lengths)} max {max(self.lengths)}"
            )
        if self.total_tokens > self.tokens_per_batch:
            raise ValueError(
                f"batch {self.index}: {self.total_tokens} tokens exceed tokens_per_batch={self.tokens_per_batch}"
            )
        self._check_dropped()

    def _check_dropped(self) -> None:
        _check_nonneg_int(self.dropped_count, "dropped_count")
        _check_nonneg_int(self.dropped_tokens, "dropped_tokens")
        if self.dropped_tokens < self.dropped_count * (self.max_context + 1) or (
            self.dropped_count == 0 and self.dropped_tokens != 0
        ):
            raise ValueError(
                f"batch {self.index}: {self.dropped_count} dropped samples cannot hold "
                f"{self.dropped_tokens} tokens (each dropped sample exceeds "
                f"max_context={self.max_context})"
            )

    @property
    def num_samples(self) -> int:
        """Number of samples in the batch."""
        return len(self.lengths)

    @property
    def total_tokens(self) -> int:
        """Sum of the lengths."""
        return sum(self.lengths)

    @property
    def dropped_samples(self) -> int:
        """Samples drawn for this batch and dropped for exceeding ``max_context`` (``dropped_count``,
        under the name the CLI, the compare records and the runtime records report)."""
        return self.dropped_count

    @property
    def dropped_token_share(self) -> float:
        """Dropped tokens over every token drawn for the batch (kept plus dropped), in [0, 1)."""
        return self.dropped_tokens / (self.total_tokens + self.dropped_tokens)

    def lengths_array(self) -> npt.NDArray[np.int64]:
        """The lengths as a new int64 array (draw order)."""
        return np.asarray(self.lengths, dtype=np.int64)

    def fingerprint(self) -> str:
        """First 16 hex digits of the SHA-256 of the canonical JSON of every field."""
        canonical = json.dumps(
            {
                "lengths": self.lengths,
                "trace": self.trace,
                "seed": self.seed,
                "index": self.index,
                "tokens_per_batch": self.tokens_per_batch,
                "max_context": self.max_context,
                "dropped_count": self.dropped_count,
                "dropped_tokens": self.dropped_tokens,
            },
            sort_keys=True,
            separators=(",", ":"),
        )
        return hashlib.sha256(canonical.encode("ascii")).hexdigest()[:16]


@dataclass(frozen=True)
class BatchSampler:
    """Deterministic, random-access batches of at most ``tokens_per_batch`` tokens from ``trace``."""

    trace: LengthTrace
    _: KW_ONLY
    tokens_per_batch: int = DEFAULT_TOKENS_PER_BATCH
    max_context: int = DEFAULT_MAX_CONTEXT
    seed: int = 0

    def __post_init__(self) -> None:
        _check_pos_int(self.tokens_per_batch, "tokens_per_batch")
        _check_pos_int(self.max_context, "max_context")
        check_seed(self.seed)
        if self.tokens_per_batch > MAX_TOKENS_PER_BATCH:
            raise ValueError(
                f"tokens_per_batch={self.tokens_per_batch} is over the limit of 1G "
                f"({MAX_TOKENS_PER_BATCH:,}) tokens per batch: planning a batch that large would take "
                "hours; use more batches instead"
            )
        if self.max_context > self.tokens_per_batch:
            raise ValueError(
                f"max_context ({self.max_context}) must be <= tokens_per_batch ({self.tokens_per_batch}): "
                "a sample longer than the batch budget could never be placed"
            )
        if self.trace.share_at_most(self.max_context) <= 0.0:
            raise ValueError(
                f"trace {self.trace.name!r} has no length <= max_context={self.max_context}; "
                "raise max_context or pick another trace"
            )

    def batch(self, index: int) -> Batch:
        """Batch ``index`` (>= 0), drawn from ``default_rng([seed, index])``; see the module docstring."""
        _check_nonneg_int(index, "batch index")
        rng = np.random.default_rng([self.seed, int(index)])
        kept: list[npt.NDArray[np.int64]] = []
        total = dropped = dropped_tokens = drawn = 0
        block = _FIRST_BLOCK
        while drawn < MAX_DRAWS_PER_BATCH:
            draws = self.trace.sample(block, rng)
            drawn += block
            take, stop = self._fill(draws, self.tokens_per_batch - total)
            fits = draws[:stop] <= self.max_context
            kept.append(take)
            total += int(take.sum())
            dropped += int(stop - np.count_nonzero(fits))
            dropped_tokens += int(draws[:stop][~fits].sum())
            if stop < block:
                return self._make(index, np.concatenate(kept), dropped, dropped_tokens)
            block = min(2 * block, _LAST_BLOCK)
        raise ValueError(
            f"batch {index}: {drawn} draws from trace {self.trace.name!r} did not fill "
            f"tokens_per_batch={self.tokens_per_batch} with lengths <= max_context={self.max_context} "
            f"(only {total} tokens kept); lower tokens_per_batch or raise max_context"
        )

    def _fill(self, draws: npt.NDArray[np.int64], room: int) -> tuple[npt.NDArray[np.int64], int]:
        """Kept lengths that fit in ``room`` tokens, and the draw position where the batch stops
        (``len(draws)`` if it does not stop inside this block)."""
        where = np.flatnonzero(draws <= self.max_context)
        running = np.cumsum(draws[where])
        fit = int(np.searchsorted(running, room, side="right"))
        stop = int(where[fit]) if fit < where.size else draws.size
        return draws[where[:fit]], stop

    def _make(self, index: int, lengths: npt.NDArray[np.int64], dropped: int, dropped_tokens: int) -> Batch:
        return Batch(
            lengths=tuple(lengths.tolist()),
            trace=self.trace.identity,
            seed=self.seed,
            index=int(index),
            tokens_per_batch=self.tokens_per_batch,
            max_context=self.max_context,
            dropped_count=dropped,
            dropped_tokens=dropped_tokens,
        )

    def batches(self, start: int = 0, count: int = 1) -> Iterator[Batch]:
        """Batches ``start, start + 1, ..., start + count - 1``, built lazily."""
        _check_nonneg_int(start, "start")
        _check_nonneg_int(count, "count")
        return (self.batch(i) for i in range(start, start + count))
