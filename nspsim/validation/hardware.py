"""The parts a reference row names (its ``gpu``) as nspsim hardware: GPU specs and cluster presets.

A row's ``gpu`` is the part the source ran on (``h100``, ``a100-80g``, ``h100-96g-500w``, ...). Each
known name maps to a cluster preset (links, latencies) and the GPU spec of that exact part; a name the
model has no spec for (a Blackwell part, a PCIe card) makes its rows "not expressible", never
priced as another part. A row may state its network (``nic_gbps_per_gpu``: the NIC line rate per GPU
in Gb/s, for cross-host collectives on clouds whose fabric differs from the preset's); it then
replaces the preset's NIC bandwidth in the same proportion as the preset's effective/line ratio.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from nspsim.specs.cluster import ClusterSpec
from nspsim.specs.clusters import get_cluster

ROW_GPUS: Mapping[str, str] = {
    "a100-80g": "a100",
    "a100-sxm": "a100",
    "a100": "a100",
    "a100-unspecified": "a100",
    "a100-40g": "a100-40g",
    "h100": "h100",
    "h100-96g-500w": "h100-96g",
    "h800": "h800",
    "h200": "h200",
}
"""Row GPU name -> the cluster preset of that exact part (its GPU spec and links). ``a100``, ``a100-sxm``
and ``a100-unspecified`` are A100 SXM parts whose memory size the source does not state: compute and
NVLink are the same."""


ROW_KERNELS: Mapping[str, str] = {"fa2": "fa2", "sdpa-flash": "fa2", "fa3": "fa3", "cudnn": "cudnn", "triton": "triton"}
"""Row kernel names -> nspsim attention kernels (torch SDPA's flash backend is FlashAttention-2)."""


def family_of(gpu: str) -> str | None:
    """The kernel family of a row's GPU name (``a100``, ``h100``), ``None`` when unknown."""
    preset = ROW_GPUS.get(gpu)
    return None if preset is None else get_cluster(preset, 8).gpu.family


def row_cluster(gpu: str, num_gpus: int, gpus_per_node: int, nic_gbps_per_gpu: float | None = None) -> ClusterSpec:
    """The cluster a row ran on; ``ValueError`` (the reason the row cannot be expressed) otherwise."""
    if gpu not in ROW_GPUS:
        raise ValueError(f"no GPU spec for {gpu!r} (known: {', '.join(ROW_GPUS)})")
    preset = ROW_GPUS[gpu]
    base = get_cluster(preset, max(num_gpus, 1))
    cluster = replace(base, gpus_per_node=min(gpus_per_node, num_gpus))
    if nic_gbps_per_gpu is not None:
        line_rate = PRESET_NIC_LINE_GBPS[preset]
        cluster = replace(cluster, nic_bw=cluster.nic_bw * nic_gbps_per_gpu / line_rate)
    return cluster


PRESET_NIC_LINE_GBPS: Mapping[str, float] = {
    "a100": 200.0,
    "a100-40g": 200.0,
    "h100": 400.0,
    "h100-96g": 400.0,
    "h800": 400.0,
    "h200": 400.0,
}
"""The NIC line rate per GPU (Gb/s) each preset's ``nic_bw`` models (HDR 200 Gb/s on A100 hosts,
NDR 400 Gb/s on Hopper hosts)."""
