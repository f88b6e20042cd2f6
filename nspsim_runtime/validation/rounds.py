"""The order in which a validation runs its cases' steps: rounds of blocks, shuffled with a seed.

A case of ``steps`` steps is cut into blocks: first its :data:`~nspsim_runtime.validation.cases.WARMUP_STEPS`
warm-up steps (left out of the statistics), then blocks of ``block_steps`` steps (the last one may be
shorter). Round ``r`` holds block ``r`` of every case that has one, in an order drawn from
``random.Random(seed)`` anew for each round. So every case sees the same stretch of the run: a
machine that slows down over minutes slows every strategy's blocks alike, instead of pricing the
last cases of the suite at a speed the first ones never saw; and no case always runs right after the
same neighbour.

Pure (no torch): the worker (:mod:`nspsim_runtime.validation.worker`) executes the schedule, the
validator writes it to ``validation.json``. Trade-off: one-step blocks follow the drift most closely
and cost nothing more here (the cases' processes stay alive between blocks), but a step that runs
right after another case's step may find colder caches than it would after its own; a larger
``--block-steps`` trades the first for the second.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Block:
    """Steps ``first`` to ``first + count - 1`` of case number ``case``; ``warmup`` for the warm-up block."""

    case: int
    first: int
    count: int
    warmup: bool = False

    def to_list(self) -> list[int]:
        """``[case, first, count]`` (JSON)."""
        return [self.case, self.first, self.count]


def case_blocks(steps: int, block_steps: int, warmup: int) -> list[tuple[int, int]]:
    """``(first, count)`` of each block of a case of ``steps`` steps (module docstring)."""
    if block_steps < 1:
        raise ValueError(f"--block-steps must be at least 1, got {block_steps}")
    out = [(0, min(warmup, steps))] if warmup > 0 else []
    first = min(warmup, steps)
    while first < steps:
        count = min(block_steps, steps - first)
        out.append((first, count))
        first += count
    return out


def schedule(steps: Sequence[int], *, block_steps: int, warmup: int, seed: int) -> list[list[Block]]:
    """The rounds of cases with ``steps[i]`` steps each: round ``r`` holds block ``r`` of every case
    that has one, shuffled by ``random.Random(seed)`` (one draw per round, in round order)."""
    rng = random.Random(seed)
    blocks = [case_blocks(n, block_steps, warmup) for n in steps]
    rounds: list[list[Block]] = []
    for r in range(max((len(b) for b in blocks), default=0)):
        members = [
            Block(case=i, first=b[r][0], count=b[r][1], warmup=warmup > 0 and r == 0)
            for i, b in enumerate(blocks)
            if r < len(b)
        ]
        rng.shuffle(members)
        rounds.append(members)
    return rounds
