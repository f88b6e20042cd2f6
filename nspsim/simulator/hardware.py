"""Links and collectives: per-GPU NVLink ports and NICs shared by processor sharing (docs/simulator.md).

Every GPU has two ports: its NVLink port into its host's switch and its own NIC to the fabric
(:mod:`nspsim.cost.comm`). A :class:`Collective` spans an aligned block of ranks and costs one event
per change of its timing: it starts when every member has issued it (the executor launches it),
waits its latency, then moves its bytes. Its stand-alone
bandwidth time ``work`` comes from the cost model; :class:`~nspsim.cost.comm.Traffic` tells which
share of that time each port is busy (``u``: 1 on the bottleneck port, less on the other).

Sharing (bottleneck processor sharing): the load of a port is the sum of ``u`` over the collectives
moving bytes through it. A port with load L > 1 serves each of its collectives at 1/L of its
stand-alone rate, and a collective progresses at the rate of its most loaded port. So two equal
collectives on one NIC take twice as long, and nested groups on the same GPUs (SP all-to-all under
an FSDP all-gather) slow each other down. Rates change only when a collective enters or leaves a
port that is (or becomes) oversubscribed; then the affected collectives' remaining work is
re-timed. Trade-off: unlike max-min fairness, bandwidth a collective cannot use because another
port throttles it is not handed to the others; this keeps every update local to one block of ranks.

Speed (every shortcut computes the same sums in the same order, so results are bit-identical to the
plain code kept in ``tests/simulator/test_sim_fast_paths.py``): a one-unit collective updates and
reads one port entry instead of slices; a transfer that oversubscribes nothing gets its first rate
without the re-timing machinery; timeouts are SimPy ``Timeout`` objects whose callback reads the
value itself (no closure per event).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import simpy
from simpy.events import Timeout

from nspsim.cost.comm import Traffic, alltoall_traffic, ring_collective_traffic
from nspsim.cost.interface import CostModel
from nspsim.specs.cluster import ClusterSpec

NVLINK, NIC = 0, 1
_EPS = 1e-12


def port_shares(traffic: Traffic, cluster: ClusterSpec) -> tuple[float, float]:
    """(u_nvlink, u_nic): the fraction of each port a collective with ``traffic`` keeps busy alone."""
    t_nvl = traffic.nvlink_bytes / cluster.nvlink_bw
    t_nic = traffic.nic_bytes / cluster.nic_bw
    slowest = max(t_nvl, t_nic)
    if slowest <= 0:
        return 0.0, 0.0
    return t_nvl / slowest, t_nic / slowest


class Collective:
    """One collective over ranks ``[first, end)``; ``work`` is its stand-alone bandwidth time (s)."""

    __slots__ = (
        "cid",
        "name",
        "first",
        "end",
        "latency",
        "work",
        "shares",
        "arrived",
        "start",
        "finish",
        "rate",
        "stamp",
        "version",
        "on_done",
        "ranks",
    )

    def __init__(
        self,
        cid: int,
        name: str,
        first: int,
        end: int,
        latency: float,
        work: float,
        shares: tuple[float, float],
        ranks: int = 0,
    ) -> None:
        self.cid, self.name, self.first, self.end = cid, name, first, end
        self.ranks = ranks or end - first  # group size in ranks (units can stand for several)
        self.latency, self.work, self.shares = latency, max(work, 0.0), shares
        self.arrived = 0
        self.start = self.finish = 0.0
        self.rate, self.stamp, self.version = 1.0, 0.0, 0
        self.on_done: Callable[[Collective], None] | None = None

    def overlaps(self, other: Collective) -> bool:
        """Whether the two rank blocks share a GPU."""
        return self.first < other.end and other.first < self.end


class Fabric:
    """The ports of ``num_gpus`` GPUs and the collectives currently moving bytes through them."""

    def __init__(self, env: simpy.Environment, num_gpus: int) -> None:
        self.env = env
        # Plain lists: most collectives span a few ranks, where slicing a list beats numpy's per-call cost.
        self.load: tuple[list[float], list[float]] = ([0.0] * num_gpus, [0.0] * num_gpus)
        self.active: tuple[set[Collective], set[Collective]] = (set(), set())
        self.events = 0

    # ---- lifecycle -------------------------------------------------------------------------------
    def launch(self, coll: Collective, start: float, wait: float = 0.0) -> None:
        """Start ``coll`` at ``start`` (>= now): ``wait`` (its members' lockstep wait), its latency,
        then its transfer, then ``on_done``."""
        coll.start = start
        self._after(max(start - self.env.now, 0.0) + wait + coll.latency, self._begin_transfer, coll)

    def _after(self, delay: float, callback: Callable[[Any], None], value: Any) -> None:
        """Call ``callback(value)`` ``delay`` seconds from now: one SimPy timeout (what ``env.timeout``
        schedules, in the same order), whose callback reads the value without an extra closure."""
        event = Timeout(self.env, delay, value)
        event.callbacks.append(callback)
        self.events += 1

    def _begin_transfer(self, event: Timeout) -> None:
        coll: Collective = event._value
        if coll.work <= 0:
            self._complete(coll)
            return
        coll.stamp = self.env.now
        changed = self._add_load(coll, +1.0)
        if changed or coll.version:
            self._retime(coll, changed)
            return
        # Nothing oversubscribed: only this collective needs a rate, its first (what _set_rate does then).
        rate = coll.rate = self._rate(coll)
        coll.version = 1
        self._after(coll.work / rate, self._finish_transfer, (coll, 1))

    def _finish_transfer(self, event: Timeout) -> None:
        coll, version = event._value
        if version != coll.version:
            return  # superseded by a re-timing
        coll.work = 0.0
        changed = self._add_load(coll, -1.0)
        if changed:
            self._retime(coll, changed, leaving=True)
        self._complete(coll)

    def _complete(self, coll: Collective) -> None:
        coll.finish = self.env.now
        if coll.on_done is not None:
            coll.on_done(coll)

    # ---- sharing ---------------------------------------------------------------------------------
    def _add_load(self, coll: Collective, sign: float) -> list[int]:
        """Add (or remove) ``coll``'s port shares; return the port kinds that are oversubscribed."""
        changed = []
        first, end = coll.first, coll.end
        for kind, share in enumerate(coll.shares):
            if share <= 0:
                continue
            load, delta = self.load[kind], sign * share
            if end - first == 1:  # one unit: the same sums without slices
                before = load[first]
                after = load[first] = before + delta
                peak = before if before > after else after
            else:
                part = load[first:end]
                new = [x + delta for x in part]
                load[first:end] = new
                peak = max(max(part), max(new))
            if peak > 1 + _EPS:
                changed.append(kind)
            if sign > 0:
                self.active[kind].add(coll)
            else:
                self.active[kind].discard(coll)
        return changed

    def _retime(self, coll: Collective, changed: list[int], leaving: bool = False) -> None:
        """Re-rate ``coll`` (unless leaving) and every active collective sharing an oversubscribed port."""
        if not changed:  # nothing oversubscribed: only the entering collective needs a rate
            if not leaving:
                self._set_rate(coll, self._rate(coll))
            return
        affected = set() if leaving else {coll}
        for kind in changed:
            affected.update(c for c in self.active[kind] if c.overlaps(coll))
        for other in sorted(affected, key=lambda c: c.cid):
            self._set_rate(other, self._rate(other))

    def _rate(self, coll: Collective) -> float:
        worst, first, end = 1.0, coll.first, coll.end
        for kind, share in enumerate(coll.shares):
            if share > 0:
                load = self.load[kind]
                peak = load[first] if end - first == 1 else max(load[first:end])
                if peak > worst:
                    worst = peak
        return 1.0 / worst

    def _set_rate(self, coll: Collective, rate: float) -> None:
        now = self.env.now
        if coll.version and abs(rate - coll.rate) <= _EPS:
            return
        coll.work = max(coll.work - coll.rate * (now - coll.stamp), 0.0) if coll.version else coll.work
        coll.rate, coll.stamp = rate, now
        coll.version += 1
        self._after(coll.work / rate, self._finish_transfer, (coll, coll.version))


class CollectiveFactory:
    """Collectives with latency from the cost model and port shares from the cluster topology."""

    def __init__(self, cost: CostModel, cluster: ClusterSpec) -> None:
        self.cost, self.cluster = cost, cluster
        self._shares: dict[tuple[str, int], tuple[float, float]] = {}
        self._latency: dict[int, float] = {}  # the cost model's latency per group size, asked once

    def make(
        self, cid: int, name: str, first: int, end: int, seconds: float, pattern: str, size: int | None = None
    ) -> Collective:
        """A collective over units ``[first, end)`` of a group of ``size`` ranks (default: one rank per
        unit) taking ``seconds`` uncontended."""
        size = end - first if size is None else size
        latency = self._latency.get(size)
        if latency is None:
            latency = self._latency[size] = self.cost.latency(size)
        latency = min(latency, seconds)
        return Collective(cid, name, first, end, latency, seconds - latency, self._port_shares(pattern, size), size)

    def _port_shares(self, pattern: str, size: int) -> tuple[float, float]:
        key = (pattern, size)
        if key not in self._shares:
            gpn = self.cluster.gpus_per_node
            traffic: Traffic = (
                ring_collective_traffic(1.0, size, gpn) if pattern == "ring" else alltoall_traffic(1.0, size, gpn)
            )
            self._shares[key] = port_shares(traffic, self.cluster)
        return self._shares[key]
