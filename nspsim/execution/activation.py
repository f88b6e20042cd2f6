"""Activation memory of a plan and the executor's save/recompute decision (docs/DESIGN.md, docs/simulator.md).

Per micro-batch and GPU, activations are ``base_bytes(Tok_p)`` (layer checkpoints and the one-layer
working set, attention recomputed) plus the attention tensors of the samples whose attention is
saved: L_j / |R(u_j)| tokens at ``attention_bytes_per_token(|R(u_j)|)`` each. Decision:

* plan without recompute marks: keep every node's attention if that fits on every GPU; otherwise
  full attention recomputation (the paper's baseline) for that micro-batch;
* plan with marks (tree-level recomputation, :mod:`nspsim.execution.recompute`): keep exactly the unmarked
  samples' attention;
* under full activation checkpointing (``MemoryModel.keeps_attention`` false) every sample reruns its
  attention in backward, whatever the plan's marks;
* if the chosen policy still does not fit on some GPU the step is out of memory: it is reported,
  never simulated.

Peak memory per GPU = FSDP-sharded states + gathered-layer buffers + the largest micro-batch's
activations (activations are freed after each micro-batch's backward).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

import numpy as np

from nspsim.plan import Plan
from nspsim.specs.memory import GIB, MemoryModel


class RecomputePolicy(StrEnum):
    """Which attention a step keeps for backward (see the module docstring)."""

    KEEP_ALL = "keep-all"
    FULL_RECOMPUTE = "full-recompute"
    TREE_MARKS = "tree-marks"


POLICIES: tuple[str, ...] = tuple(p.value for p in RecomputePolicy)
"""The policy names in order (``in`` tests and error messages)."""


@dataclass(frozen=True, kw_only=True, eq=False)
class ActivationPlan:
    """Which samples rerun attention in backward, and the memory that results."""

    policy: RecomputePolicy
    remat: np.ndarray
    peak_bytes: np.ndarray
    oom: str | None

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise ValueError(f"unknown recompute policy {self.policy!r} (known: {', '.join(POLICIES)})")
        object.__setattr__(self, "policy", RecomputePolicy(self.policy))  # a plain string becomes the member
        if self.remat.dtype != bool or self.remat.ndim != 1 or self.peak_bytes.ndim != 1:
            raise ValueError("remat must be a boolean mask per sample and peak_bytes one value per GPU")

    @property
    def remat_fraction(self) -> float:
        """Share of samples whose attention is recomputed."""
        return float(self.remat.mean()) if self.remat.size else 0.0


def attention_bytes_per_gpu(plan: Plan, memory: MemoryModel, samples: np.ndarray) -> np.ndarray:
    """Bytes per GPU of keeping the attention tensors of ``samples`` (a boolean mask)."""
    lengths, degrees, firsts, _ = plan.arrays
    per_sample = np.zeros(len(lengths))
    for deg in np.unique(degrees[samples]):
        sel = samples & (degrees == deg)
        per_sample[sel] = lengths[sel] * memory.node_attention_bytes(1.0, int(deg))
    return plan.tree.per_gpu_sum(per_sample[samples], degrees[samples], firsts[samples])


def base_bytes_per_gpu(plan: Plan, memory: MemoryModel, micro_batch: int) -> np.ndarray:
    """Activation bytes per GPU of ``micro_batch`` with every node's attention recomputed."""
    return memory.base_bytes(1.0) * plan.tokens_per_gpu(micro_batch)


def plan_activations(plan: Plan, memory: MemoryModel) -> ActivationPlan:
    """Apply the executor's save/recompute policy to every micro-batch of ``plan``."""
    if not memory.keeps_attention:  # full activation checkpointing: every layer reruns, attention included
        remat = np.ones(plan.num_samples, dtype=bool)
    elif plan.recompute is None:
        remat = np.zeros(plan.num_samples, dtype=bool)
    else:
        remat = np.array(plan.recompute, bool)
    policies, worst = set(), np.zeros(plan.cluster.num_gpus)
    oom: str | None = None
    for mb in range(plan.num_micro_batches):
        policy, act = _micro_batch_policy(plan, memory, mb, remat)
        policies.add(policy)
        worst = np.maximum(worst, act)
        if oom is None and not memory.fits(float(act.max())):
            oom = _oom_message(plan, memory, mb, act, policy)
    if not memory.keeps_attention:
        policy = RecomputePolicy.FULL_RECOMPUTE
    elif plan.recompute is not None:
        policy = RecomputePolicy.TREE_MARKS
    elif RecomputePolicy.FULL_RECOMPUTE in policies:
        policy = RecomputePolicy.FULL_RECOMPUTE
    else:
        policy = RecomputePolicy.KEEP_ALL
    return ActivationPlan(
        policy=policy, remat=remat, peak_bytes=memory.state_bytes + memory.buffer_bytes + worst, oom=oom
    )


def _micro_batch_policy(
    plan: Plan, memory: MemoryModel, mb: int, remat: np.ndarray
) -> tuple[RecomputePolicy, np.ndarray]:
    """(policy, activation bytes per GPU) of one micro-batch; updates ``remat`` for unmarked plans."""
    mask = plan.sample_mask(mb)
    base = base_bytes_per_gpu(plan, memory, mb)
    if not memory.keeps_attention:
        return RecomputePolicy.FULL_RECOMPUTE, base
    if plan.recompute is not None:
        return RecomputePolicy.TREE_MARKS, base + attention_bytes_per_gpu(plan, memory, mask & ~remat)
    keep = base + attention_bytes_per_gpu(plan, memory, mask)
    if memory.fits(float(keep.max())):
        return RecomputePolicy.KEEP_ALL, keep
    remat[mask] = True
    return RecomputePolicy.FULL_RECOMPUTE, base


def _oom_message(plan: Plan, memory: MemoryModel, mb: int, act: np.ndarray, policy: RecomputePolicy) -> str:
    g = int(np.argmax(act))
    return (
        f"out of memory: GPU {g} needs {act[g] / GIB:.1f} GiB of activations in micro-batch {mb} "
        f"({policy}, {plan.tokens_per_gpu(mb)[g]:.0f} sharded tokens) but only "
        f"{memory.activation_capacity / GIB:.1f} GiB are free beside model states and buffers"
    )
