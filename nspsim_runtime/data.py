"""Synthetic token data for a batch of lengths, delivered in the input layout (pure numpy).

The length traces hold lengths, not text, so the runtime trains on synthetic sequences with
learnable in-context structure: sample ``j`` is an arithmetic progression modulo the vocabulary
(random start and stride in 1..7) with 10% of tokens replaced by noise. Predicting the next token
needs the sample's own earlier tokens, so attention (and its per-sample boundaries) matters and the
loss falls as the model learns. Tokens depend only on ``(seed, batch index, lengths)``, so every rank
and the single-process reference see the same batch; each rank takes its input-layout slice, as a
sharded data loader would. Every token has a target (the sample carries one extra token).

A gradient-accumulation window (:mod:`nspsim.plan.window`) may route a sample in another pass than the
batch that drew it; :func:`pass_streams` gives every sample the tokens of its *source* batch and packs
each pass's samples in the order its plan lists them, so the window's tokens, and hence its gradient,
do not depend on the assignment (the per-step assignment gives back the source streams, bit for bit).
Trade-off: every source stream is generated in full and sliced, W times a batch's tokens of host
memory for a window, in exchange for tokens that follow the sample wherever it runs.
"""

from __future__ import annotations

from collections.abc import Sequence
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


def pass_streams(
    source_lengths: Sequence[Sequence[int]],
    assignment: Sequence[Sequence[int]],
    *,
    seed: int,
    first_index: int,
    vocab: int,
) -> list[TokenStream]:
    """Per pass of a window, the packed stream of its samples (module docstring): source ``k`` is batch
    ``first_index + k``; ``assignment[p]`` lists pass ``p``'s window-wide sample ids (the sources'
    samples concatenated in order)."""
    streams = [
        synthetic_stream(lengths, seed=seed, index=first_index + k, vocab=vocab)
        for k, lengths in enumerate(source_lengths)
    ]
    ids = np.concatenate([s.ids for s in streams])
    targets = np.concatenate([s.targets for s in streams])
    positions = np.concatenate([s.positions for s in streams])
    lengths = np.concatenate([np.asarray(x, dtype=np.int64) for x in source_lengths])
    starts = np.cumsum(lengths) - lengths
    out = []
    for samples in assignment:
        picked = np.asarray(samples, dtype=np.int64)
        rows = np.concatenate([np.arange(starts[i], starts[i] + lengths[i]) for i in picked]).astype(np.int64)
        out.append(TokenStream(ids=ids[rows], targets=targets[rows], positions=positions[rows]))
    return out
