"""Synthetic token data for a batch of lengths, delivered in the input layout (pure numpy).

The length traces hold lengths, not text, so the runtime trains on synthetic sequences with
learnable in-context structure: sample ``j`` is an arithmetic progression modulo the vocabulary
(random start and stride in 1..7) with 10% of tokens replaced by noise. Predicting the next token
needs the sample's own earlier tokens, so attention (and its per-sample boundaries) matters and the
loss falls as the model learns. Tokens depend only on ``(seed, batch index, lengths)``, so every rank
and the single-process reference see the same batch; each rank takes its input-layout slice, as a
sharded data loader would. Every token has a target (the sample carries one extra token).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from nspsim.execution.shards import input_bounds

NOISE = 0.1
MAX_STRIDE = 7


@dataclass(frozen=True, kw_only=True)
class TokenStream:
    """Token ids, next-token targets and per-sample positions of a packed batch."""

    ids: npt.NDArray[np.int64]
    targets: npt.NDArray[np.int64]
    positions: npt.NDArray[np.int64]

    def slice(self, lo: int, hi: int) -> TokenStream:
        """Rows ``[lo, hi)``."""
        return TokenStream(ids=self.ids[lo:hi], targets=self.targets[lo:hi], positions=self.positions[lo:hi])


def synthetic_stream(lengths: npt.ArrayLike, *, seed: int, index: int, vocab: int) -> TokenStream:
    """The packed token stream of a batch (see the module docstring)."""
    lengths = np.asarray(lengths, dtype=np.int64)
    rng = np.random.default_rng([seed, index, 0x5EED])
    start = rng.integers(0, vocab, size=lengths.size)
    stride = rng.integers(1, MAX_STRIDE + 1, size=lengths.size)
    full = lengths + 1
    sample = np.repeat(np.arange(lengths.size), full)
    pos = np.arange(int(full.sum())) - np.repeat(np.cumsum(full) - full, full)
    tokens = (start[sample] + stride[sample] * pos) % vocab
    noisy = rng.random(tokens.size) < NOISE
    tokens[noisy] = rng.integers(0, vocab, size=int(noisy.sum()))
    last = np.cumsum(full) - 1
    keep = np.ones(tokens.size, dtype=bool)
    keep[last] = False
    first = np.cumsum(full) - full
    is_target = np.ones(tokens.size, dtype=bool)
    is_target[first] = False
    return TokenStream(
        ids=tokens[keep].astype(np.int64),
        targets=tokens[is_target].astype(np.int64),
        positions=pos[keep].astype(np.int64),
    )


def rank_input(stream: TokenStream, rank: int, world: int) -> TokenStream:
    """The input-layout slice of ``rank``."""
    bounds = input_bounds(int(stream.ids.size), world)
    return stream.slice(int(bounds[rank]), int(bounds[rank + 1]))
