"""Hardware specs: one accelerator (:class:`GpuSpec`) and a cluster of them (:class:`ClusterSpec`).

A cluster is ``num_gpus`` identical GPUs in hosts of ``gpus_per_node`` joined by NVLink; across hosts
each GPU has its own NIC. Bandwidths are *effective* per-GPU collective bandwidths (what a large
all-to-all achieves), not link peaks; latencies are per collective. Clusters are data: the presets are
TOML files in :mod:`nspsim.specs.clusters`, read by the same code as a user's own file, and each field
that has a unit says it in its metadata (``unit``), which the file reader and ``nspsim info`` use.
Facts (peak FLOP/s, HBM, link generations) come from vendor data, with their sources beside them in
the preset files; achieved-throughput figures are design defaults that a measured profile
(``nspsim.cost.profile``) overrides.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, dataclass, field

GIB = 1024**3


MAX_GPUS = 2**20
"""The largest cluster: 2**20 GPUs plan in ~5 s, 2**30 ran out of 24 GB (no cluster has a million GPUs;
the profile's largest SP degree is the same)."""


def _unit(unit: str) -> dict[str, str]:
    """Field metadata naming the field's unit (a key of :data:`nspsim.specs.quantity.UNIT_WORDS`)."""
    return {"unit": unit}


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
    ``hbm_bytes`` is a whole number of bytes (cluster files give an int; an integral float from code
    is kept as written, since the fingerprint of existing specs depends on it).
    """

    name: str
    peak_flops: float = field(metadata=_unit("FLOP/s"))
    matmul_flops: float = field(metadata=_unit("FLOP/s"))
    attn_fwd_flops: float = field(metadata=_unit("FLOP/s"))
    attn_bwd_flops: float = field(metadata=_unit("FLOP/s"))
    hbm_bytes: float = field(metadata=_unit("B"))
    hbm_bw: float = field(metadata=_unit("B/s"))
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
        if not all(_finite_number(r) and r > 0 for r in rates):
            raise ValueError(f"GPU {self.name!r}: throughputs and HBM must be positive, finite numbers")
        if isinstance(self.hbm_bytes, float) and not self.hbm_bytes.is_integer():
            raise ValueError(f"GPU {self.name!r}: hbm_bytes must be a whole number of bytes, got {self.hbm_bytes}")
        over = [k for k in ("matmul_flops", "attn_fwd_flops", "attn_bwd_flops") if getattr(self, k) > self.peak_flops]
        if over:
            raise ValueError(f"GPU {self.name!r}: {', '.join(over)} exceed(s) peak_flops, the datasheet peak")
        if not all(_finite_number(x) and 0 < x <= 1 for x in (self.kernel_scale, self.hbm_stream_efficiency)):
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
    nvlink_bw: float = field(metadata=_unit("B/s"))
    nic_bw: float = field(metadata=_unit("B/s"))
    host_bw: float = field(metadata=_unit("B/s"))
    intra_latency_s: float = field(metadata=_unit("s"))
    inter_latency_s: float = field(metadata=_unit("s"))
    alltoall_peer_latency_s: float = field(default=0.0, metadata=_unit("s"))

    def __post_init__(self) -> None:
        if not _is_int(self.num_gpus) or self.num_gpus < 1:
            raise ValueError(f"cluster {self.name!r}: number of GPUs must be a positive integer, got {self.num_gpus!r}")
        if self.num_gpus > MAX_GPUS:
            raise ValueError(
                f"cluster {self.name!r}: at most {MAX_GPUS:,} (2**20) GPUs, got {self.num_gpus:,} "
                "(the planners' per-GPU arrays would exhaust memory)"
            )
        if not _is_int(self.gpus_per_node) or not 1 <= self.gpus_per_node <= self.num_gpus:
            raise ValueError(
                f"cluster {self.name!r}: gpus_per_node must be an integer from 1 to num_gpus ({self.num_gpus}), "
                f"got {self.gpus_per_node!r}"
            )
        if self.num_gpus % self.gpus_per_node:
            raise ValueError(
                f"cluster {self.name!r}: {self.num_gpus} GPUs are not a whole number of {self.gpus_per_node}-GPU "
                f"hosts; use a multiple of {self.gpus_per_node} GPUs (or a cluster file with another gpus_per_node)"
            )
        bandwidths = (self.nvlink_bw, self.nic_bw, self.host_bw)
        latencies = (self.intra_latency_s, self.inter_latency_s, self.alltoall_peer_latency_s)
        if not all(_finite_number(b) and b > 0 for b in bandwidths) or not all(
            _finite_number(x) and x >= 0 for x in latencies
        ):
            raise ValueError(f"cluster {self.name!r}: bandwidths must be positive and latencies >= 0 (finite numbers)")

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


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _finite_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _fingerprint(obj: object) -> str:
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]
