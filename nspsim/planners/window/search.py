"""Local search over a window's assignment: move long samples between passes, judged by the step planner's
own estimates (the window candidate ``search``; :mod:`nspsim.planners.window.planner` runs it from the
best-estimated structured candidate).

Algorithm (hill climbing, deterministic for a given ``seed``): the window's :data:`LONG_SAMPLES` longest
samples are the movable ones. Each of ``moves`` steps draws two passes a != b and one movable sample x of
pass a; x moves to b, and when b lacks the room, randomly drawn short samples of b (not movable ones) move
back to a until b fits its budget; a move that would overfill a or empty a pass is skipped. Both passes are
routed again with the step planner, and the move is kept when the two passes' summed plan estimates
(:func:`~nspsim.planners.window.planner.plan_estimate`) drop. The other passes' plans are untouched, so
the window's estimate never rises and the result is never worse than the start by estimate.

Why long samples: per-step NSP's gap above the window floor (:mod:`nspsim.planners.window.gap`) is mostly
long samples routed on wider SP groups than memory needs (so they do not straggle) and the imbalance
around them; where a long sample lands decides both, while short samples only fill. Measured on
Qwen3-235B-A22B, 384K, W = 4 (benchmarks/results/window_bound.md): with 64 moves, the simulator judged
0.955 and 0.993 of per-step NSP's window time on two of four windows (per-step kept on the other two).

Trade-off: each move costs two routings by the step planner, so the search costs ``2 moves`` routings
per window, far above the planning budget of W step plans (64 moves on Qwen3-235B is ~130 NSP routings,
0.9-7 s on a loaded 2-core machine); it is therefore opt-in, a measure of what is left to gain rather
than a default.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import numpy.typing as npt

from nspsim.plan import Plan
from nspsim.plan.window import Assignment, pass_batches
from nspsim.trace.batching import Batch

LONG_SAMPLES = 24
"""How many of the window's longest samples may move (the ones behind the gap, module docstring): at
W = 4 on the Figure 7 traces, the samples above ~20K tokens of 1,500-2,500."""
DEFAULT_MOVES = 64
DEFAULT_SEED = 0

Route = Callable[[Batch], Plan]
Estimate = Callable[[Plan], float]


def local_search(
    sources: Sequence[Batch],
    start: Assignment,
    plans: Sequence[Plan],
    route: Route,
    estimate: Estimate,
    moves: int = DEFAULT_MOVES,
    seed: int = DEFAULT_SEED,
) -> tuple[Assignment, tuple[Plan, ...]]:
    """The assignment and per-pass plans after ``moves`` hill-climbing steps from ``start`` (whose pass
    plans are ``plans``), each pass routed by ``route`` and scored by ``estimate`` (module docstring)."""
    if moves < 0:
        raise ValueError(f"search moves must be at least 0, got {moves}")
    lengths = np.concatenate([b.lengths_array() for b in sources])
    budget = sources[0].tokens_per_batch
    passes = [list(ids) for ids in start]
    current = list(plans)
    scores = [estimate(p) for p in current]
    movable = set(np.argsort(-lengths, kind="stable")[:LONG_SAMPLES].tolist())
    rng = np.random.default_rng(seed)
    for _ in range(moves):
        proposal = _propose(rng, passes, lengths, movable, budget)
        if proposal is None:
            continue
        a, b, new_a, new_b = proposal
        trial = [list(ids) for ids in passes]
        trial[a], trial[b] = sorted(new_a), sorted(new_b)
        batches = pass_batches(sources, tuple(tuple(ids) for ids in trial))
        plan_a, plan_b = route(batches[a]), route(batches[b])
        score_a, score_b = estimate(plan_a), estimate(plan_b)
        if score_a + score_b < scores[a] + scores[b]:
            passes = trial
            current[a], current[b], scores[a], scores[b] = plan_a, plan_b, score_a, score_b
    return tuple(tuple(ids) for ids in passes), tuple(current)


def _propose(
    rng: np.random.Generator,
    passes: list[list[int]],
    lengths: npt.NDArray[np.int64],
    movable: set[int],
    budget: int,
) -> tuple[int, int, list[int], list[int]] | None:
    """One move (source pass, target pass, their new samples), or ``None`` when the draw cannot move."""
    a, b = (int(k) for k in rng.choice(len(passes), size=2, replace=False))
    candidates = [i for i in passes[a] if i in movable]
    if not candidates:
        return None
    x = int(rng.choice(candidates))
    need = int(lengths[x]) - (budget - int(lengths[passes[b]].sum()))
    back: list[int] = []
    if need > 0:
        pool = [i for i in passes[b] if i not in movable]
        rng.shuffle(pool)
        held = 0
        for i in pool:
            if held >= need:
                break
            back.append(i)
            held += int(lengths[i])
        if held < need:
            return None
    moved_back = set(back)
    new_a = [i for i in passes[a] if i != x] + back
    new_b = [i for i in passes[b] if i not in moved_back] + [x]
    if not new_a or int(lengths[new_a].sum()) > budget:
        return None
    return a, b, new_a, new_b
