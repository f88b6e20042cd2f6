"""Memory feasibility of a batch: every sample must fit some admissible SP group under B_tok.

A sample of length L on a node of degree d puts L/d sharded tokens on each GPU of the node, so it
fits only on degrees d >= L / B_tok. If even the largest admissible degree (spmax) is too small, no
plan exists; the error names the sample (batch index and length) and the limit, and says what to
change. The same check covers a token budget smaller than every sample's shard.
"""

from __future__ import annotations

import numpy as np

from nspsim.planners.proxy import CostTable
from nspsim.trace.batching import Batch


def check_feasible(table: CostTable, batch: Batch, spmax: int) -> None:
    """Raise ``ValueError`` naming the longest sample that fits no admissible group."""
    longest = int(table.lengths[0])
    if longest <= spmax * table.token_budget:
        return
    index = int(table.order[0])
    too_long = int(np.count_nonzero(table.lengths > spmax * table.token_budget))
    raise ValueError(
        f"sample {index} of batch {batch.index} (length {longest}) fits no admissible SP group: at the "
        f"largest degree spmax={spmax} its shard is {-(-longest // spmax)} tokens per GPU, over the token "
        f"budget B_tok={table.token_budget} ({too_long} sample(s) too long); raise the token budget, "
        "lower --max-context or use more GPUs / a larger spmax"
    )


def min_fitting_degree(length: int, token_budget: int, levels: tuple[int, ...]) -> int:
    """Smallest degree in ``levels`` that holds ``length`` within the budget, 0 if none does."""
    fitting = [d for d in levels if length <= d * token_budget]
    return min(fitting) if fitting else 0
