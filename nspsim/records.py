"""Names shared by simulated and measured step records, so the two can be joined.

The simulator's ``StepResult`` and the runtime's JSONL step records both report a step-time
breakdown under exactly these keys (seconds, of the critical GPU: the one every other GPU waits for,
i.e. the least ``comm_wait`` once all are counted to the step's end; both also keep every GPU's),
following the NSP paper's Figure 8
categories.
"""

from __future__ import annotations

BREAKDOWN_CATEGORIES: tuple[str, ...] = (
    "attn_fwd",  # attention-core forward compute
    "attn_remat",  # attention recomputed in backward (compute and its SP communication)
    "attn_bwd",  # attention-core backward compute
    "non_attn",  # projections, FFN/MoE, output head (compute)
    "sp_exposed_comm",  # SP collectives (Ulysses all-to-all, ring, layout change) not hidden by compute
    "fsdp_exposed_comm",  # FSDP all-gather / reduce-scatter not hidden by compute
    "comm_wait",  # waiting for peers to reach a collective (imbalance)
    "other",  # optimizer step, expert-parallel all-to-all, everything else
)

BREAKDOWN_SHORT: dict[str, str] = {
    "attn_fwd": "afwd",
    "attn_remat": "remat",
    "attn_bwd": "abwd",
    "non_attn": "nonat",
    "sp_exposed_comm": "sp",
    "fsdp_exposed_comm": "fsdp",
    "comm_wait": "wait",
    "other": "other",
}
"""Column labels (at most 5 characters) of the categories in text tables."""
