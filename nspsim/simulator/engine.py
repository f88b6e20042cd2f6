"""Run a task :class:`~nspsim.simulator.program.Program` on a SimPy clock and account every second.

Kernels never share anything, so a kernel's end is known the moment it starts: kernels are resolved
eagerly, by timestamp, without events. Collectives are the only events: a collective is launched
once its last member has issued it (at that member's issue time, possibly ahead of the clock), then
the fabric (:mod:`nspsim.simulator.hardware`) schedules its latency and its transfer, re-timing the
transfer whenever link sharing changes. A collective's completion event resolves whatever waited
for it, which may in turn issue further kernels and collectives. Every fabric change happens at its
own event time, so link sharing sees exactly the transfers that overlap. Dependencies are counters;
a task is issued when it heads its queue and every task it waits for has a known end time.

Accounting (the step-time breakdown). Each GPU's wall time is partitioned by its compute queue:
busy time goes to the running kernel's category; an idle gap before a task is charged to what
held that task back, walking back through the blocking chain: while the blocking collective ran
its time is that collective's exposed communication (SP, FSDP, recompute or expert-parallel);
while it had been issued by this GPU but not yet by every peer, it is ``comm_wait``; before this GPU
could issue it, whatever delayed the issue (its queue predecessor or a dependency) is charged the
same way. A blocking collective on the compute queue (expert all-to-all; everything in serial mode)
charges its own wait and transfer. Gaps and kernels tile the GPU's time, so the breakdown of any GPU
sums to the time at which its last task ends.

Lockstep waits (ranks that share a host's cores; :meth:`~nspsim.cost.interface.CostModel.lockstep_waits`):
real members of a group reach a collective one after another even when their work is equal, so a
collective whose members are per-GPU tasks (SP collectives, the layout change, blocking collectives;
not the FSDP collectives a :class:`~nspsim.simulator.program.SharedTask` stands for) starts its
latency ``wait(group size, d)`` late, with ``d`` the longest time any member ran since the end of its
previous such collective (or the step's start). The wait is charged as the collective's own exposed
communication: the runtime measures it inside the collective too.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import simpy

from nspsim.records import BREAKDOWN_CATEGORIES
from nspsim.simulator.hardware import Collective, Fabric
from nspsim.simulator.program import COMM_WAIT, COMPUTE, OTHER, SHARED, TIE_S, Program, SharedTask, Task, holds_back

_EPS = 1e-15


def _note_input(task: Task, done: Task) -> None:
    """Record that input ``done`` of ``task`` has ended; keep the latest one as what held ``task`` back
    (:func:`~nspsim.simulator.program.holds_back`)."""
    if holds_back(done, task.ready_at, task.ready_by):
        task.ready_by = done
    if done.end > task.ready_at:
        task.ready_at = done.end


class Executor:
    """Executes one program; ``acc[segment, gpu, category]`` holds the accounted seconds."""

    def __init__(
        self,
        program: Program,
        *,
        record_blame: bool = False,
        lockstep: Callable[[int, float], float] | None = None,
    ) -> None:
        self.prog = program
        self.lockstep = lockstep
        self.synced = [0.0] * program.num_gpus  # end of each unit's latest per-GPU collective
        self.env = simpy.Environment()
        self.fabric = Fabric(self.env, program.num_gpus)
        self.charges: list[tuple[int, int, int, float]] = []
        self.free = [0.0] * program.num_gpus
        self.blame: list[tuple[int, int, int, float, float]] | None = [] if record_blame else None
        self._ready: list[Task] = []
        self._finished = 0

    @property
    def events(self) -> int:
        """SimPy events scheduled (collective latencies and transfer timings)."""
        return self.fabric.events

    def run(self) -> None:
        """Execute every task; ``RuntimeError`` if some never can (a program bug)."""
        for coll in self.prog.collectives:
            coll.on_done = self._collective_done
        self._ready.extend(head for head in self.prog.heads if head is not None and head.deps_left == 0)
        self._drain()
        self.env.run()
        self._check_finished()

    # ---- resolution ------------------------------------------------------------------------------
    def _drain(self) -> None:
        """Issue every ready task; kernels finish at once (their end is known); a collective is
        launched when its last member arrives."""
        ready, free, launch, finish = self._ready, self.free, self.fabric.launch, self._finish
        members = self.prog.members
        while ready:
            task = ready.pop()
            issue = task.issue = task.ready_at
            if task.queue == COMPUTE and issue > free[task.gpu] + _EPS:
                self._charge_gap(task.gpu, task.seg, free[task.gpu], issue, task.ready_by)
            coll = task.coll
            if coll is None:
                task.start = issue
                task.end = issue + task.dur
                finish(task)
                continue
            coll.arrived += 1
            if issue > coll.start:
                coll.start = issue
            if coll.arrived == len(members[coll.cid]):
                launch(coll, coll.start, self._lockstep_wait(coll) if self.lockstep is not None else 0.0)

    def _lockstep_wait(self, coll: Collective) -> float:
        """The lockstep wait of ``coll`` (module docstring); 0 for collectives of shared tasks."""
        assert self.lockstep is not None
        work = 0.0
        for task in self.prog.members[coll.cid]:
            if task.gpu == SHARED:
                return 0.0
            work = max(work, task.issue - self.synced[task.gpu])
        return self.lockstep(coll.ranks, work)

    def _collective_done(self, coll: Collective) -> None:
        track = self.lockstep is not None  # only lockstep waits need the members' last collective
        for task in self.prog.members[coll.cid]:
            task.start, task.end = coll.start, coll.finish
            if track and task.gpu != SHARED and coll.finish > self.synced[task.gpu]:
                self.synced[task.gpu] = coll.finish
            if task.queue == COMPUTE:
                self._charge_blocking(task, coll)
            self._finish(task)
        self._drain()

    def _finish(self, task: Task) -> None:
        """``task``'s end is known: release its waiters and its queue successor (:func:`_note_input`
        inlined with :func:`holds_back`'s rule, its three cases split by where ``end`` falls against the
        waiter's latest input so far: this loop runs once per dependency edge)."""
        end, ready, order = task.end, self._ready, task.order
        self._finished += 1
        if task.queue == COMPUTE:
            self.free[task.gpu] = end
        for waiter in task.waiters:
            left = waiter.deps_left = waiter.deps_left - 1
            at = waiter.ready_at
            if end > at:
                blocker = waiter.ready_by
                if blocker is None or end > at + TIE_S or order < blocker.order:
                    waiter.ready_by = task
                waiter.ready_at = end
            elif end >= at - TIE_S:
                blocker = waiter.ready_by
                if blocker is None or order < blocker.order:
                    waiter.ready_by = task
            elif waiter.ready_by is None:
                waiter.ready_by = task
            if left == 0 and waiter.head:
                ready.append(waiter)
        nxt = task.next
        if nxt is not None:
            nxt.head = True
            blocker = nxt.ready_by
            if (
                blocker is None
                or end > nxt.ready_at + TIE_S
                or (end >= nxt.ready_at - TIE_S and task.order < blocker.order)
            ):
                nxt.ready_by = task
            if end > nxt.ready_at:
                nxt.ready_at = end
            if nxt.deps_left == 0:
                ready.append(nxt)

    # ---- accounting ------------------------------------------------------------------------------
    def _charge_blocking(self, task: Task, coll: Collective) -> None:
        self._charge(task.gpu, task.seg, COMM_WAIT, task.issue, coll.start)
        self._charge(task.gpu, task.seg, task.cat, coll.start, coll.finish)

    def _charge_gap(self, gpu: int, seg: int, a: float, b: float, blocker: Task | None) -> None:
        """Charge the idle interval [a, b] of ``gpu``'s compute queue along the blocking chain."""
        while b > a + _EPS and blocker is not None and blocker.coll is not None:
            lo = blocker.coll.start if blocker.coll.start > a else a  # its transfer (and latency)
            if b > lo:
                self._charge(gpu, seg, blocker.cat, lo, b)
                b = lo
            issue, by = (
                blocker.unit_issue(gpu) if isinstance(blocker, SharedTask) else (blocker.issue, blocker.ready_by)
            )
            lo = issue if issue > a else a  # issued, waiting for the other members
            if b > lo:
                self._charge(gpu, seg, COMM_WAIT, lo, b)
                b = lo
            blocker = by
        if b > a + _EPS:
            self._charge(gpu, seg, OTHER, a, b)

    def _charge(self, gpu: int, seg: int, cat: int, a: float, b: float) -> None:
        if b > a:
            self.charges.append((seg, gpu, cat, b - a))
            if self.blame is not None:
                self.blame.append((gpu, seg, cat, a, b))

    def accounts(self) -> np.ndarray:
        """Seconds per (segment, GPU, category): kernels plus charged gaps and blocking collectives."""
        acc = self.prog.kernel_time(len(BREAKDOWN_CATEGORIES))
        if self.charges:
            seg, gpu, cat, amount = (np.array(col) for col in zip(*self.charges))
            np.add.at(acc, (seg.astype(np.int64), gpu.astype(np.int64), cat.astype(np.int64)), amount)
        return acc

    def release(self) -> None:
        """Break the task graph's reference cycles (waiters and blockers, collectives' callbacks) so that
        reference counting frees a finished step at once instead of the cycle collector, much later and
        at a cost that grows with the whole heap."""
        for task in self.prog.tasks:
            task.waiters.clear()
            task.ready_by = task.next = None
        for coll in self.prog.collectives:
            coll.on_done = None
        for members in self.prog.members:
            members.clear()

    def _check_finished(self) -> None:
        if self._finished == len(self.prog.tasks):
            return
        for task in self.prog.tasks:
            if task.end < 0:
                where = "the GPUs" if task.gpu == SHARED else f"GPU {task.gpu}"
                raise RuntimeError(
                    f"simulation deadlocked: {where} never ran {task.name!r} (a step-model bug; please report)"
                )
