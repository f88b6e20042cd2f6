"""Hardware specs and named cluster presets (SPEC section 7).

A cluster is ``num_gpus`` identical GPUs in hosts of ``gpus_per_node`` joined by NVLink; across hosts
each GPU has its own NIC. Bandwidths are *effective* per-GPU collective bandwidths (what a large
all-to-all achieves), not link peaks; latencies are per collective. Facts (peak FLOP/s, HBM, link
generations) come from vendor data and SPEC section 7; achieved-throughput figures are design
defaults that a measured profile (``nspsim.cost.profile``) overrides.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass

from nspsim.sp_tree import is_power_of_two

GIB = 1024**3


MAX_GPUS = 2**20
"""The largest cluster: 2**20 GPUs plan in ~5 s, 2**30 ran out of 24 GB (no cluster has a million GPUs;
the profile's largest SP degree is the same)."""


@dataclass(frozen=True, kw_only=True)
class GpuSpec:
    """One accelerator: peak and achieved bf16 throughput (FLOP/s), HBM capacity (bytes) and bandwidth (B/s).

    ``gemm_tile_rows`` is the row (M) extent of the GEMM tile its kernels compute at once: a GEMM over
    M rows costs ceil(M / tile) full tiles, so each GEMM (each expert's, in a grouped GEMM) wastes
    (tile - 1) / 2 rows on average (:mod:`nspsim.cost.analytic`). 128 on Hopper: CUTLASS's SM90
    bf16 GEMM and grouped-GEMM tiles are 128 rows (``Shape<_128, ...>`` tile shapes), and DeepGEMM
    aligns every expert's rows to its M block of 128 (``get_mk_alignment_for_contiguous_layout``).
    """

    name: str
    peak_flops: float
    matmul_flops: float
    attn_fwd_flops: float
    attn_bwd_flops: float
    hbm_bytes: float
    hbm_bw: float
    gemm_tile_rows: int = 128

    def __post_init__(self) -> None:
        rates = (
            self.peak_flops,
            self.matmul_flops,
            self.attn_fwd_flops,
            self.attn_bwd_flops,
            self.hbm_bytes,
            self.hbm_bw,
        )
        if min(rates) <= 0:
            raise ValueError(f"GPU {self.name!r}: throughputs and HBM must be positive")
        if max(self.matmul_flops, self.attn_fwd_flops, self.attn_bwd_flops) > self.peak_flops:
            raise ValueError(f"GPU {self.name!r}: an achieved throughput exceeds the peak")
        if isinstance(self.gemm_tile_rows, bool) or not isinstance(self.gemm_tile_rows, int) or self.gemm_tile_rows < 1:
            raise ValueError(
                f"GPU {self.name!r}: gemm_tile_rows must be a positive integer, got {self.gemm_tile_rows!r}"
            )


@dataclass(frozen=True, kw_only=True)
class ClusterSpec:
    """A homogeneous GPU cluster: per-GPU compute, NVLink inside a host, one NIC per GPU across hosts.

    ``nvlink_bw`` and ``nic_bw`` are effective per-GPU collective bandwidths; ``host_bw`` is the
    effective GPU-to-host (PCIe) bandwidth used by optimizer offload.
    """

    name: str
    gpu: GpuSpec
    num_gpus: int
    gpus_per_node: int = 8
    nvlink_bw: float
    nic_bw: float
    host_bw: float
    intra_latency_s: float
    inter_latency_s: float

    def __post_init__(self) -> None:
        if not is_power_of_two(self.num_gpus):
            raise ValueError(f"cluster {self.name!r}: number of GPUs must be a power of two, got {self.num_gpus}")
        if self.num_gpus > MAX_GPUS:
            raise ValueError(
                f"cluster {self.name!r}: at most {MAX_GPUS:,} (2**20) GPUs, got {self.num_gpus:,} "
                "(the planners' per-GPU arrays would exhaust memory)"
            )
        if not is_power_of_two(self.gpus_per_node) or self.gpus_per_node > self.num_gpus:
            raise ValueError(
                f"cluster {self.name!r}: gpus_per_node must be a power of two <= num_gpus, got {self.gpus_per_node}"
            )
        if min(self.nvlink_bw, self.nic_bw, self.host_bw) <= 0 or min(self.intra_latency_s, self.inter_latency_s) < 0:
            raise ValueError(f"cluster {self.name!r}: bandwidths must be positive and latencies >= 0")

    @property
    def num_nodes(self) -> int:
        """Number of hosts."""
        return self.num_gpus // self.gpus_per_node

    @property
    def label(self) -> str:
        """Short identity such as ``h100x64``."""
        return f"{self.name}x{self.num_gpus}"

    def fingerprint(self) -> str:
        """Stable 16-hex-digit hash of every field: plans record it to refuse other clusters."""
        return _fingerprint(asdict(self))

    def hosts_spanned(self, group_size: int) -> int:
        """Hosts an aligned group of ``group_size`` consecutive ranks spans."""
        return max(1, group_size // self.gpus_per_node)

    def latency(self, group_size: int) -> float:
        """Per-collective latency for an aligned group."""
        return self.inter_latency_s if group_size > self.gpus_per_node else self.intra_latency_s


def _fingerprint(obj: object) -> str:
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


A100 = GpuSpec(
    name="A100-SXM4-80GB",
    peak_flops=312e12,
    matmul_flops=230e12,
    attn_fwd_flops=190e12,
    attn_bwd_flops=150e12,
    hbm_bytes=80 * GIB,
    hbm_bw=2.0e12,
)
H100 = GpuSpec(
    name="H100-SXM5-80GB",
    peak_flops=989e12,
    matmul_flops=700e12,
    attn_fwd_flops=420e12,
    attn_bwd_flops=330e12,
    hbm_bytes=80 * GIB,
    hbm_bw=3.35e12,
)
H200 = GpuSpec(
    name="H200-SXM-141GB",
    peak_flops=989e12,
    matmul_flops=790e12,
    attn_fwd_flops=450e12,
    attn_bwd_flops=360e12,
    hbm_bytes=141e9,
    hbm_bw=4.8e12,
)


H20 = GpuSpec(
    name="H20-96GB",
    peak_flops=148e12,
    matmul_flops=148e12 * 700 / 989,
    attn_fwd_flops=148e12 * 420 / 989,
    attn_bwd_flops=148e12 * 330 / 989,
    hbm_bytes=96e9,
    hbm_bw=4.0e12,
)
"""NVIDIA H20 (datasheet: 148 TFLOP/s dense BF16, 96 GB HBM3 at 4.0 TB/s, NVLink 900 GB/s): a Hopper
with about 1/7 of H100's compute and the same links. Its achieved fractions of peak (GEMM, attention
forward and backward) are assumed to be H100's, which a measured profile should replace."""


def _preset(name: str, gpu: GpuSpec, num_gpus: int, *, nvlink_bw: float, nic_bw: float, host_bw: float) -> ClusterSpec:
    return ClusterSpec(
        name=name,
        gpu=gpu,
        num_gpus=num_gpus,
        gpus_per_node=min(8, num_gpus),
        nvlink_bw=nvlink_bw,
        nic_bw=nic_bw,
        host_bw=host_bw,
        intra_latency_s=10e-6,
        inter_latency_s=25e-6,
    )


def a100(num_gpus: int = 64) -> ClusterSpec:
    """A100-80GB hosts: NVLink3 (600 GB/s bidirectional, ~240 GB/s effective), one 200 Gb/s HDR NIC per GPU."""
    return _preset("a100", A100, num_gpus, nvlink_bw=240e9, nic_bw=23e9, host_bw=22e9)


def h100(num_gpus: int = 64) -> ClusterSpec:
    """H100-80GB hosts: NVLink4 (900 GB/s bidirectional, ~370 GB/s effective), one 400 Gb/s NIC per GPU (~46 GB/s)."""
    return _preset("h100", H100, num_gpus, nvlink_bw=370e9, nic_bw=46e9, host_bw=45e9)


def h200(num_gpus: int = 64) -> ClusterSpec:
    """H200-141GB hosts: H100 links and compute, ~790 TFLOP/s measured GEMM, 141 GB HBM."""
    return _preset("h200", H200, num_gpus, nvlink_bw=370e9, nic_bw=46e9, host_bw=45e9)


def h100_800g(num_gpus: int = 64) -> ClusterSpec:
    """H100 hosts with an 800 Gb/s NIC per GPU (ConnectX-8 class; ~92 GB/s effective, H100's 400 Gb/s
    efficiency): the cheaper cross-host all-to-all of the sensitivity study."""
    return _preset("h100-800g", H100, num_gpus, nvlink_bw=370e9, nic_bw=92e9, host_bw=45e9)


def h200_800g(num_gpus: int = 64) -> ClusterSpec:
    """H200 hosts with an 800 Gb/s NIC per GPU (~92 GB/s effective), as :func:`h100_800g`."""
    return _preset("h200-800g", H200, num_gpus, nvlink_bw=370e9, nic_bw=92e9, host_bw=45e9)


def h20(num_gpus: int = 64) -> ClusterSpec:
    """H20-96GB hosts (:data:`H20`): H100's NVLink4 and 400 Gb/s NIC per GPU, fewer FLOP/s."""
    return _preset("h20", H20, num_gpus, nvlink_bw=370e9, nic_bw=46e9, host_bw=45e9)


CPU_GLOO = GpuSpec(
    name="cpu-gloo-1thread",
    peak_flops=100e9,
    matmul_flops=33e9,
    attn_fwd_flops=11e9,
    attn_bwd_flops=8e9,
    hbm_bytes=8 * GIB,
    hbm_bw=10e9,
    gemm_tile_rows=1,  # CPU BLAS micro-kernels are a few rows; the runtime's MoE loops over experts
)


def cpu(num_gpus: int = 4) -> ClusterSpec:
    """CPU hosts running the runtime (``runtime.train``) under gloo: one process, one thread, one "GPU"
    per rank, up to 8 ranks per host (runs of <= 8 ranks are one host).

    These figures are planning defaults, not this machine's truth: they were read once off a 2-core
    development machine (tiny-model GEMMs ~28 GFLOP/s, CPU flash attention ~8.6 / ~6 GFLOP/s at 2048
    tokens, gloo all-to-all ~0.4 ms + ~0.7 GB/s, halved here because the analytic model counts 2-byte
    activations where the CPU runtime moves fp32), and the next machine differs by up to ~4x in each
    (issue 11 measured 119 GFLOP/s GEMM, 22 / 18 GFLOP/s attention and 5.3 GB/s elsewhere). To predict
    runs on the machine at hand, measure it: ``python -m runtime.calibrate -o profile.json`` writes a
    cost profile that replaces every coefficient the simulator charges, and ``python -m
    runtime.validate`` reports how well the predictions then match measured runs. ``hbm_bytes`` is
    one rank's share of host memory.
    """
    return ClusterSpec(
        name="cpu",
        gpu=CPU_GLOO,
        num_gpus=num_gpus,
        gpus_per_node=min(8, num_gpus),
        nvlink_bw=0.35e9,
        nic_bw=0.35e9,
        host_bw=10e9,
        intra_latency_s=0.4e-3,
        inter_latency_s=0.4e-3,
    )


CLUSTER_PRESETS: Mapping[str, Callable[[int], ClusterSpec]] = {
    "a100": a100,
    "h100": h100,
    "h200": h200,
    "h100-800g": h100_800g,
    "h200-800g": h200_800g,
    "h20": h20,
    "cpu": cpu,
}


def get_cluster(name: str, num_gpus: int = 64) -> ClusterSpec:
    """Cluster preset by name with ``num_gpus`` GPUs; ``ValueError`` for unknown names or bad counts."""
    try:
        factory = CLUSTER_PRESETS[name]
    except KeyError:
        raise ValueError(f"unknown cluster preset {name!r} (known: {', '.join(CLUSTER_PRESETS)})") from None
    return factory(num_gpus)
