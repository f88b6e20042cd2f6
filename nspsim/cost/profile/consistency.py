"""Cross-checks of a profile's tables against each other, for unit slips no single range can catch.

A time table in milliseconds written as seconds (``[8192, 4.0]`` for 4 ms) is a plausible duration on
its own: one layer of a large model on a slow CPU can take seconds. What gives it away is the rest of
the same profile, measured on the same machine in the same run. The non-attention layer is matrix
multiplications, the attention kernel too, and a CPU or GPU runs both at rates within a factor of
:data:`RATE_BAND` of each other. Measured: a 2-rank calibration of ``tiny`` on this project's 2-core
CPU host (2026-12-02) gives 1.5e9 FLOP/s for the non-attention layer at 16K tokens against 1.8e9 for
the attention kernel (0.84x); the GPU presets' published attention curves at 32K against their GEMM
rates give 0.85x (A100) to 1.38x (H100, H200, H20). A milliseconds slip moves the ratio 1,000x. So
a non-attention table whose implied FLOP/s (the model's dense FLOPs per token times tokens over
seconds, at its largest point, where fixed costs weigh least) falls outside ``RATE_BAND`` of the
profile's own forward attention throughput (at its longest length) is refused, naming both rates
and the likely slip.

Trade-off: the check needs the model's FLOPs per token, so it runs where a profile meets its model
(:class:`~nspsim.cost.analytic.AnalyticCostModel`), not when the file is parsed; a profile without
attention tables or without time tables is not cross-checked (each table's own range still is).
"""

from __future__ import annotations

from nspsim.cost.profile import Profile
from nspsim.cost.profile.ranges import format_number

RATE_BAND = 100.0
"""How far (a factor, either way) the non-attention layer's implied FLOP/s may sit from the attention
kernel's measured FLOP/s before a profile is taken for a unit slip (module docstring)."""


def check_rates(profile: Profile, *, dense_flops_per_token: float, heads: int) -> None:
    """``ValueError`` when ``profile``'s forward non-attention time table implies a FLOP/s rate more than
    :data:`RATE_BAND` away from its forward attention throughput (module docstring)."""
    table = profile.nonattn_fwd_s_by_tokens
    attention = profile.attention_table(backward=False, heads=heads)
    if table is None or attention is None or dense_flops_per_token <= 0:
        return
    tokens, seconds = table.tokens[-1], table.seconds[-1]
    if seconds <= 0:
        return
    implied = tokens * dense_flops_per_token / seconds
    measured = attention.values[-1]
    ratio = implied / measured
    if 1 / RATE_BAND <= ratio <= RATE_BAND:
        return
    slip = "milliseconds written as seconds" if ratio < 1 else "seconds written where microseconds or less belong"
    raise ValueError(
        f"profile {profile.name}: nonattn_fwd_s_by_tokens says {format_number(seconds)} s for "
        f"{tokens:,.0f} tokens of one {profile.model or 'model'} layer, i.e. "
        f"{format_number(implied)} FLOP/s, {max(ratio, 1 / ratio):,.0f}x {'below' if ratio < 1 else 'above'} "
        f"the same profile's attention kernels ({format_number(measured)} FLOP/s at length "
        f"{attention.lengths[-1]:,.0f}); the two run within {RATE_BAND:g}x of each other on one machine, "
        f"so the times are likely {slip}: remeasure, or give seconds"
    )
