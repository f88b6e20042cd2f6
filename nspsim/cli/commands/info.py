"""``nspsim info``: derived model, cluster and memory figures of a workload."""

from __future__ import annotations

import argparse
from typing import Any

from nspsim.cli.flags import add_workload_args, emit, warn_token_budget, workload_config
from nspsim.specs.clusters import describe_cluster
from nspsim.units import format_bytes, format_tokens
from nspsim.workload import build_workload


def cmd_info(args: argparse.Namespace) -> int:
    """Print parameter counts, the resolved cluster description, spmax, memory split and B_tok."""
    wl = build_workload(workload_config(args))
    warn_token_budget(wl)
    mem, model = wl.memory, wl.model
    data = {
        "config": wl.config.to_dict(),
        "cluster": describe_cluster(wl.cluster),
        "total_params": model.total_params,
        "active_params": model.active_params,
        "spmax": wl.tree.spmax,
        "token_budget": wl.token_budget,
        "memory_token_budget": mem.derived_token_budget,
        "state_bytes_per_gpu": mem.state_bytes,
        "buffer_bytes_per_gpu": mem.buffer_bytes,
        "activation_capacity_bytes": mem.activation_capacity,
        "activation_bytes_per_token_recompute": mem.keep_bytes_per_token + mem.working_bytes_per_token,
        "training": {
            "preset": wl.config.training,
            "checkpointing": str(wl.training.checkpointing),
            "attention_kernel": str(wl.training.attention_kernel),
            "fused_elementwise": wl.training.fused_elementwise,
            "expert_parallel": wl.training.expert_parallel,
            "optimizer_offload": wl.training.optimizer_offload,
            "fsdp_prefetch_layers": wl.training.fsdp_prefetch_layers,
        },
    }
    t = wl.training
    text = "\n".join(
        [
            f"model    {model.name}: {model.total_params / 1e9:.2f}B params, {model.active_params / 1e9:.2f}B active",
            f"cluster  {wl.cluster.label}: {wl.cluster.gpu.name}, {wl.cluster.num_nodes} hosts of "
            f"{wl.cluster.gpus_per_node}",
            f"spmax    {wl.tree.spmax}",
            f"training {wl.config.training}: checkpointing {t.checkpointing}, attention {t.attention_kernel}, "
            f"element-wise {'fused' if t.fused_elementwise else 'eager'}, EP {t.expert_parallel}, "
            f"optimizer {'on the host' if t.optimizer_offload else 'on the GPU'}, "
            f"FSDP prefetch {t.fsdp_prefetch_layers}",
            f"memory   states {format_bytes(mem.state_bytes)}, buffers {format_bytes(mem.buffer_bytes)}, "
            f"activations {format_bytes(mem.activation_capacity)} per GPU",
            f"budget   B_tok = {wl.token_budget} sharded tokens per GPU ({format_tokens(wl.token_budget)})"
            + ("" if wl.config.token_budget is None else f"; the memory model fits {mem.derived_token_budget}"),
        ]
    )
    emit(args, data, text)
    return 0


def register(sub: argparse._SubParsersAction[Any]) -> None:
    """Add ``info``."""
    info = sub.add_parser("info", help="derived model/cluster/memory figures")
    add_workload_args(info)
    info.add_argument("--json", action="store_true", help="print JSON")
    info.set_defaults(func=cmd_info)
