"""Hardware specs and named cluster presets (docs/validation.md).

A cluster is ``num_gpus`` identical GPUs in hosts of ``gpus_per_node`` joined by NVLink; across hosts
each GPU has its own NIC. Bandwidths are *effective* per-GPU collective bandwidths (what a large
all-to-all achieves), not link peaks; latencies are per collective. Facts (peak FLOP/s, HBM, link
generations) come from vendor data and docs/validation.md; achieved-throughput figures are design
defaults that a measured profile (``nspsim.cost.profile``) overrides.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, replace

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

    ``matmul_flops`` is the best achievable bf16 GEMM rate (a measured "maximum achievable matmul
    FLOPS", not the datasheet peak). ``family`` names the chip whose published attention-kernel curves
    (:mod:`nspsim.specs.kernels`) price this GPU's attention, scaled by ``kernel_scale`` (a part with
    fewer FLOP/s than the chip the curves were measured on). ``hbm_stream_efficiency`` is the measured
    fraction of ``hbm_bw`` that streaming kernels reach (element-wise work, :mod:`nspsim.cost.elementwise`).
    """

    name: str
    peak_flops: float
    matmul_flops: float
    attn_fwd_flops: float
    attn_bwd_flops: float
    hbm_bytes: float
    hbm_bw: float
    gemm_tile_rows: int = 128
    family: str = ""
    kernel_scale: float = 1.0
    hbm_stream_efficiency: float = 1.0

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
        if not (0 < self.kernel_scale <= 1 and 0 < self.hbm_stream_efficiency <= 1):
            raise ValueError(f"GPU {self.name!r}: kernel_scale and hbm_stream_efficiency must be in (0, 1]")
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
    alltoall_peer_latency_s: float = 0.0

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
        latencies = (self.intra_latency_s, self.inter_latency_s, self.alltoall_peer_latency_s)
        if min(self.nvlink_bw, self.nic_bw, self.host_bw) <= 0 or min(latencies) < 0:
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

    def alltoall_latency(self, group_size: int) -> float:
        """Latency of an all-to-all: the group's collective latency plus one peer latency per peer (NCCL
        runs an all-to-all as a send and a receive to every peer)."""
        if group_size <= 1:
            return 0.0
        return self.latency(group_size) + self.alltoall_peer_latency_s * (group_size - 1)


def _fingerprint(obj: object) -> str:
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


# Sources of the GPU figures (docs/validation.md lists them with commits):
# * peak bf16 FLOP/s, HBM size and bandwidth: vendor datasheets as tabulated in stas00/ml-engineering
#   compute/accelerator/README.md @7bc7c305 and torchtitan's get_peak_flops (torchtitan/tools/utils.py);
# * matmul_flops: that README's "Maximum Achievable Matmul FLOPS" table (bf16, best shape; A100 SXM
#   271.2, H100 SXM 794.5 TFLOP/s, "H200 is the same"), also rows mamf-* of the reference set;
# * hbm_stream_efficiency: BabelStream triad over the datasheet bandwidth, Azure/AI-benchmarking-guide
#   Azure_Results/ND_{A100_v4,H100_v5,H200_v5}_results.md (1.70 / 2.97 / 4.15 TB/s);
# * attn_*_flops: the saturation curve used only with attention_kernel = "spec" (the historical FA2
#   design figures); published kernel curves live in nspsim.specs.kernels.
A100 = GpuSpec(
    name="A100-SXM4-80GB",
    peak_flops=312e12,
    matmul_flops=271.2e12,
    attn_fwd_flops=190e12,
    attn_bwd_flops=150e12,
    hbm_bytes=80 * GIB,
    hbm_bw=2.039e12,
    family="a100",
    hbm_stream_efficiency=1.70 / 2.039,
)
A100_40G = replace(A100, name="A100-SXM4-40GB", hbm_bytes=40 * GIB, hbm_bw=1.555e12)
"""A100 SXM4 40GB: the 80GB part's chip with 40 GB of HBM2 at 1.555 TB/s (NVIDIA A100 datasheet)."""
H100 = GpuSpec(
    name="H100-SXM5-80GB",
    peak_flops=989e12,
    matmul_flops=794.5e12,
    attn_fwd_flops=420e12,
    attn_bwd_flops=330e12,
    hbm_bytes=80 * GIB,
    hbm_bw=3.35e12,
    family="h100",
    hbm_stream_efficiency=2.97 / 3.35,
)
H100_500W_PEAK = 835e12 + (989e12 - 835e12) * (500 - 400) / (700 - 400)
"""Dense bf16 peak of the 500 W H100: "between SXM and NVL" (torchtitan
benchmarks/llama3_h100_202412_torchtitan.md @820504e2, footnote 2), placed there linearly in board
power between the H100 NVL (835e12 at 400 W) and the H100 SXM (989e12 at 700 W), both datasheet figures
(torchtitan get_peak_flops; stas00/ml-engineering compute/accelerator/README.md): 886e12. An
assumption: no GEMM or clock measurement of the 500 W cap is published."""
H100_96G_500W = replace(
    H100,
    name="H100-SXM-96GB-HBM2e-500W",
    peak_flops=H100_500W_PEAK,
    matmul_flops=794.5e12 * H100_500W_PEAK / 989e12,
    kernel_scale=H100_500W_PEAK / 989e12,
    hbm_bytes=96e9,
    hbm_bw=2.4e12,
)
"""The H100 SXM with 96 GB of HBM2e at 2.4 TB/s run at a 500 W power limit (Meta's Grand Teton hosts;
torchtitan benchmarks/llama3_h100_202412_torchtitan.md @820504e2): :data:`H100_500W_PEAK`, with the
700 W part's measured GEMM and attention efficiencies (``kernel_scale``)."""
H800 = replace(H100, name="H800-SXM5-80GB")
"""H800: an H100 SXM5 with NVLink cut to 400 GB/s bidirectional (its cluster preset's links); the
same compute (989e12 dense bf16 in volcengine/verl verl/utils/flops_counter.py @02cf355f)."""
H200 = GpuSpec(
    name="H200-SXM-141GB",
    peak_flops=989e12,
    matmul_flops=794.5e12,
    attn_fwd_flops=450e12,
    attn_bwd_flops=360e12,
    hbm_bytes=141e9,
    hbm_bw=4.8e12,
    family="h100",
    hbm_stream_efficiency=4.15 / 4.8,
)


H20 = GpuSpec(
    name="H20-96GB",
    peak_flops=148e12,
    matmul_flops=148e12 * 794.5 / 989,
    attn_fwd_flops=148e12 * 420 / 989,
    attn_bwd_flops=148e12 * 330 / 989,
    hbm_bytes=96e9,
    hbm_bw=4.0e12,
    family="h100",
    kernel_scale=148 / 989,
    hbm_stream_efficiency=2.97 / 3.35,
)
"""NVIDIA H20 (datasheet: 148 TFLOP/s dense BF16, 96 GB HBM3 at 4.0 TB/s, NVLink 900 GB/s): a Hopper
with about 1/7 of H100's compute and the same links. Its achieved fractions of peak (GEMM, attention
kernels, streaming bandwidth) are assumed to be H100's (``kernel_scale`` = 148/989), which a
measured profile should replace."""


INTRA_LATENCY_S = 3.43e-05
INTER_LATENCY_S = 1.268e-04
ALLTOALL_PEER_LATENCY_S = 2.4e-06
"""NCCL collective latencies inside a host, across hosts, and per all-to-all peer: least-squares fits
(:func:`nspsim.validation.fit.fit_link_latencies`) to the published nccl-tests time sweeps of
all-gather and all-to-all on H100 hosts in the reference set (one host, 2 and 10 hosts over
InfiniBand; 2 hosts over GPUDirect-TCPXO). No such sweep is published for A100 hosts, so every GPU
preset uses them; ``tests/validation/test_validation.py`` refits and checks them."""


def _preset(name: str, gpu: GpuSpec, num_gpus: int, *, nvlink_bw: float, nic_bw: float, host_bw: float) -> ClusterSpec:
    return ClusterSpec(
        name=name,
        gpu=gpu,
        num_gpus=num_gpus,
        gpus_per_node=min(8, num_gpus),
        nvlink_bw=nvlink_bw,
        nic_bw=nic_bw,
        host_bw=host_bw,
        intra_latency_s=INTRA_LATENCY_S,
        inter_latency_s=INTER_LATENCY_S,
        alltoall_peer_latency_s=ALLTOALL_PEER_LATENCY_S,
    )


def a100(num_gpus: int = 64) -> ClusterSpec:
    """A100-80GB hosts: NVLink3 (600 GB/s bidirectional, ~240 GB/s effective), one 200 Gb/s HDR NIC per GPU."""
    return _preset("a100", A100, num_gpus, nvlink_bw=240e9, nic_bw=23e9, host_bw=22e9)


def a100_40g(num_gpus: int = 64) -> ClusterSpec:
    """A100-40GB hosts (:data:`A100_40G`) with the ``a100`` preset's links."""
    return replace(a100(num_gpus), name="a100-40g", gpu=A100_40G)


def h100(num_gpus: int = 64) -> ClusterSpec:
    """H100-80GB hosts: NVLink4 (900 GB/s bidirectional, ~370 GB/s effective), one 400 Gb/s NIC per GPU (~46 GB/s)."""
    return _preset("h100", H100, num_gpus, nvlink_bw=370e9, nic_bw=46e9, host_bw=45e9)


def h100_96g(num_gpus: int = 64) -> ClusterSpec:
    """Hosts of the 96GB HBM2e, 500 W H100 (:data:`H100_96G_500W`) with the ``h100`` preset's links."""
    return replace(h100(num_gpus), name="h100-96g", gpu=H100_96G_500W)


def h800(num_gpus: int = 64) -> ClusterSpec:
    """H800 hosts (:data:`H800`): NVLink at 400 GB/s bidirectional, about 160 GB/s measured one way
    (deepseek-ai/DeepEP issue 16, deepseek-ai/DeepSeek-V3 issue 28), and a 400 Gb/s NIC per GPU."""
    return _preset("h800", H800, num_gpus, nvlink_bw=160e9, nic_bw=46e9, host_bw=45e9)


def h200(num_gpus: int = 64) -> ClusterSpec:
    """H200-141GB hosts: H100 links and compute (794.5 TFLOP/s best-shape GEMM), 141 GB HBM."""
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
    "a100-40g": a100_40g,
    "h100": h100,
    "h100-96g": h100_96g,
    "h800": h800,
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
