"""Measured step records (JSONL), joinable with the simulator's predictions.

One record per training step, written by rank 0. The join key with simulated results
(``nspsim.simulator.StepResult`` / ``nspsim.compare.IterationRecord``) is ``(planner, batch_index,
plan_hash)``; ``step_time_s``, ``breakdown_s`` (keys ``nspsim.records.BREAKDOWN_CATEGORIES``, in that
order, summing to ``step_time_s``), ``per_gpu_breakdown_s``, ``critical_gpu``, ``recompute_policy`` and
``num_micro_batches`` mean the same as there. ``breakdown_s`` is rank 0's; ``critical_gpu`` is the rank
that computed longest (attention + non-attention). When the run also simulated its plans, the
prediction sits beside the measurement (``simulated_step_time_s``, ``simulated_breakdown_s``).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from nspsim.records import BREAKDOWN_CATEGORIES

SCHEMA = "nspsim-measured-step"
SCHEMA_VERSION = 1


@dataclass(frozen=True, kw_only=True)
class MeasuredStep:
    """One executed training step (see the module docstring)."""

    step: int
    batch_index: int
    planner: str
    plan_hash: str
    backend: str
    num_gpus: int
    cluster: str
    model: str
    num_samples: int
    num_tokens: int
    num_micro_batches: int
    samples_per_degree: dict[int, int]
    recompute_policy: str
    remat_share: float
    loss: float
    step_time_s: float
    breakdown_s: dict[str, float]
    per_gpu_breakdown_s: dict[str, list[float]]
    critical_gpu: int
    sp_comm_s: float
    planning_time_s: float
    plan_wait_s: float
    simulated_step_time_s: float | None = None
    simulated_breakdown_s: dict[str, float] = field(default_factory=dict)
    source: str = "measured"
    schema: str = SCHEMA
    schema_version: int = SCHEMA_VERSION

    def __post_init__(self) -> None:
        if tuple(self.breakdown_s) != BREAKDOWN_CATEGORIES:
            raise ValueError(f"breakdown keys must be {BREAKDOWN_CATEGORIES}, got {tuple(self.breakdown_s)}")
        if abs(sum(self.breakdown_s.values()) - self.step_time_s) > 1e-6 * max(1.0, self.step_time_s):
            raise ValueError(f"breakdown sums to {sum(self.breakdown_s.values())} s, not the step's {self.step_time_s} s")

    def to_json(self) -> str:
        """One JSONL line."""
        body: dict[str, Any] = asdict(self)
        body["samples_per_degree"] = {str(k): v for k, v in self.samples_per_degree.items()}
        return json.dumps(body, separators=(",", ":"))


def read_records(text: str) -> list[dict[str, Any]]:
    """Parse a JSONL records file (blank lines ignored); ``ValueError`` names a bad line."""
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise ValueError(f"records line {n} is not JSON ({exc.msg})") from None
    return out
