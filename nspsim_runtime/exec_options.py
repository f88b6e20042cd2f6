"""The executor's settings as one frozen value (torch-free, so ``nspsim_runtime.train`` parses and validates
them before torch loads): streaming lookahead, recomputation policy, attention kernel, gradient
synchronisation, phase-boundary synchronisation and autocast. ``nspsim_runtime.train``'s flags take their
defaults from these fields and its :class:`~nspsim_runtime.training.args.TrainArgs` nests one."""

from __future__ import annotations

from dataclasses import dataclass

from nspsim.execution.recompute import RECOMPUTE_CHOICES, RecomputeMode

GRAD_SYNC_MODES = ("fsdp", "allreduce")
ACCUMULATE_SYNC_MODES = ("pass", "window")
"""When an accumulation window's gradients are synchronised under FSDP2: after every pass (``pass``: each
pass reduce-scatters into the sharded gradients, as simulated) or once, after the last (``window``)."""


def pass_syncs(*, last: bool, accumulate_sync: str, grad_sync: str) -> bool:
    """Whether a pass of an accumulation window synchronises its gradients: the last pass always; the
    others only under FSDP2 with ``accumulate_sync="pass"`` (FSDP2 adds each reduced shard to the sharded
    gradient; a flat all-reduce of the running sum would count the earlier passes again, so with
    ``grad_sync="allreduce"`` it runs once per window)."""
    return last or (grad_sync == "fsdp" and accumulate_sync == "pass")


@dataclass(frozen=True, kw_only=True)
class ExecOptions:
    """Executor settings: streaming lookahead (``None``: all prologues first, the paper's queues; ``k``:
    at most ``k`` prologues ahead; 0 = serial phases), recomputation policy, kernel,
    gradient synchronisation. ``sync_timing`` synchronises the GPU at every phase boundary so the
    breakdown is device time (it serialises the streams, so it defeats phase streaming); without it
    GPU phase times are host-side launch times. CPU timing is exact either way. ``autocast`` (e.g.
    ``"bfloat16"``) runs forward and backward under ``torch.autocast`` (fp32 master weights)."""

    lookahead: int | None = None
    recompute: RecomputeMode = RecomputeMode.PLAN
    kernel: str = "auto"
    grad_sync: str = "fsdp"
    sync_timing: bool = False
    autocast: str | None = None

    def __post_init__(self) -> None:
        if self.lookahead is not None and self.lookahead < 0:
            raise ValueError(f"lookahead must be >= 0, got {self.lookahead}")
        if self.recompute not in RECOMPUTE_CHOICES:
            raise ValueError(f"recompute must be one of {', '.join(RECOMPUTE_CHOICES)}, got {self.recompute!r}")
        object.__setattr__(self, "recompute", RecomputeMode(self.recompute))  # a plain "all" becomes the member
        if self.grad_sync not in GRAD_SYNC_MODES:
            raise ValueError(f"grad_sync must be one of {', '.join(GRAD_SYNC_MODES)}, got {self.grad_sync!r}")
