"""Training-system settings that are neither model architecture nor hardware (docs/simulator.md,
docs/validation.md, docs/paper_figures.md).

Precisions, optimizer placement, expert parallelism, the SP backend, activation checkpointing, the
attention kernel, whether element-wise work is fused, FSDP prefetch, and the memory headroom that
turns HBM into a per-GPU token budget. Named presets (:data:`TRAINING_PRESETS`) are data: ``fsdp``
is plain FSDP with today's defaults, ``paper-235b`` the NSP paper's Qwen3-235B setup (section 6.1:
EP=8, CPU-offloaded optimizer states). A workload asks for a preset by name and may override any
field; the model's name never chooses them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from enum import StrEnum
from typing import Any

from nspsim.sp_tree import is_power_of_two
from nspsim.specs.backend import BACKENDS, SPBackend

GIB = 1024**3


class Checkpointing(StrEnum):
    """What a decoder layer keeps for backward and what it recomputes (activation checkpointing).

    * ``none``: every intermediate is kept; nothing is recomputed.
    * ``selective``: the layer input and the FFN input are kept; the FFN (or MoE) forward is recomputed
      in backward (nspsim's historical default).
    * ``op``: op-level selective checkpointing as torchtitan's ``selective_ac_option = "op"`` does it:
      the attention kernel's output and the outputs of the 1st, 3rd, ... matmul are kept; element-wise
      work and the other matmuls rerun (wk, wo and w3 for Llama: 36% of a Llama-3-8B layer's matmul
      FLOPs, 61% of a Qwen3-30B-A3B layer's, whose routed down projection is second to last).
    * ``full``: only the layer input is kept; the whole layer forward, attention included, reruns.
    """

    NONE = "none"
    SELECTIVE = "selective"
    OP = "op"
    FULL = "full"


CHECKPOINTING: tuple[str, ...] = tuple(c.value for c in Checkpointing)


class AttentionKernel(StrEnum):
    """The attention kernel whose published throughput curve prices the attention core
    (:mod:`nspsim.specs.kernels`): FlashAttention-2, FlashAttention-3 (Hopper only), cuDNN's fused
    attention (Hopper), FlashAttention in Triton as the FlashAttention repository shipped it (A100,
    MosaicML's ``attn_impl = "triton"``), or the GPU spec's own saturation curve (``spec``)."""

    FA2 = "fa2"
    FA3 = "fa3"
    CUDNN = "cudnn"
    TRITON = "triton"
    SPEC = "spec"


ATTENTION_KERNELS: tuple[str, ...] = tuple(k.value for k in AttentionKernel)


@dataclass(frozen=True, kw_only=True)
class TrainingSpec:
    """FSDP mixed-precision training settings.

    Model states are sharded over all GPUs (FSDP): ``param_bytes`` + ``grad_bytes`` per parameter stay
    on the GPU, plus ``optim_bytes`` (fp32 master and Adam moments) unless ``optimizer_offload``.
    ``token_budget`` overrides the derived per-GPU token budget B_tok. ``cpu_adam_params_per_s`` is the
    host optimizer rate per GPU when states are offloaded. ``checkpointing`` and ``attention_kernel``
    are :class:`Checkpointing` and :class:`AttentionKernel`; ``fused_elementwise`` says whether norms,
    activations, RoPE, residuals and the loss run as fused kernels (``torch.compile``, Megatron's fused
    kernels) or op by op (eager PyTorch), which sets their HBM traffic (:mod:`nspsim.cost.elementwise`).
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
    checkpointing: Checkpointing = Checkpointing.SELECTIVE
    attention_kernel: AttentionKernel = AttentionKernel.FA2
    fused_elementwise: bool = True

    def __post_init__(self) -> None:
        if min(self.act_bytes, self.param_bytes, self.grad_bytes) <= 0 or self.optim_bytes < 0:
            raise ValueError("byte sizes of activations, parameters and gradients must be positive")
        if isinstance(self.expert_parallel, bool) or not is_power_of_two(self.expert_parallel):
            raise ValueError(f"expert_parallel must be a power of two, got {self.expert_parallel}")
        if not 0 < self.hbm_usable_fraction <= 1:
            raise ValueError(f"hbm_usable_fraction must be in (0, 1], got {self.hbm_usable_fraction}")
        if self.reserved_bytes < 0 or self.fsdp_prefetch_layers < 0:
            raise ValueError("reserved_bytes and fsdp_prefetch_layers must be >= 0")
        if self.token_budget is not None and self.token_budget <= 0:
            raise ValueError(f"token budget must be positive, got {self.token_budget}")
        if self.cpu_adam_params_per_s <= 0:
            raise ValueError(f"cpu_adam_params_per_s must be positive, got {self.cpu_adam_params_per_s}")
        for name in ("optimizer_offload", "fused_elementwise"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be true or false, got {getattr(self, name)!r}")
        _member(self, "backend", SPBackend, BACKENDS, "SP backend")
        _member(self, "checkpointing", Checkpointing, CHECKPOINTING, "checkpointing mode")
        _member(self, "attention_kernel", AttentionKernel, ATTENTION_KERNELS, "attention kernel")


def training_label(spec: TrainingSpec) -> str:
    """The settings that change what a step costs, as one canonical line (plans record it in their
    metadata, so simulating a plan with other settings can be flagged)."""
    values = ((name, getattr(spec, name)) for name in TRAINING_FIELDS)
    return " ".join(f"{name}={str(v).lower() if isinstance(v, bool) else v}" for name, v in values)


def parse_training_label(text: str) -> dict[str, Any]:
    """The settings of a :func:`training_label` line (``ValueError`` for a line it did not write)."""
    types = {f.name: f.type for f in fields(TrainingSpec)}
    out: dict[str, Any] = {}
    for item in str(text).split():
        name, _, value = item.partition("=")
        if name not in TRAINING_FIELDS or not value:
            raise ValueError(f"not a training-settings label: {text!r}")
        if str(types[name]) == "bool":
            if value not in ("true", "false"):
                raise ValueError(f"not a training-settings label: {text!r}")
            out[name] = value == "true"
        elif str(types[name]) == "int":
            try:
                out[name] = int(value)
            except ValueError:
                raise ValueError(f"not a training-settings label: {text!r}") from None
        else:
            out[name] = value
    return out


def _member(spec: TrainingSpec, name: str, enum: type[StrEnum], known: tuple[str, ...], what: str) -> None:
    value = getattr(spec, name)
    if value not in known:
        raise ValueError(f"unknown {what} {value!r} (known: {', '.join(known)})")
    object.__setattr__(spec, name, enum(value))  # a plain string becomes the member


TRAINING_PRESETS: Mapping[str, Mapping[str, Any]] = {
    "fsdp": {},
    "paper-235b": {"expert_parallel": 8, "optimizer_offload": True},
}
"""Named training setups (overrides of :class:`TrainingSpec`'s defaults). ``paper-235b`` is the NSP
paper's Qwen3-235B-A22B setting (section 6.1: expert parallelism 8, optimizer states on the host)."""

DEFAULT_TRAINING = "fsdp"

TRAINING_FIELDS: tuple[str, ...] = (
    "checkpointing",
    "attention_kernel",
    "fused_elementwise",
    "expert_parallel",
    "optimizer_offload",
    "fsdp_prefetch_layers",
)
"""The settings a workload, the CLI, a sweep spec or the API may set beside a preset."""


def training_preset(name: str, **overrides: Any) -> TrainingSpec:
    """The named preset with ``overrides`` (``None`` values ignored); ``ValueError`` for an unknown
    preset or field."""
    try:
        base = TRAINING_PRESETS[name]
    except KeyError:
        raise ValueError(f"unknown training preset {name!r} (known: {', '.join(TRAINING_PRESETS)})") from None
    known = {f.name for f in fields(TrainingSpec)}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise ValueError(f"unknown training setting(s) {', '.join(unknown)} (known: {', '.join(sorted(known))})")
    return replace(TrainingSpec(**base), **{k: v for k, v in overrides.items() if v is not None})
