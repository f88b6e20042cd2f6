"""Run a sweep: expand the grid into units, take what the cache holds, compute the rest in parallel.

:func:`plan_sweep` builds every point's workload (a point that cannot be built is recorded with its
error and the others go on), draws its batches' statistics, expands each planner label into units
(one per batch; ``static-best`` and ``static-paper`` into one fixed-degree Static unit per admissible
degree and batch, the degree chosen afterwards as compare chooses it), keys them (:mod:`nspsim.sweep.keys`) and looks
each up in the cache: a cached simulation is done, a cached plan is handed to the worker so only the
simulation runs. Identical units of different labels (``static-8`` and static-best's SP8) run once,
and so do the units of points that differ only in max context on batches that came out identical
(:func:`nspsim.sweep.keys.plan_key` keys a batch by its content). A point whose window W is above 1
expands each planner spec into one *window unit* per window of W batches instead
(:func:`nspsim.sweep.keys.window_key`; every iteration of the window names it), which plans the window
and simulates its passes as compare does; static-best's and static-paper's degrees likewise, each
degree chosen afterwards over its windows' passes.
:func:`execute` runs the missing units on an engine and writes each result to the cache as it
arrives, so an interrupted sweep keeps everything finished before the interruption:

* ``local``: a :class:`concurrent.futures.ProcessPoolExecutor` of ``jobs`` workers (``forkserver``
  processes that preload nspsim); ``jobs=1`` runs in this process;
* ``ray``: the same :func:`nspsim.sweep.work.run_unit` as Ray tasks (one CPU each) on the cluster at
  ``RAY_ADDRESS``, else a local Ray instance of ``jobs`` CPUs. Workers return results to the driver,
  which alone writes the cache: no shared file system is needed and there is one writer.

Units are submitted costliest first (FlexSP's MILP, then NSP, ...; a unit with a cached plan last),
so the pool does not end waiting on one long solve. Trade-off: results travel back to the driver
(a few KB per unit, plus the plan JSON when planned anew) instead of workers writing the cache
themselves; for the sizes here that costs milliseconds and buys cluster setups without shared disks.
"""

from __future__ import annotations

import multiprocessing
import os
import select
import threading
import time
from collections.abc import Callable, Generator, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field, replace
from typing import Any

from nspsim.compare.specs import SWEPT_STATIC, PlannerSpec
from nspsim.compare.summary import baseline_of
from nspsim.planners import planner_cost
from nspsim.sweep.cache import Cache
from nspsim.sweep.keys import (
    CodeVersions,
    batch_content,
    code_versions,
    plan_key,
    point_key,
    sim_key,
    window_key,
    workload_identity,
)
from nspsim.sweep.spec import SweepSpec
from nspsim.sweep.work import UnitOutcome, UnitTask, run_unit, workload_of
from nspsim.trace.batching import Batch
from nspsim.workload import WorkloadConfig

ENGINES = ("local", "ray")
LONG_SAMPLE = 128 * 1024  # share_over_128k: samples longer than 131072 tokens
OnOutcome = Callable[[UnitOutcome], None]


@dataclass(frozen=True, kw_only=True)
class BatchStats:
    """What a row reports about its batch (the same batch for every planner of a point)."""

    batch_index: int
    samples: int
    tokens: int
    share_over_128k: float
    dropped_samples: int
    dropped_tokens: int
    content: str = ""  # :func:`nspsim.sweep.keys.batch_content`


@dataclass(frozen=True, kw_only=True)
class PointInfo:
    """One grid point: its workload, key, admissible degrees and batches, or why it could not be built."""

    index: int
    config: WorkloadConfig
    key: str
    window: int = 1  # batches per optimizer step
    degrees: tuple[int, ...] = ()
    batches: tuple[BatchStats, ...] = ()
    error: str = ""


@dataclass(kw_only=True)
class SweepPlan:
    """The expanded sweep: points, resolved planner specs, every unit's key, what the cache had and
    what is left to compute."""

    spec: SweepSpec
    versions: CodeVersions
    points: list[PointInfo]
    specs: dict[str, PlannerSpec]
    baseline: str
    unit_keys: dict[tuple[int, str, int], str]  # (point, label or "static-best@<d>" etc., iteration) -> sim key
    records: dict[str, dict[str, Any]]  # sim key -> record (cached ones, then computed ones)
    cached: set[str]
    tasks: list[UnitTask]
    errors: dict[str, str] = field(default_factory=dict)  # sim key -> error of a failed unit
    plans_reused: int = 0
    computed: int = 0

    @property
    def units(self) -> int:
        """Distinct units (cached or not)."""
        return len(set(self.unit_keys.values()))


def degree_label(degree: int, label: str = "static-best") -> str:
    """The internal unit label of ``label``'s (static-best's or static-paper's) fixed degree ``degree``."""
    return f"{label}@{degree}"


def plan_sweep(
    spec: SweepSpec, cache: Cache, *, force: bool = False, versions: CodeVersions | None = None
) -> SweepPlan:
    """Expand ``spec`` into units and look them up in ``cache`` (see the module docstring); ``force``
    ignores the cache (everything is recomputed and rewritten)."""
    versions = versions or code_versions()
    run = spec.run
    specs = run.specs()
    points: list[PointInfo] = []
    unit_keys: dict[tuple[int, str, int], str] = {}
    tasks: dict[str, UnitTask] = {}
    for index, (config, window) in enumerate(spec.grid()):
        identity = workload_identity(config)
        point = _point(index, config, point_key(identity, window), run.first_batch, run.iters, window)
        points.append(point)
        if point.error:
            continue
        labelled = [(label, s) for label, s in specs.items() if label not in SWEPT_STATIC]
        for swept in (label for label in specs if label in SWEPT_STATIC):
            best = specs[swept]
            labelled += [
                (degree_label(d, swept), replace(best, options={**best.options, "degree": d})) for d in point.degrees
            ]
        for label, s in labelled:
            if window > 1:
                _window_units(point, identity, label, s, versions, unit_keys, tasks)
                continue
            for i, stats in enumerate(point.batches):
                pk = plan_key(identity, s, stats.batch_index, versions, stats.content or None)
                sk = sim_key(pk, s, versions)
                unit_keys[(index, label, i)] = sk
                if sk not in tasks:
                    tasks[sk] = UnitTask(
                        workload=config, spec=s, batch_index=stats.batch_index, plan_key=pk, sim_key=sk
                    )
    records: dict[str, dict[str, Any]] = {}
    todo: list[UnitTask] = []
    reused = 0
    for sk, task in tasks.items():
        record = None if force else cache.sim_record(sk)
        if record is not None:
            records[sk] = record
            continue
        text = None if force or task.window > 1 else cache.plan_text(task.plan_key)
        reused += text is not None
        todo.append(replace(task, plan_json=text))
    todo.sort(key=_cost, reverse=True)
    return SweepPlan(
        spec=spec,
        versions=versions,
        points=points,
        specs=specs,
        baseline=baseline_of(run.planners, run.baseline),
        unit_keys=unit_keys,
        records=records,
        cached=set(records),
        tasks=todo,
        plans_reused=reused,
    )


def _window_units(
    point: PointInfo,
    identity: dict[str, Any],
    label: str,
    spec: PlannerSpec,
    versions: CodeVersions,
    unit_keys: dict[tuple[int, str, int], str],
    tasks: dict[str, UnitTask],
) -> None:
    """One window unit of ``spec`` per window of ``point`` (module docstring), named by each of its
    iterations in ``unit_keys`` and added to ``tasks`` once."""
    size = point.window
    for first in range(0, len(point.batches), size):
        group = point.batches[first : first + size]
        contents = [b.content for b in group] if all(b.content for b in group) else None
        key = window_key(identity, spec, group[0].batch_index, size, versions, contents)
        for k in range(size):
            unit_keys[(point.index, label, first + k)] = key
        if key not in tasks:
            tasks[key] = UnitTask(
                workload=point.config,
                spec=spec,
                batch_index=group[0].batch_index,
                plan_key="",
                sim_key=key,
                window=size,
            )


def _cost(task: UnitTask) -> float:
    weight = planner_cost(task.spec.planner)
    return 1.0 if task.plan_json is not None else weight * task.window


def _point(index: int, config: WorkloadConfig, key: str, first: int, iters: int, window: int = 1) -> PointInfo:
    try:
        workload = workload_of(config)
        batches = tuple(batch_stats(workload.sampler.batch(first + i)) for i in range(iters))
    except (ValueError, OSError) as exc:
        return PointInfo(index=index, config=config, key=key, window=window, error=" ".join(str(exc).split()))
    return PointInfo(index=index, config=config, key=key, window=window, degrees=workload.tree.degrees, batches=batches)


def batch_stats(batch: Batch) -> BatchStats:
    """What a row reports about ``batch`` (:class:`BatchStats`)."""
    lengths = batch.lengths
    return BatchStats(
        batch_index=batch.index,
        samples=batch.num_samples,
        tokens=batch.total_tokens,
        share_over_128k=sum(1 for n in lengths if n > LONG_SAMPLE) / len(lengths),
        dropped_samples=batch.dropped_samples,
        dropped_tokens=batch.dropped_tokens,
        content=batch_content(lengths, batch.dropped_samples, batch.dropped_tokens),
    )


def execute(
    plan: SweepPlan, cache: Cache, *, engine: str = "local", jobs: int = 1, on_outcome: OnOutcome | None = None
) -> None:
    """Compute ``plan.tasks`` on ``engine`` with ``jobs`` workers, writing each result to ``cache`` and
    into ``plan`` as it arrives (failures into ``plan.errors``, not cached); ``on_outcome`` is called
    after each. ``KeyboardInterrupt`` stops the sweep with every finished unit cached."""
    if engine not in ENGINES:
        raise ValueError(f"unknown engine {engine!r} (known: {', '.join(ENGINES)})")
    if jobs < 1:
        raise ValueError(f"jobs must be at least 1, got {jobs}")
    if engine == "ray":
        outcomes = _ray(plan.tasks, jobs)
    elif jobs == 1 or len(plan.tasks) <= 1:
        outcomes = (run_unit(t) for t in plan.tasks)
    else:
        outcomes = _pool(plan.tasks, jobs)
    for outcome in outcomes:
        if outcome.plan_json is not None:
            cache.put_plan(outcome.plan_key, outcome.plan_json)
        if outcome.record is None:
            plan.errors[outcome.sim_key] = outcome.error
        else:
            cache.put_sim(outcome.sim_key, outcome.record)
            plan.records[outcome.sim_key] = outcome.record
            plan.errors.pop(outcome.sim_key, None)
            plan.computed += 1
        if on_outcome is not None:
            on_outcome(outcome)


WORKER_DIED = (
    "the worker process running this unit died (killed by a signal, e.g. the out-of-memory killer); "
    "rerun the sweep to retry it"
)


def _pool(tasks: list[UnitTask], jobs: int, run: Callable[[UnitTask], UnitOutcome] = run_unit) -> Iterator[UnitOutcome]:
    """Run ``tasks`` on a process pool (``run``: a module-level function workers import by name).

    A worker that dies (the out-of-memory killer, a signal) breaks the whole pool, failing every
    unfinished unit with it, not only its own. So the unfinished units are run again on a fresh pool,
    and if that breaks too, each remaining one alone: only a unit that kills its own worker fails
    (:data:`WORKER_DIED`), and the sweep ends normally with every other unit done."""
    left = yield from _run_pool(tasks, jobs, run)
    if left:
        left = yield from _run_pool(left, jobs, run)
    for task in left:
        if (yield from _run_pool([task], 1, run)):
            yield UnitOutcome(sim_key=task.sim_key, plan_key=task.plan_key, record=None, error=WORKER_DIED)


def _run_pool(
    tasks: list[UnitTask], jobs: int, run: Callable[[UnitTask], UnitOutcome]
) -> Generator[UnitOutcome, None, list[UnitTask]]:
    """Yield the outcomes of ``tasks`` as they finish; returns the tasks left unfinished when a
    worker died (an empty list when none did)."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["nspsim.sweep.work"])
    with ProcessPoolExecutor(
        max_workers=min(jobs, len(tasks)), mp_context=context, initializer=exit_with_driver, initargs=(os.getpid(),)
    ) as pool:
        futures = {pool.submit(run, t): t for t in tasks}
        pending: set[Future[UnitOutcome]] = set(futures)
        broken: list[UnitTask] = []
        try:
            while pending:
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                for future in done:
                    try:
                        outcome = future.result()
                    except BrokenProcessPool:
                        broken.append(futures[future])
                        continue
                    yield outcome
        except BaseException:
            pool.shutdown(wait=False, cancel_futures=True)
            raise
        return broken


def exit_with_driver(driver: int) -> None:
    """Pool worker initializer: end this worker as soon as the sweep driver (pid ``driver``) has
    ended, so a driver killed by SIGTERM or SIGKILL leaves no worker holding the caller's pipes. The
    workers are the forkserver's children, and the forkserver outlives the driver while any worker
    holds its liveness pipe, so neither waits for the other: a daemon thread watches the driver
    (a pidfd on Linux, readable once the driver has exited, even before it is reaped; elsewhere a
    poll of its pid every half second)."""
    pidfd_open = getattr(os, "pidfd_open", None)
    try:
        fd = pidfd_open(driver) if pidfd_open is not None else None
    except ProcessLookupError:
        os._exit(1)
    except OSError:  # no pidfd support in this kernel
        fd = None

    def watch() -> None:
        if fd is not None:
            select.select([fd], [], [])
        else:
            while _alive(driver):
                time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, name="nspsim-driver-watch", daemon=True).start()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def ray_module() -> Any:
    """The ``ray`` module, or a one-line ``ValueError`` naming the extra that installs it."""
    try:
        import ray
    except ImportError:
        raise ValueError(
            "--engine ray needs Ray, which is not installed: pip install 'nspsim[distributed]' (or use --engine local)"
        ) from None
    return ray


def _ray(tasks: list[UnitTask], jobs: int) -> Iterator[UnitOutcome]:
    ray = ray_module()
    started = not ray.is_initialized()
    if started:
        address = os.environ.get("RAY_ADDRESS")
        kwargs: dict[str, Any] = {"log_to_driver": False, "include_dashboard": False}
        if address:
            ray.init(address=address, **kwargs)
        else:
            ray.init(num_cpus=jobs, **kwargs)
    try:
        remote = ray.remote(num_cpus=1)(run_unit)
        pending = [remote.remote(t) for t in tasks]
        try:
            while pending:
                done, pending = ray.wait(pending, num_returns=1)
                yield ray.get(done[0])
        except BaseException:
            for ref in pending:
                ray.cancel(ref)
            raise
    finally:
        if started:
            ray.shutdown()
