"""The reference the planners' vectorised proxy is checked against (tests only): per-GPU loads and
Load(a) computed directly from the cost model, one ``non_attention`` call per GPU.

For a routing a (sample j -> node u_j), GPU p's attention time per pass is the serial sum over the
active nodes on its leaf-to-root chain of their phase costs; its non-attention time follows from its
sharded token count Tok_p = sum_{j: p in R(u_j)} L_j / |R(u_j)|. Per pass sigma:

    D_p^sigma = layers * (A_p^sigma + O_p^sigma),    Load(a) = max_p D_p^fwd + max_p D_p^bwd.

Everything is vectorised per degree level (``SPTree.per_gpu_sum``), so evaluating a 30K-sample plan
on 1024 GPUs costs a few bincounts. Load is a routing proxy, not a step-time prediction: overlap,
FSDP and recomputation are the simulator's job. nspsim's own implementation is
:class:`nspsim.planners.proxy.CostTable`, which must equal this one (tests/planners/test_load.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from nspsim.cost.interface import CostModel
from nspsim.sp_tree import SPTree


@dataclass(frozen=True)
class LoadBreakdown:
    """Per-GPU step totals (all layers) of one micro-batch, in seconds; ``tokens`` is Tok_p."""

    attn_fwd: npt.NDArray[np.float64]
    attn_bwd: npt.NDArray[np.float64]
    nonattn_fwd: npt.NDArray[np.float64]
    nonattn_bwd: npt.NDArray[np.float64]
    tokens: npt.NDArray[np.float64]

    @property
    def d_fwd(self) -> npt.NDArray[np.float64]:
        """D_p^fwd per GPU."""
        return self.attn_fwd + self.nonattn_fwd

    @property
    def d_bwd(self) -> npt.NDArray[np.float64]:
        """D_p^bwd per GPU."""
        return self.attn_bwd + self.nonattn_bwd

    @property
    def per_gpu(self) -> npt.NDArray[np.float64]:
        """C_p = D_p^fwd + D_p^bwd, the planner's per-GPU scalar."""
        return self.d_fwd + self.d_bwd

    @property
    def load(self) -> float:
        """Load(a) = max_p D_p^fwd + max_p D_p^bwd."""
        return float(self.d_fwd.max() + self.d_bwd.max())

    @property
    def critical_gpu(self) -> int:
        """The GPU with the largest C_p."""
        return int(np.argmax(self.per_gpu))


def tokens_per_gpu(tree: SPTree, lengths: np.ndarray, degrees: np.ndarray, first_ranks: np.ndarray) -> np.ndarray:
    """Tok_p: sharded token load of every GPU."""
    return tree.per_gpu_sum(lengths / degrees, degrees, first_ranks)


def plan_load(
    cost: CostModel, tree: SPTree, lengths: np.ndarray, degrees: np.ndarray, first_ranks: np.ndarray
) -> LoadBreakdown:
    """Per-GPU loads of one micro-batch routed to nodes ``(degrees[j], first_ranks[j])``."""
    lengths = np.asarray(lengths, dtype=np.int64)
    fwd = np.zeros(len(lengths))
    bwd = np.zeros(len(lengths))
    node_fwd = np.zeros(tree.num_gpus)
    node_bwd = np.zeros(tree.num_gpus)
    for deg in np.unique(degrees):
        mask = degrees == deg
        sample = cost.attention_sample_costs(lengths[mask], int(deg))
        fwd[mask], bwd[mask] = sample.fwd, sample.bwd
        over_fwd, over_bwd = cost.node_overhead(int(deg))
        active = np.zeros(tree.num_gpus // int(deg), dtype=bool)
        active[first_ranks[mask] // deg] = True
        node_fwd += np.repeat(active * over_fwd, int(deg))
        node_bwd += np.repeat(active * over_bwd, int(deg))
    layers = cost.num_layers
    tokens = tokens_per_gpu(tree, lengths, degrees, first_ranks)
    na = [cost.non_attention(float(t)) for t in tokens]
    return LoadBreakdown(
        attn_fwd=layers * (tree.per_gpu_sum(fwd, degrees, first_ranks) + node_fwd),
        attn_bwd=layers * (tree.per_gpu_sum(bwd, degrees, first_ranks) + node_bwd),
        nonattn_fwd=layers * np.array([c.fwd for c in na]),
        nonattn_bwd=layers * np.array([c.bwd for c in na]),
        tokens=tokens,
    )
