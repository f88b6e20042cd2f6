"""Names shared by simulated and measured step records, so the two can be joined.

The simulator's ``StepResult`` and the runtime's JSONL step records both report a step-time
breakdown under exactly these keys (seconds, of the critical GPU: the one every other GPU waits for,
i.e. the least ``comm_wait`` once all are counted to the step's end; both also keep every GPU's),
following the NSP paper's Figure 8
categories, with the expert-parallel all-to-all on its own (``ep_exposed_comm``; before, it was filed
under ``other`` beside the optimizer step: on Qwen3-235B-A22B, 64 H200, ``paper-235b`` (EP 8), two
wikipedia batches, it is 9.0% of static-best's step and 13.5% of NSP's, the optimizer and the rest
8.6% and 9.3%). A record
written before that category existed has no ``ep_exposed_comm`` key: readers take it as 0 (the time
is in ``other``), see :func:`with_all_categories`.
"""

from __future__ import annotations

BREAKDOWN_CATEGORIES: tuple[str, ...] = (
    "attn_fwd",  # attention-core forward compute
    "attn_remat",  # attention recomputed in backward (compute and its SP communication)
    "attn_bwd",  # attention-core backward compute
    "non_attn",  # projections, FFN/MoE, output head (compute)
    "sp_exposed_comm",  # SP collectives (Ulysses all-to-all, ring, layout change) not hidden by compute
    "fsdp_exposed_comm",  # FSDP all-gather / reduce-scatter not hidden by compute
    "ep_exposed_comm",  # expert-parallel (MoE) all-to-all, dispatch and combine: blocking, so all exposed
    "comm_wait",  # waiting for peers to reach a collective (imbalance)
    "other",  # optimizer step, micro-batch set-up, everything else
)

BREAKDOWN_SHORT: dict[str, str] = {
    "attn_fwd": "afwd",
    "attn_remat": "remat",
    "attn_bwd": "abwd",
    "non_attn": "nonat",
    "sp_exposed_comm": "sp",
    "fsdp_exposed_comm": "fsdp",
    "ep_exposed_comm": "ep",
    "comm_wait": "wait",
    "other": "other",
}
"""Column labels (at most 5 characters) of the categories in text tables."""


def with_all_categories(breakdown: dict[str, float]) -> dict[str, float]:
    """``breakdown`` in category order with ``ep_exposed_comm`` in its place: a record written before
    the category existed gets it as 0.0 (its expert all-to-all is in ``other``). A category missing
    otherwise stays missing, for the reader to report."""
    if "ep_exposed_comm" in breakdown:
        return breakdown
    filled = {**breakdown, "ep_exposed_comm": 0.0}
    return {k: filled[k] for k in BREAKDOWN_CATEGORIES if k in filled}
