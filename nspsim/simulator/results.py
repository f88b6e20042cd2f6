"""Typed simulation results: :class:`StepResult` (one training step) and its timeline events.

The breakdown uses exactly :data:`nspsim.records.BREAKDOWN_CATEGORIES`, so simulated steps join
measured runtime records. ``breakdown_s`` is the partition of the *critical GPU*'s step (the GPU
the others waited for: least ``comm_wait``, as the runtime defines it; its categories sum to
``step_time_s``); ``per_gpu_breakdown_s`` has every GPU's
partition of the same wall time (a GPU that finishes early waits for the others: ``comm_wait``).
An out-of-memory step has no timing: ``step_time_s`` is ``None`` and ``oom_detail`` says why.
``approximate``: only ``layers_simulated`` layers were simulated and the rest extended approximately
(opt-in, :mod:`~nspsim.simulator.approximate`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from nspsim.execution.activation import RecomputePolicy
from nspsim.records import BREAKDOWN_CATEGORIES
from nspsim.simulator.modes import SimMode

_SUM_TOLERANCE = 1e-6


@dataclass(frozen=True, kw_only=True)
class TimelineEvent:
    """One interval on one GPU track; ``layer`` is -1 outside the decoder layers."""

    gpu: int
    track: str
    name: str
    category: str
    start: float
    end: float
    layer: int = -1
    micro_batch: int = 0

    @property
    def label(self) -> str:
        """Name with micro-batch and layer, e.g. ``attn fwd sp8#2 mb0 L17``."""
        where = f" mb{self.micro_batch}" + (f" L{self.layer}" if self.layer >= 0 else "")
        return self.name + where


@dataclass(frozen=True, kw_only=True, eq=False)
class StepResult:
    """Predicted time and memory of one training step of one plan."""

    planner: str
    plan_hash: str
    num_gpus: int
    mode: SimMode
    oom: bool
    oom_detail: str | None = None
    step_time_s: float | None = None
    breakdown_s: Mapping[str, float] = field(default_factory=dict)
    per_gpu_breakdown_s: np.ndarray = field(default_factory=lambda: np.zeros((0, len(BREAKDOWN_CATEGORIES))))
    critical_gpu: int | None = None
    peak_memory_bytes: tuple[float, ...] = ()
    recompute_policy: RecomputePolicy = RecomputePolicy.KEEP_ALL
    remat_share: float = 0.0
    num_micro_batches: int = 1
    num_layers: int = 0
    layers_simulated: int = 0
    extrapolated: bool = False
    approximate: bool = False
    events: int = 0
    tasks: int = 0
    units: int = 0
    sim_wall_time_s: float = 0.0
    timeline: tuple[TimelineEvent, ...] = ()

    def __post_init__(self) -> None:
        if len(self.peak_memory_bytes) != self.num_gpus:
            raise ValueError(f"peak_memory_bytes has {len(self.peak_memory_bytes)} entries for {self.num_gpus} GPUs")
        if self.oom:
            if self.step_time_s is not None or not self.oom_detail:
                raise ValueError("an out-of-memory result has no step time and must say why")
            return
        self._check_breakdown()

    def _check_breakdown(self) -> None:
        if self.step_time_s is None or not math.isfinite(self.step_time_s) or self.step_time_s < 0:
            raise ValueError(f"step time must be a finite non-negative number, got {self.step_time_s}")
        if tuple(self.breakdown_s) != BREAKDOWN_CATEGORIES:
            raise ValueError(f"breakdown keys must be {BREAKDOWN_CATEGORIES}, got {tuple(self.breakdown_s)}")
        total = sum(self.breakdown_s.values())
        if abs(total - self.step_time_s) > _SUM_TOLERANCE * max(1.0, self.step_time_s):
            raise ValueError(f"breakdown sums to {total} s but the step takes {self.step_time_s} s")
        if self.per_gpu_breakdown_s.shape != (self.num_gpus, len(BREAKDOWN_CATEGORIES)):
            raise ValueError(f"per-GPU breakdown must have shape ({self.num_gpus}, {len(BREAKDOWN_CATEGORIES)})")

    @property
    def step_time_or_inf(self) -> float:
        """The step time, or infinity when the step does not fit in memory (a key to rank plans by)."""
        return math.inf if self.step_time_s is None else self.step_time_s

    @property
    def breakdown_share(self) -> dict[str, float]:
        """The critical GPU's breakdown as shares of the step time."""
        if self.step_time_s is None or self.step_time_s <= 0:
            return {k: 0.0 for k in BREAKDOWN_CATEGORIES}
        return {k: v / self.step_time_s for k, v in self.breakdown_s.items()}

    @property
    def events_per_s(self) -> float:
        """Simulation speed: SimPy events per second of wall time."""
        return self.events / self.sim_wall_time_s if self.sim_wall_time_s > 0 else 0.0

    @property
    def tasks_per_s(self) -> float:
        """Simulation speed: tasks (kernels and per-unit collective parts) per second of wall time."""
        return self.tasks / self.sim_wall_time_s if self.sim_wall_time_s > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary (the timeline is exported separately, see :mod:`nspsim.simulator.timeline`)."""
        return {
            "planner": self.planner,
            "plan_hash": self.plan_hash,
            "num_gpus": self.num_gpus,
            "mode": self.mode,
            "oom": self.oom,
            "oom_detail": self.oom_detail,
            "step_time_s": self.step_time_s,
            "breakdown_s": dict(self.breakdown_s),
            "breakdown_share": self.breakdown_share if not self.oom else {},
            "critical_gpu": self.critical_gpu,
            "peak_memory_bytes": list(self.peak_memory_bytes),
            "per_gpu_breakdown_s": {
                k: self.per_gpu_breakdown_s[:, i].tolist() for i, k in enumerate(BREAKDOWN_CATEGORIES)
            }
            if not self.oom
            else {},
            "recompute_policy": self.recompute_policy,
            "remat_share": self.remat_share,
            "num_micro_batches": self.num_micro_batches,
            "num_layers": self.num_layers,
            "layers_simulated": self.layers_simulated,
            "extrapolated": self.extrapolated,
            "approximate": self.approximate,
            "events": self.events,
            "events_per_s": self.events_per_s,
            "tasks": self.tasks,
            "tasks_per_s": self.tasks_per_s,
            "simulated_units": self.units,
            "sim_wall_time_s": self.sim_wall_time_s,
        }
