"""The executable form of one training step: per-GPU queues of tasks with cross-queue dependencies.

Each GPU has four FIFO queues: ``COMPUTE`` (kernels; a blocking collective such as the expert-parallel
all-to-all also sits here), ``SP`` (sequence-parallel collectives and the layout change), ``AG``
(FSDP parameter all-gathers) and ``RS`` (FSDP gradient reduce-scatters). A task starts when it is at
the head of its queue and every task it depends on has finished. A collective has one member task
in the right queue of every member GPU, except FSDP collectives outside serial mode, whose queues
hold nothing else: there one :class:`SharedTask` stands for every GPU's member (otherwise about a
third of a nested plan's tasks). Every queue's order is the restriction of one global creation
order, so no two GPUs can wait on each other's collectives in opposite orders (no deadlock).

Tasks carry the breakdown category of their time (compute kinds, or the exposed-communication kind
of a collective) and the *segment* (micro-batch stage or layer) they belong to, so the step's time
partition can be summed per layer and repeated layers can be extrapolated.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from nspsim.records import BREAKDOWN_CATEGORIES
from nspsim.simulator.hardware import Collective

COMPUTE, SP, AG, RS = 0, 1, 2, 3
QUEUE_NAMES = ("compute", "sp-comm", "fsdp-allgather", "fsdp-reducescatter")
_NUM_QUEUES = len(QUEUE_NAMES)
SHARED = -1  # the ``gpu`` of a :class:`SharedTask`: it stands for every unit
TIE_S = 1e-12  # inputs ending this close tie (see :func:`holds_back`)

CAT = {name: i for i, name in enumerate(BREAKDOWN_CATEGORIES)}
ATTN_FWD, ATTN_REMAT, ATTN_BWD, NON_ATTN = CAT["attn_fwd"], CAT["attn_remat"], CAT["attn_bwd"], CAT["non_attn"]
SP_COMM, FSDP_COMM, COMM_WAIT, OTHER = CAT["sp_exposed_comm"], CAT["fsdp_exposed_comm"], CAT["comm_wait"], CAT["other"]
EP_COMM = CAT["ep_exposed_comm"]


class Task:
    """One unit on one GPU queue: a kernel of ``dur`` seconds, or this GPU's part of ``coll``.

    It waits for every task in ``deps`` (``None`` entries are ignored) and for its queue predecessor.
    """

    __slots__ = (
        "order",
        "gpu",
        "queue",
        "cat",
        "dur",
        "coll",
        "seg",
        "name",
        "waiters",
        "deps_left",
        "issue",
        "start",
        "end",
        "ready_at",
        "ready_by",
        "next",
        "head",
    )

    def __init__(
        self,
        gpu: int,
        queue: int,
        cat: int,
        seg: int,
        name: str,
        dur: float,
        coll: Collective | None,
        deps: list[Task | None],
    ) -> None:
        self.order = 0  # creation index, set by Program.add
        self.gpu = gpu
        self.queue = queue
        self.cat = cat
        self.seg = seg
        self.name = name
        self.dur = dur
        self.coll = coll
        self.waiters: list[Task] = []
        left = 0
        for dep in deps:
            if dep is not None:
                dep.waiters.append(self)
                left += 1
        self.deps_left = left
        self.issue = -1.0
        self.start = -1.0
        self.end = -1.0
        self.ready_at = 0.0
        self.ready_by: Task | None = None
        self.next: Task | None = None  # queue successor
        self.head = False  # whether every earlier task of the queue has a known end


def holds_back(done: Task, ready_at: float, blocker: Task | None) -> bool:
    """Whether finished input ``done`` becomes what held a task back, given its latest input so far
    (``blocker``, ending at ``ready_at``). Inputs ending within ``TIE_S`` of each other tie, and a tie
    goes to the earlier-created input, so the accounting does not depend on event order or rounding
    (repeated layers account identically)."""
    return (
        blocker is None or done.end > ready_at + TIE_S or (done.end >= ready_at - TIE_S and done.order < blocker.order)
    )


class SharedTask(Task):
    """One task standing for every unit's member of a collective over all units, in a queue that holds
    nothing else (the FSDP all-gather and reduce-scatter queues outside serial mode). Every unit's member
    would wait for that unit's dependencies (``unit_deps[u]``) and for the previous collective of the queue
    (``prev``), and all would end together; one task does the same work with one object instead of one
    per unit, and :meth:`unit_issue` recovers what unit u's member would have recorded.
    """

    __slots__ = ("unit_deps", "prev", "first_unit", "end_unit")

    def __init__(
        self,
        queue: int,
        cat: int,
        seg: int,
        name: str,
        coll: Collective,
        unit_deps: list[list[Task | None]],
        prev: SharedTask | None,
    ) -> None:
        super().__init__(SHARED, queue, cat, seg, name, 0.0, coll, [d for deps in unit_deps for d in deps])
        self.unit_deps, self.prev = unit_deps, prev
        self.first_unit, self.end_unit = coll.first, coll.end  # the units it stands for

    def unit_issue(self, unit: int) -> tuple[float, Task | None]:
        """When unit ``unit``'s member would have been issued, and which input held it back (the latest of
        its dependencies and the previous collective, by :func:`holds_back`, as in the executor)."""
        issue, by = 0.0, None
        for done in (*self.unit_deps[unit], self.prev):
            if done is None:
                continue
            if holds_back(done, issue, by):
                by = done
            issue = max(issue, done.end)
        return issue, by


@dataclass(frozen=True, kw_only=True)
class Segment:
    """A stage of the step: ``kind`` in pre/fwd/head/bwd/opt, its micro-batch and layer."""

    kind: str
    micro_batch: int
    layer: int = -1


@dataclass
class Program:
    """Every task of one step, the queues that order them and the segments that label them."""

    num_gpus: int
    tasks: list[Task] = field(default_factory=list)
    collectives: list[Collective] = field(default_factory=list)
    segments: list[Segment] = field(default_factory=list)
    members: list[list[Task]] = field(default_factory=list)
    """Member tasks of every collective, by collective id."""
    heads: list[Task | None] = field(default_factory=list)
    """First task of every queue, indexed ``gpu * len(QUEUE_NAMES) + queue``, then the shared queues
    (``None``: empty queue)."""
    _tails: list[Task | None] = field(default_factory=list, repr=False)

    def __post_init__(self) -> None:
        self.heads = [None] * ((self.num_gpus + 1) * len(QUEUE_NAMES))
        self._tails = list(self.heads)

    def segment(self, kind: str, micro_batch: int, layer: int = -1) -> int:
        """Open a new segment and return its id."""
        self.segments.append(Segment(kind=kind, micro_batch=micro_batch, layer=layer))
        return len(self.segments) - 1

    def add(self, task: Task) -> Task:
        """Append ``task`` to its queue (creation order is queue order)."""
        tasks, tails = self.tasks, self._tails
        task.order = len(tasks)
        tasks.append(task)
        gpu = task.gpu
        key = (gpu if gpu != SHARED else self.num_gpus) * _NUM_QUEUES + task.queue
        tail = tails[key]
        if tail is None:
            task.head = True
            self.heads[key] = task
        else:
            tail.next = task
        tails[key] = task
        if task.coll is not None:
            self.members[task.coll.cid].append(task)
        return task

    def add_kernel(self, task: Task) -> None:
        """:meth:`add` for a compute-queue kernel (no collective, ``gpu`` >= 0): the step's most common task."""
        tasks = self.tasks
        task.order = len(tasks)
        tasks.append(task)
        key = task.gpu * _NUM_QUEUES  # + COMPUTE (0)
        tail = self._tails[key]
        if tail is None:
            task.head = True
            self.heads[key] = task
        else:
            tail.next = task
        self._tails[key] = task

    def add_collective(self, coll: Collective) -> Collective:
        """Register ``coll`` (its id must be the next one); its member tasks are added with :meth:`add`."""
        if coll.cid != len(self.collectives):
            raise ValueError(f"collective id {coll.cid} is not the next one ({len(self.collectives)})")
        self.collectives.append(coll)
        self.members.append([])
        return coll

    def kernel_time(self, num_categories: int) -> np.ndarray:
        """Seconds of kernels per (segment, GPU, category)."""
        index, weights, gpus = [], [], self.num_gpus
        for t in self.tasks:
            if t.coll is None:
                index.append((t.seg * gpus + t.gpu) * num_categories + t.cat)
                weights.append(t.dur)
        size = len(self.segments) * gpus * num_categories
        flat = (
            np.bincount(np.array(index, dtype=np.int64), weights=np.array(weights, dtype=np.float64), minlength=size)
            if index
            else np.zeros(size)
        )
        return flat.reshape(len(self.segments), gpus, num_categories)

    def layer_segments(self, kind: str, micro_batch: int) -> list[int]:
        """Segment ids of the ``kind`` ("fwd" or "bwd") layers of ``micro_batch`` in execution order."""
        return [i for i, s in enumerate(self.segments) if s.kind == kind and s.micro_batch == micro_batch]
