"""Measured step records (JSONL), joinable with the simulator's predictions.

One record per training step, written by rank 0 (schema ``nspsim-measured-step`` v3; v3 added
``dropped_samples`` and ``dropped_tokens``, the samples of the step's batch draw dropped for exceeding
``--max-context`` and their tokens, which ``num_samples`` and ``num_tokens`` do not count; readers of
v2 records find neither field; ``model_impl``, the model class that ran, e.g.
``transformers.Qwen3MoeForCausalLM`` or ``nspsim_runtime.model.DecoderLM``, was added to v3 later and is
empty in records written before it; so were ``profile`` and ``profile_fingerprint``, the cost profile the
prediction was made with, empty for analytic costs). The join key
with simulated results (``nspsim.simulator.StepResult`` / ``nspsim.compare.IterationRecord``) is
``(planner_spec, batch_index, plan_hash)``: ``planner_spec`` is the planner as the user gave it, in the
``nspsim compare`` label format (``nsp``, ``static:degree=2``); ``planner`` is the plan's own name.

The fields mean the same as the simulator's: ``breakdown_s`` (keys ``nspsim.records.BREAKDOWN_CATEGORIES``,
in that order, summing to ``step_time_s``) is the partition of the *critical* rank's step, the rank
whose forward and backward finished last (the one every other rank waited for at the barrier before
the gradient sync, so its ``comm_wait`` is the smallest), and ``step_time_s`` is that rank's step
time; ``per_gpu_breakdown_s``, ``per_gpu_step_time_s`` and ``per_gpu_sp_comm_s`` hold every rank's
(rank 0's is index 0). ``sp_comm_s`` is the issue-to-completion span of the critical rank's SP
collectives, overlapped or not.
``recompute_policy`` and ``remat_share`` are the simulator's label and share for the executed plan.
``simulated_*`` is the simulator's prediction of the executed configuration (``simulated_mode``: the
simulation mode that matches the executed options); when there is none, ``simulated_step_time_s`` is
null and ``simulated_note`` says why (``nspsim_runtime.prediction``).

A run with ``--accumulate W`` (W > 1) writes one record per *pass* (``step`` counts passes, ``batch_index``
is the pass's batch, ``num_samples``/``num_tokens``/``loss`` are the pass's own) and adds the window
fields :data:`WINDOW_FIELDS`, absent from every other record (so a run without windows writes the
records it always did): ``window`` (the window's index in the run), ``window_pass`` (0..W-1),
``window_passes`` (W), ``optimizer_step`` (true on the last pass only: the optimizer steps once per
window), ``window_hash`` (the content hash of the executed window plan in ``<records>.plans.jsonl``),
``window_candidate`` (the assignment the window planner chose), ``window_tokens`` and ``window_loss``
(the mean loss over all the window's tokens, on the last pass; null on the others).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from nspsim.records import BREAKDOWN_CATEGORIES

SCHEMA = "nspsim-measured-step"
SCHEMA_VERSION = 3
WINDOW_FIELDS = (
    "window",
    "window_pass",
    "window_passes",
    "optimizer_step",
    "window_hash",
    "window_candidate",
    "window_tokens",
    "window_loss",
)
"""The fields of a pass of an accumulation window (module docstring), absent from other records."""


@dataclass(frozen=True, kw_only=True)
class MeasuredStep:
    """One executed training step (see the module docstring)."""

    step: int
    batch_index: int
    planner_spec: str
    planner: str
    plan_hash: str
    backend: str
    num_gpus: int
    cluster: str
    model: str
    num_samples: int
    num_tokens: int
    dropped_samples: int
    dropped_tokens: int
    num_micro_batches: int
    samples_per_degree: dict[int, int]
    recompute_policy: str
    remat_share: float
    loss: float
    step_time_s: float
    breakdown_s: dict[str, float]
    critical_gpu: int
    per_gpu_step_time_s: list[float]
    per_gpu_breakdown_s: dict[str, list[float]]
    sp_comm_s: float
    per_gpu_sp_comm_s: list[float]
    planning_time_s: float
    plan_wait_s: float
    simulated_mode: str | None = None
    simulated_step_time_s: float | None = None
    simulated_breakdown_s: dict[str, float] = field(default_factory=dict)
    simulated_note: str = ""
    model_impl: str = ""
    profile: str = ""  # the cost profile the prediction used (its label; "" for analytic costs)
    profile_fingerprint: str = ""
    window: int | None = None
    window_pass: int | None = None
    window_passes: int | None = None
    optimizer_step: bool | None = None
    window_hash: str | None = None
    window_candidate: str | None = None
    window_tokens: int | None = None
    window_loss: float | None = None
    source: str = "measured"
    schema: str = SCHEMA
    schema_version: int = SCHEMA_VERSION

    def __post_init__(self) -> None:
        if min(self.dropped_samples, self.dropped_tokens) < 0 or (self.dropped_samples == 0) != (
            self.dropped_tokens == 0
        ):
            raise ValueError(
                f"dropped samples ({self.dropped_samples}) and tokens ({self.dropped_tokens}) must be >= 0 "
                "and zero together"
            )
        if tuple(self.breakdown_s) != BREAKDOWN_CATEGORIES:
            raise ValueError(f"breakdown keys must be {BREAKDOWN_CATEGORIES}, got {tuple(self.breakdown_s)}")
        if abs(sum(self.breakdown_s.values()) - self.step_time_s) > 1e-6 * max(1.0, self.step_time_s):
            raise ValueError(
                f"breakdown sums to {sum(self.breakdown_s.values())} s, not the step's {self.step_time_s} s"
            )
        if not 0 <= self.critical_gpu < self.num_gpus or len(self.per_gpu_step_time_s) != self.num_gpus:
            raise ValueError(f"critical_gpu {self.critical_gpu} and per-GPU step times must cover {self.num_gpus} GPUs")
        if any(len(v) != self.num_gpus for v in [*self.per_gpu_breakdown_s.values(), self.per_gpu_sp_comm_s]):
            raise ValueError(f"per-GPU breakdowns must have one entry per GPU ({self.num_gpus})")
        if (self.simulated_step_time_s is None) == (not self.simulated_note):
            raise ValueError("a record has a simulated step time or a note saying why it has none")
        self._check_window()

    def _check_window(self) -> None:
        given = [getattr(self, name) is not None for name in WINDOW_FIELDS[:-1]]
        if any(given) and not all(given):
            raise ValueError(f"a pass of a window has all of {', '.join(WINDOW_FIELDS[:-1])}, or none of them")
        if self.window_passes is None:
            if self.window_loss is not None:
                raise ValueError("window_loss belongs to a pass of a window")
            return
        assert self.window_pass is not None
        last = self.window_pass == self.window_passes - 1
        if not 0 <= self.window_pass < self.window_passes or self.optimizer_step != last:
            raise ValueError(
                f"pass {self.window_pass} of a window of {self.window_passes}: "
                "the optimizer steps on the last pass only"
            )
        if (self.window_loss is not None) != last:
            raise ValueError("window_loss is on the last pass of a window only")

    def to_json(self) -> str:
        """One JSONL line."""
        body: dict[str, Any] = asdict(self)
        if self.window is None:
            for name in WINDOW_FIELDS:
                del body[name]
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
        except RecursionError:
            raise ValueError(f"records line {n} is not a record (JSON nested too deeply)") from None
    return out
