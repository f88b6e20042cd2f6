"""This process's place in the run: ``init_process_group`` from torchrun's environment.

Under torchrun (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_*`` set) every process joins the
world; without it the process is a world of one on a free local port, so ``python -m nspsim_runtime.train``
needs no launcher. On CUDA the data path is NCCL and a separate gloo group carries the control
traffic (the broadcast plans and gathered times, pickled Python objects, stay on the host); on CPU
gloo carries both. A caller that already set up the world (tests, notebooks) keeps it, on the CPU.
Trade-off: one fixed device choice per process (``--device``), no elastic membership.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist


@dataclass(frozen=True, kw_only=True)
class Dist:
    """This process's place in the run (``control_group`` None: the default world group)."""

    rank: int
    world: int
    local_rank: int
    device: torch.device
    control_group: dist.ProcessGroup | None


TORCHRUN_ENV = "TORCHELASTIC_RUN_ID"
"""Set by torchrun (torch.distributed.elastic) in every worker's environment, and by nothing else."""


def under_torchrun() -> bool:
    """Whether torchrun started this process (so its agent, the parent, supervises it)."""
    return TORCHRUN_ENV in os.environ


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free now (the OS picks it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def init_distributed(*, device: str, comm_timeout_s: float) -> Dist:
    """``init_process_group`` from torchrun's environment (or as a single process without it);
    ``device`` is ``auto``, ``cpu`` or ``cuda``, ``comm_timeout_s`` every group's collective timeout."""
    if dist.is_initialized():  # launched by a caller that already set up the world (tests, notebooks)
        return Dist(
            rank=dist.get_rank(),
            world=dist.get_world_size(),
            local_rank=0,
            device=torch.device("cpu"),
            control_group=dist.group.WORLD,
        )
    if "RANK" not in os.environ:
        os.environ.update(
            RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port())
        )
    use_cuda = device == "cuda" or (device == "auto" and torch.cuda.is_available())
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda but no CUDA device is visible")
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    timeout = timedelta(seconds=comm_timeout_s)
    if use_cuda:
        torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl" if use_cuda else "gloo", timeout=timeout)
    control = dist.new_group(backend="gloo", timeout=timeout) if use_cuda else dist.group.WORLD
    torch.set_num_threads(max(1, torch.get_num_threads() if use_cuda else 1))
    where = torch.device("cuda", local_rank) if use_cuda else torch.device("cpu")
    return Dist(
        rank=dist.get_rank(), world=dist.get_world_size(), local_rank=local_rank, device=where, control_group=control
    )
