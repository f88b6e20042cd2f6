"""Hierarchical communication model shared by the cost model and the simulator (docs/simulator.md).

An aligned group of k consecutive ranks lives inside one host when k <= gpus_per_node, and spans
k / gpus_per_node whole hosts otherwise. Each GPU has one NVLink port into its host's switch and one
NIC to the fabric; an all-to-all cannot aggregate other GPUs' NICs. So a collective is described by
the bytes it puts on each GPU's NVLink port and NIC, and, uncontended, takes

    latency + max(nvlink_bytes / nvlink_bw, nic_bytes / nic_bw)

(the two links run concurrently). The simulator uses the same :class:`Traffic` split and shares each
link fairly among concurrent collectives. Trade-off: per-GPU link bottlenecks capture the ~10x drop
past one host (FlexSP's measured a2a profile) without modelling switches or congestion control.
"""

from __future__ import annotations

from dataclasses import dataclass

from nspsim.specs.cluster import ClusterSpec


@dataclass(frozen=True)
class Traffic:
    """Bytes one GPU moves over its NVLink port and over its NIC for one collective."""

    nvlink_bytes: float
    nic_bytes: float

    def time(self, cluster: ClusterSpec) -> float:
        """Bandwidth time with both links free (no latency)."""
        return max(self.nvlink_bytes / cluster.nvlink_bw, self.nic_bytes / cluster.nic_bw)


NO_TRAFFIC = Traffic(0.0, 0.0)


def alltoall_traffic(sent_bytes: float, group_size: int, gpus_per_node: int) -> Traffic:
    """Split the bytes a GPU sends to its k-1 peers between on-host and off-host peers."""
    if group_size <= 1:
        return NO_TRAFFIC
    local_peers = min(group_size, gpus_per_node) - 1
    remote_peers = group_size - 1 - local_peers
    per_peer = sent_bytes / (group_size - 1)
    return Traffic(per_peer * local_peers, per_peer * remote_peers)


def ring_traffic(bytes_per_step: float, group_size: int, gpus_per_node: int) -> Traffic:
    """One ring-attention step: every GPU passes ``bytes_per_step`` to its neighbour.

    Inside one host every hop is NVLink; a single ring over several hosts is paced by its off-host
    hops, which run at one NIC's speed.
    """
    if group_size <= 1:
        return NO_TRAFFIC
    if group_size <= gpus_per_node:
        return Traffic(bytes_per_step, 0.0)
    return Traffic(0.0, bytes_per_step)


def ring_collective_traffic(bytes_moved: float, group_size: int, gpus_per_node: int) -> Traffic:
    """A ring all-gather / reduce-scatter in which each GPU moves ``bytes_moved`` = (k-1)/k of the buffer.

    Across hosts NCCL runs one ring per NIC rail, each carrying 1/gpus_per_node of the data: a GPU is
    the host entry point of one ring (its NIC carries 1/gpn of its bytes) and an NVLink hop of the
    others. Unlike an all-to-all, the collective therefore uses every NIC of a host.
    """
    if group_size <= 1:
        return NO_TRAFFIC
    if group_size <= gpus_per_node:
        return Traffic(bytes_moved, 0.0)
    rails = gpus_per_node
    return Traffic(bytes_moved * (rails - 1) / rails, bytes_moved / rails)


def collective_time(traffic: Traffic, cluster: ClusterSpec, group_size: int) -> float:
    """Uncontended time of a collective: latency plus the slower link's bandwidth time."""
    if group_size <= 1:
        return 0.0
    return cluster.latency(group_size) + traffic.time(cluster)
