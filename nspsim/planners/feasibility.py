"""Memory feasibility of a batch: every sample must fit some admissible SP group under B_tok.

A sample of length L on a node of degree d puts L/d sharded tokens on each GPU of the node, so it
fits only on degrees d >= L / B_tok. If even the largest admissible degree (spmax) is too small, no
plan exists; the error names the sample (batch index and length) and the limit, and says what to
change, naming only flags that can help on this workload: ``--max-context`` always; ``--spmax`` only
below the admissible maximum; another ``--backend`` or more GPUs only where they raise that maximum;
``--token-budget`` only when an override is below what the memory model fits. The same check covers
a token budget smaller than every sample's shard.
"""

from __future__ import annotations

import numpy as np

from nspsim.cost.backends import backend_cost
from nspsim.planners.proxy import CostTable
from nspsim.specs.backend import BACKENDS
from nspsim.trace.batching import Batch
from nspsim.units import format_tokens
from nspsim.workload import Workload


def check_feasible(table: CostTable, batch: Batch, workload: Workload) -> None:
    """Raise ``ValueError`` naming the longest sample that fits no admissible group."""
    spmax = workload.tree.spmax
    longest = int(table.lengths[0])
    if longest <= spmax * table.token_budget:
        return
    index = int(table.order[0])
    too_long = int(np.count_nonzero(table.lengths > spmax * table.token_budget))
    raise ValueError(
        f"sample {index} of batch {batch.index} (length {longest}) fits no admissible SP group: at the "
        f"largest degree spmax={spmax} its shard is {-(-longest // spmax)} tokens per GPU, over the token "
        f"budget B_tok={table.token_budget} ({too_long} sample(s) too long); {_advice(workload, longest)}"
    )


def _advice(workload: Workload, longest: int) -> str:
    """The changes that would let a sample of ``longest`` tokens fit (module doc)."""
    model, gpus, spmax = workload.model, workload.tree.num_gpus, workload.tree.spmax
    backend = workload.config.backend
    limit = backend_cost(backend).max_degree(model, gpus)
    options = [f"lower --max-context (now {format_tokens(workload.sampler.max_context)})"]
    if spmax < limit:
        options.append(f"raise --spmax (up to {limit})")
    else:
        options += [
            f"use --backend {other} (degrees up to {wider})"
            for other in BACKENDS
            if other != backend and (wider := backend_cost(other).max_degree(model, gpus)) > spmax
        ]
        if backend_cost(backend).max_degree(model, 2 * gpus) > limit:
            options.append("use more GPUs (--gpus) for a larger spmax")
    override, fits = workload.config.token_budget, workload.memory.derived_token_budget
    if override is not None and override < fits:
        options.append(f"raise --token-budget (the memory model fits {fits})")
    return ", ".join(options[:-1]) + (" or " if len(options) > 1 else "") + options[-1]


def min_fitting_degree(length: int, token_budget: int, levels: tuple[int, ...]) -> int:
    """Smallest degree in ``levels`` that holds ``length`` within the budget, 0 if none does."""
    fitting = [d for d in levels if length <= d * token_budget]
    return min(fitting) if fitting else 0
