"""Training-system settings that are neither model architecture nor hardware (SPEC sections 3, 7, 8).

Precisions, optimizer placement, expert parallelism, the SP backend and the memory headroom that
turns HBM into a per-GPU token budget. ``paper_training`` gives the NSP paper's setup per model.
"""

from __future__ import annotations

from dataclasses import dataclass

from nspsim.sp_tree import is_power_of_two
from nspsim.specs.backend import BACKENDS, SPBackend

GIB = 1024**3


@dataclass(frozen=True, kw_only=True)
class TrainingSpec:
    """FSDP mixed-precision training settings.

    Model states are sharded over all GPUs (FSDP): ``param_bytes`` + ``grad_bytes`` per parameter stay
    on the GPU, plus ``optim_bytes`` (fp32 master and Adam moments) unless ``optimizer_offload``.
    ``token_budget`` overrides the derived per-GPU token budget B_tok. ``cpu_adam_params_per_s`` is the
    host optimizer rate per GPU when states are offloaded.
    """

    act_bytes: int = 2
    param_bytes: int = 2
    grad_bytes: int = 2
    optim_bytes: int = 12
    optimizer_offload: bool = False
    expert_parallel: int = 1
    hbm_usable_fraction: float = 0.92
    reserved_bytes: float = 4 * GIB
    fsdp_prefetch_layers: int = 1
    token_budget: int | None = None
    backend: SPBackend = SPBackend.ULYSSES
    cpu_adam_params_per_s: float = 2e9

    def __post_init__(self) -> None:
        if min(self.act_bytes, self.param_bytes, self.grad_bytes) <= 0 or self.optim_bytes < 0:
            raise ValueError("byte sizes of activations, parameters and gradients must be positive")
        if not is_power_of_two(self.expert_parallel):
            raise ValueError(f"expert_parallel must be a power of two, got {self.expert_parallel}")
        if not 0 < self.hbm_usable_fraction <= 1:
            raise ValueError(f"hbm_usable_fraction must be in (0, 1], got {self.hbm_usable_fraction}")
        if self.reserved_bytes < 0 or self.fsdp_prefetch_layers < 0:
            raise ValueError("reserved_bytes and fsdp_prefetch_layers must be >= 0")
        if self.token_budget is not None and self.token_budget <= 0:
            raise ValueError(f"token budget must be positive, got {self.token_budget}")
        if self.cpu_adam_params_per_s <= 0:
            raise ValueError(f"cpu_adam_params_per_s must be positive, got {self.cpu_adam_params_per_s}")
        if self.backend not in BACKENDS:
            raise ValueError(f"unknown SP backend {self.backend!r} (known: {', '.join(BACKENDS)})")
        object.__setattr__(self, "backend", SPBackend(self.backend))  # a plain "ring" becomes the member


def paper_training(model_name: str) -> TrainingSpec:
    """The NSP paper's settings (section 6.1): Qwen3-235B uses EP=8 and CPU-offloaded optimizer states."""
    if model_name == "qwen3-235b-a22b":
        return TrainingSpec(expert_parallel=8, optimizer_offload=True)
    return TrainingSpec()
