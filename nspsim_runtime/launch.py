"""Run a function on ``world`` local gloo ranks and collect every rank's outcome, with hard deadlines.

Used by the multi-rank tests (and usable from notebooks): ``run_ranks(fn, world, arg)`` starts one
process per rank, rendezvouses them through a TCP store owned by the caller (free port, no files),
initialises a gloo process group with a bounded timeout, calls ``fn(RankEnv, arg)`` and returns every
rank's value. Nothing can hang: if a rank fails or dies, the others get ``grace_s`` to report their
own (expected) errors, then whatever is still running is killed; past ``timeout_s`` everything is
killed. :func:`spawn_ranks` returns per-rank :class:`RankOutcome` s (status ``ok``, ``error``, ``died``
or ``killed``) for tests that check how failures propagate.

Processes come from a ``forkserver`` that preloads torch, so each launch costs a fork rather than a
torch import per rank (about 3 s per rank on a 2-core machine). Trade-off: the forkserver lives as
long as the calling process; its children never inherit the caller's threads, unlike ``fork``.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import pickle
import queue
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # annotations only: torch is imported inside the functions that use it
    from multiprocessing.context import ForkServerContext, ForkServerProcess
    from multiprocessing.queues import Queue

    import torch

PRELOAD = [
    "torch",
    "torch.distributed",
    "torch.distributed.fsdp",
    "nspsim_runtime.executor",
    "nspsim_runtime.model",
    "nspsim_runtime.data",
]


@dataclass(frozen=True, kw_only=True)
class RankEnv:
    """What a rank function gets: its rank, the world size, the process-group timeout and backend."""

    rank: int
    world: int
    timeout_s: float
    backend: str = "gloo"

    @property
    def device(self) -> torch.device:
        """``cuda:rank`` under NCCL, else the CPU."""
        import torch

        return torch.device("cuda", self.rank) if self.backend == "nccl" else torch.device("cpu")


@dataclass(frozen=True, kw_only=True)
class RankOutcome:
    """How one rank ended: ``ok`` (value), ``error`` (message), ``died`` (exit code) or ``killed``."""

    rank: int
    status: str
    value: Any = None
    error: str = ""
    exitcode: int | None = None
    elapsed_s: float = 0.0


class LaunchError(RuntimeError):
    """At least one rank did not return normally."""


# What a worker puts on the results queue: rank, status, pickled value, error message, elapsed seconds.
Report = tuple[int, str, bytes | None, str, float]


def _worker(fn: Callable[[RankEnv, Any], Any], env: RankEnv, port: int, arg: Any, out: Queue[Report]) -> None:
    import torch
    import torch.distributed as dist
    from torch.distributed import TCPStore  # type: ignore[attr-defined]  # stubs do not re-export it

    torch.set_num_threads(1)
    start = time.perf_counter()
    try:
        store = TCPStore("127.0.0.1", port, is_master=False, timeout=timedelta(seconds=env.timeout_s))
        if env.backend == "nccl":
            torch.cuda.set_device(env.rank)
        dist.init_process_group(
            env.backend, store=store, rank=env.rank, world_size=env.world, timeout=timedelta(seconds=env.timeout_s)
        )
        # Plain pickle (not the multiprocessing one, which would pass tensors through shared memory
        # that vanishes when this process exits).
        value = pickle.dumps(fn(env, arg))
        out.put((env.rank, "ok", value, "", time.perf_counter() - start))
    except BaseException as exc:  # noqa: BLE001 (report everything, including SystemExit)
        msg = f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=8)}"
        out.put((env.rank, "error", None, msg, time.perf_counter() - start))
    finally:
        out.close()
        out.join_thread()
        # Skip interpreter teardown: a peer may be gone, and destroying the group could block.
        os._exit(0)


def _context() -> ForkServerContext:
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)
    return ctx


def spawn_ranks(
    fn: Callable[[RankEnv, Any], Any],
    world: int,
    arg: Any = None,
    *,
    timeout_s: float = 120.0,
    comm_timeout_s: float = 30.0,
    grace_s: float = 20.0,
    backend: str = "gloo",
) -> list[RankOutcome]:
    """Run ``fn`` on ``world`` ranks (gloo, or NCCL with one GPU per rank); every rank's outcome,
    within ``timeout_s`` overall."""
    from torch.distributed import TCPStore  # type: ignore[attr-defined]  # stubs do not re-export it

    store = TCPStore(
        "127.0.0.1",
        0,
        world_size=world + 1,
        is_master=True,
        wait_for_workers=False,
        timeout=timedelta(seconds=timeout_s),
    )
    ctx = _context()
    results: Queue[Report] = ctx.Queue()
    envs = [RankEnv(rank=r, world=world, timeout_s=comm_timeout_s, backend=backend) for r in range(world)]
    procs = [ctx.Process(target=_worker, args=(fn, env, store.port, arg, results), daemon=True) for env in envs]
    for p in procs:
        p.start()
    try:
        return _collect(procs, results, time.monotonic() + timeout_s, grace_s)
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
            p.join(timeout=5)
        del store


def _collect(
    procs: list[ForkServerProcess], results: Queue[Report], deadline: float, grace_s: float
) -> list[RankOutcome]:
    outcomes: dict[int, RankOutcome] = {}
    first_failure: float | None = None
    while len(outcomes) < len(procs) and time.monotonic() < deadline:
        if first_failure is not None and time.monotonic() > first_failure + grace_s:
            break
        try:
            rank, status, value, error, elapsed = results.get(timeout=0.2)
            value = pickle.loads(value) if value is not None else None
            outcomes[rank] = RankOutcome(rank=rank, status=status, value=value, error=error, elapsed_s=elapsed)
            if status != "ok" and first_failure is None:
                first_failure = time.monotonic()
        except queue.Empty:
            pass
        for r, p in enumerate(procs):
            if r not in outcomes and not p.is_alive() and p.exitcode not in (None, 0):
                outcomes[r] = RankOutcome(rank=r, status="died", exitcode=p.exitcode)
                first_failure = first_failure or time.monotonic()
    return [outcomes.get(r, RankOutcome(rank=r, status="killed")) for r in range(len(procs))]


def run_ranks(fn: Callable[[RankEnv, Any], Any], world: int, arg: Any = None, **kw: Any) -> list[Any]:
    """Like :func:`spawn_ranks` but returns the values and raises :class:`LaunchError` if any rank
    did not return normally (the message lists every rank's status)."""
    outcomes = spawn_ranks(fn, world, arg, **kw)
    bad = [o for o in outcomes if o.status != "ok"]
    if bad:
        lines = [
            f"rank {o.rank}: {o.status}"
            + (f" ({o.error.splitlines()[0]})" if o.error else "")
            + (f" exit code {o.exitcode}" if o.exitcode is not None else "")
            for o in outcomes
        ]
        detail = next((o.error for o in bad if o.error), "")
        raise LaunchError(f"{len(bad)} of {world} ranks failed:\n" + "\n".join(lines) + "\n" + detail)
    return [o.value for o in outcomes]
