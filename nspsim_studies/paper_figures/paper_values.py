"""The NSP paper's evaluation figures (7-10) as decoded values, each with its confidence mark.

Source: NSP paper, Figures 7-10, decoded in nsp-figures.md (``../shared/papers/``, not part of this
repository). The figures' PDF text is garbled, so every number here is a decoding, never an exact
reading, and carries one of three marks: ``high`` (stated in the text or cross-checked by
arithmetic), ``med`` (consistent, resting on one assumption) and ``low`` (a reading of the layout).
Studies show these values beside ours with the mark, and say what they normalise to.

The paper reports speedups over Static SP; our studies plot step time normalised to a baseline, so
:func:`as_normalised` turns a speedup ``s`` into ``1 / s`` and a ratio of two speedups into the
normalised time of one against the other. Trade-off: the values are typed records in code rather than
a data file, so a study can import them without a reader and a test can check every mark.
"""

from __future__ import annotations

from dataclasses import dataclass

CONFIDENCE = ("high", "med", "low")


@dataclass(frozen=True, kw_only=True)
class PaperValue:
    """One decoded number: what it is, its value, its confidence mark and a short note."""

    figure: int
    key: str
    value: float
    confidence: str
    note: str = ""

    def __post_init__(self) -> None:
        if self.confidence not in CONFIDENCE:
            raise ValueError(
                f"paper value {self.key!r}: confidence {self.confidence!r} is not one of {', '.join(CONFIDENCE)}"
            )
        if not self.value > 0:
            raise ValueError(
                f"paper value {self.key!r}: a speedup or normalised time must be positive, got {self.value}"
            )

    def to_dict(self) -> dict[str, object]:
        """Plain values for a study's JSON."""
        return {
            "figure": self.figure,
            "key": self.key,
            "value": self.value,
            "confidence": self.confidence,
            "note": self.note,
        }


def as_normalised(speedup: float) -> float:
    """The normalised step time a speedup over the baseline is (``1 / speedup``)."""
    if not speedup > 0:
        raise ValueError(f"a speedup must be positive, got {speedup}")
    return 1.0 / speedup


# ---- Figure 7: speedup over Static SP, 12 bar groups (values high; which panel a group is: low) ---------
# (group, FlexSP, NSP-2L, NSP, NSP vs FlexSP); panels by extraction order: groups 1-2 235B-384K,
# 3-5 30B-384K, 6-8 235B-192K, 9-12 30B-192K (low: the panels hold 3 datasets each, not 2-4).
_FIG7_GROUPS = (
    (1, 1.25, 1.37, 1.41, 1.13),
    (2, 1.07, 1.20, 1.21, 1.13),
    (3, 1.27, 1.32, 1.37, 1.08),
    (4, 1.02, 1.08, 1.09, 1.07),
    (5, 1.27, 1.45, 1.48, 1.16),
    (6, 1.09, 1.24, 1.25, 1.15),
    (7, 1.29, 1.35, 1.42, 1.10),
    (8, 1.23, 1.30, 1.38, 1.12),
    (9, 1.26, 1.32, 1.37, 1.09),
    (10, 1.27, 1.43, 1.46, 1.15),
    (11, 1.12, 1.20, 1.20, 1.07),
    (12, 1.12, 1.24, 1.26, 1.13),
)
FIG7_PANEL_OF_GROUP: dict[int, tuple[str, int]] = {
    **{g: ("qwen3-235b-a22b", 384 * 1024) for g in (1, 2)},
    **{g: ("qwen3-30b-a3b", 384 * 1024) for g in (3, 4, 5)},
    **{g: ("qwen3-235b-a22b", 192 * 1024) for g in (6, 7, 8)},
    **{g: ("qwen3-30b-a3b", 192 * 1024) for g in (9, 10, 11, 12)},
}
FIG7_PLANNERS = ("flexsp", "nsp2l", "nsp")
FIG7: tuple[PaperValue, ...] = tuple(
    PaperValue(figure=7, key=f"group{g}/{planner}", value=v, confidence="high", note="speedup over Static SP")
    for g, *values, _ in _FIG7_GROUPS
    for planner, v in zip(FIG7_PLANNERS, values)
) + tuple(
    PaperValue(figure=7, key=f"group{g}/nsp-vs-flexsp", value=v, confidence="high", note="NSP speedup over FlexSP")
    for g, *_, v in _FIG7_GROUPS
)
# Ranges that hold whatever the group-to-panel mapping (med-high in the decoding; marked med here).
FIG7_RANGES: dict[str, tuple[float, float, str]] = {
    "nsp": (1.09, 1.48, "med"),
    "flexsp": (1.02, 1.29, "med"),
    "nsp-vs-flexsp": (1.07, 1.16, "med"),
}
FIG7_NSP_MEDIAN = PaperValue(figure=7, key="nsp/median", value=1.37, confidence="med", note="median NSP speedup")


def fig7_groups(model: str, max_context: int) -> list[int]:
    """The Figure 7 bar groups that the decoding (low confidence) places in the (model, context) panel."""
    return [g for g, panel in FIG7_PANEL_OF_GROUP.items() if panel == (model, max_context)]


def fig7_value(group: int, planner: str) -> PaperValue:
    """The decoded speedup of ``planner`` (flexsp, nsp2l, nsp, nsp-vs-flexsp) in bar group ``group``."""
    key = f"group{group}/{planner}"
    for value in FIG7:
        if value.key == key:
            return value
    raise ValueError(
        f"Figure 7 has no decoded value {key!r} (groups 1-12; planners {', '.join(FIG7_PLANNERS)}, nsp-vs-flexsp)"
    )


# ---- Figure 8: one representative Qwen3-235B iteration, step time normalised to Static SP-32 -----------
FIG8_MODEL = "qwen3-235b-a22b"  # "almost certainly" (SP-64 and an attention-remat category exist only there)
FIG8: tuple[PaperValue, ...] = (
    PaperValue(figure=8, key="static-32", value=1.00, confidence="high", note="long comm-wait component (imbalance)"),
    PaperValue(figure=8, key="static-64", value=0.89, confidence="high", note="better balance, more exposed SP comm"),
    PaperValue(
        figure=8, key="flexsp", value=0.83, confidence="high", note="3 micro-batches, larger non-attention compute"
    ),
    PaperValue(figure=8, key="nsp", value=0.69, confidence="high", note="1.20x over FlexSP"),
)
FIG8_CATEGORIES = (
    "attn fwd",
    "attn remat",
    "attn bwd",
    "non-attn",
    "SP exposed comm",
    "FSDP exposed comm",
    "comm wait",
    "other exposed",
)

# ---- Figure 9: node-level routing by length bucket (structure med, cells low) ---------------------------
# Rows of the paper's grid: SP64 x1, SP32 x2, SP16 x4, SP8 x8, then below SP8 one row per SP8 subtree (x8).
FIG9_NODES = 23
FIG9: tuple[PaperValue, ...] = (
    *(
        PaperValue(
            figure=9, key=f"0-8K/below-sp8#{i}", value=v, confidence="low", note="percent of the bucket's samples"
        )
        for i, v in enumerate((9, 11, 11, 10, 8, 11, 14, 26))
    ),
    PaperValue(
        figure=9, key="8-32K/sp8 (two nodes, each)", value=30, confidence="low", note="percent; plus 1-sample slivers"
    ),
    PaperValue(
        figure=9, key="32-128K+128K+/sp64-sp32 cell", value=33, confidence="low", note="percent (another cell 25%)"
    ),
    PaperValue(figure=9, key="nodes in use", value=23, confidence="med", note="all 23 nodes used: deep nesting"),
)
FIG9_READING = (
    "about 3 samples >= 128K and 4 of 32-128K on SP64/SP32 with some on SP16/SP8 (low); 8-32K mostly on two SP8 "
    "nodes; 0-8K almost entirely on the eight sub-SP8 subtrees; every bucket column sums to 100% (med)"
)

# ---- Figure 10: leave-one-out ablation, Dataset A, speedup over Static SP ------------------------------
FIG10_VARIANTS = ("nsp", "nsp-no-recompute", "nsp-attn-fwd", "nsp-no-overlap", "nsp-greedy")
FIG10: dict[str, tuple[PaperValue, ...]] = {
    "qwen3-235b-a22b": (
        PaperValue(figure=10, key="nsp", value=1.41, confidence="high"),
        PaperValue(figure=10, key="nsp-no-recompute", value=1.29, confidence="high", note="+9.6% time"),
        PaperValue(figure=10, key="nsp-attn-fwd", value=1.40, confidence="med"),
        PaperValue(figure=10, key="nsp-no-overlap", value=1.35, confidence="low", note="or 1.30"),
        PaperValue(figure=10, key="nsp-greedy", value=1.30, confidence="low", note="or 1.35"),
    ),
    "qwen3-30b-a3b": (
        PaperValue(figure=10, key="nsp", value=1.25, confidence="high"),
        PaperValue(figure=10, key="nsp-no-recompute", value=1.25, confidence="high", note="no effect"),
        PaperValue(figure=10, key="nsp-attn-fwd", value=0.94, confidence="high", note="+33.5% time"),
        PaperValue(figure=10, key="nsp-no-overlap", value=1.21, confidence="low", note="or 1.01"),
        PaperValue(figure=10, key="nsp-greedy", value=1.01, confidence="low", note="or 1.21"),
    ),
}
FIG10_PAPER_LABELS = {
    "nsp": "NSP (full)",
    "nsp-no-recompute": "w/o Recompute",
    "nsp-attn-fwd": "w/o Cost Model",
    "nsp-no-overlap": "w/o Overlap",
    "nsp-greedy": "w/o Router",
}


def fig10_normalised(model: str, variant: str) -> tuple[float, str]:
    """A variant's step time normalised to full NSP in the paper (NSP's speedup / the variant's) and the
    weaker of the two confidence marks."""
    values = {v.key: v for v in FIG10[model]}
    full, ours = values["nsp"], values[variant]
    mark = max(full.confidence, ours.confidence, key=CONFIDENCE.index)
    return full.value / ours.value, mark


def all_values() -> list[PaperValue]:
    """Every decoded value of Figures 7-10 (what the studies' JSON files carry)."""
    return [*FIG7, FIG7_NSP_MEDIAN, *FIG8, *FIG9, *(v for values in FIG10.values() for v in values)]
