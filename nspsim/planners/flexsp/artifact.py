"""The FlexSP artifact's own rules, for ``flexsp``'s ``variant="artifact"`` (docs/planners.md "FlexSP").

The artifact is PKU-DAIR/Hetu-Galvatron, branch ``flexsp`` (commit b466689),
``galvatron/flexsp_solver/solver.py`` with its C++ ``sequence_module``. Where it differs from nspsim's
default FlexSP, in the artifact's order of work:

1. **Counts tried** (``get_min_valid_microbatch_num``, ``solve_flexSP_globalbatch_mp_gbmb``): start at
   the smallest count whose every chunk holds strictly fewer than P * B_tok tokens
   (:func:`~nspsim.planners.microbatch.artifact_first_count`) and try a fixed number of consecutive
   counts from there (``mb_option_num``: 5 in the solver's main, 4 in its training path), with no
   cap on the count; a count is feasible only if every micro-batch's MILP is; the feasible count with
   the smallest *sum of MILP makespans* wins (ties here: the smaller count; the artifact's ties follow
   process completion order). If none is feasible the artifact returns no plan, and so does this.
2. **Chunks**: :func:`~nspsim.planners.microbatch.blaster_split_artifact` (its DP's tie rule).
3. **Buckets**: :func:`~nspsim.planners.flexsp.bucketing.bucketize_artifact` (+1 bucket while the padded
   total exceeds (tokens + P * B_tok) / 2).
4. **Slots** (``get_sp_options_prune``): s_max is the largest minimum SP size (the power of two at or
   above L / B_tok) among the micro-batch's sequences and c_max how many sequences need it; sizes
   below s_max get at most (P - s_max * c_max) / s slots, so c_max groups of s_max always fit and
   smaller groups never crowd them out. This can cut off the optimum: a mix with fewer large groups
   and more small ones is not offered.

What stays ours in both variants: the MILP's GPU row ``<= P`` (the artifact's ``= P``), the static
packing given to the solver as its incumbent, sizes up to spmax of the SP tree (the artifact's up to P),
the cost model, and candidate bucket boundaries from at most 384 distinct lengths (a chunk with more
whose rule needs more buckets than that gets one bucket per length).
"""

from __future__ import annotations

import numpy as np

from nspsim.planners.base import IntArray

VARIANTS = ("nspsim", "artifact")
"""``flexsp`` variants: ``nspsim`` (default: per-count step estimates with FSDP, 5% padding buckets, every
slot; stronger on Qwen3-30B, 3.7-5.8% slower on memory-bound Qwen3-235B, docs/simulator.md) and
``artifact`` (the artifact's rules above)."""


def min_sp_size(lengths: IntArray, token_budget: float) -> IntArray:
    """Per sequence, the artifact's minimum SP size: the power of two at or above L / B_tok (1 if it fits one GPU)."""
    need = np.maximum(np.ceil(lengths / token_budget), 1.0)
    return (2 ** np.ceil(np.log2(need))).astype(np.int64)


def slot_limits(lengths: IntArray, sizes: tuple[int, ...], num_gpus: int, token_budget: float) -> dict[int, int]:
    """The artifact's slot pruning (module doc, item 4): at most (P - s_max c_max) / s slots of each
    size s below s_max; sizes from s_max up keep P / s."""
    need = min_sp_size(lengths, token_budget)
    s_max = int(need.max())
    c_max = int(np.count_nonzero(need == s_max))
    spare = max(0, num_gpus - s_max * c_max)
    return {s: spare // s for s in sizes if s < s_max}
