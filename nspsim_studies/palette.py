"""One colour per planner label and per breakdown category, for every figure and report, so a
strategy looks the same in ``nspsim compare``'s report, ``nspsim plot``, the paper figures and the
closing study. A label not listed (a ``static-<d>`` degree, options after ``:``) takes its base
planner's colour when that is listed, else a fixed colour of plotly's qualitative palette chosen by a
checksum of the label (stable across runs and processes)."""

from __future__ import annotations

import zlib

from plotly.colors import qualitative

PLANNER_COLORS = {
    "static-paper": "#525252",
    "static-best": "#7f7f7f",
    "static": "#bcbd22",
    "megatron-cp": "#17becf",
    "flexsp": "#1f77b4",
    "flexsp-artifact": "#aec7e8",
    "basp": "#9467bd",
    "nsp2l": "#ff7f0e",
    "nsp": "#d62728",
    "greedy": "#8c564b",
    "nsp-greedy": "#8c564b",
    "nsp-no-recompute": "#ff9896",
    "nsp-no-overlap": "#f7b6d2",
    "nsp-attn-fwd": "#c49c94",
}
BREAKDOWN_COLORS = {
    "attn_fwd": "#4c78a8",
    "attn_remat": "#f58518",
    "attn_bwd": "#72b7b2",
    "non_attn": "#54a24b",
    "sp_exposed_comm": "#e45756",
    "fsdp_exposed_comm": "#b279a2",
    "ep_exposed_comm": "#ff9da6",
    "comm_wait": "#bab0ac",
    "other": "#9d755d",
}


def planner_color(label: str) -> str:
    """The colour of a planner label (module doc)."""
    if label in PLANNER_COLORS:
        return PLANNER_COLORS[label]
    base = label.partition(":")[0]
    if base in PLANNER_COLORS:
        return PLANNER_COLORS[base]
    palette = qualitative.Plotly
    return palette[zlib.crc32(label.encode()) % len(palette)]
