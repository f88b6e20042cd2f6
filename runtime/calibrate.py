"""Measure the figures of the ``cpu`` cluster preset on this machine: ``python -m runtime.calibrate``.

One process per rank, one thread each (as the runtime runs under torchrun on CPU):

* GEMM throughput at the tiny model's projection shapes (``matmul_flops``);
* CPU flash-attention forward and backward throughput on a causal 2048-token sample with the tiny
  model's heads (``attn_fwd_flops``, ``attn_bwd_flops``; FLOPs counted as the cost model does:
  forward ``2 * L^2 * q_width``, backward 2.5x), and the peaks they imply under the cost model's
  ``L / (L + attn_half_length)`` saturation (``attn_fwd_peak``, ``attn_bwd_peak``: the preset's
  ``attn_fwd_flops`` / ``attn_bwd_flops``);
* gloo ``all_to_all_single`` and ring ``batch_isend_irecv`` over 2 and 4 local ranks, fitted as
  ``latency + bytes / bandwidth`` by least squares over 4 KiB .. 4 MiB per rank.

Prints one JSON object. The figures are what the ``cpu`` preset in ``nspsim.specs.cluster`` records;
rerun this on another machine and pass the numbers through a profile if they differ. It takes no
options: ``--help`` describes it, anything else ends with one line ``runtime.calibrate: error: ...``
and status 2 before any measurement (:mod:`runtime.cli`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from nspsim.cli.flags import Parser
from nspsim.cost.analytic import AnalyticCostModel
from runtime.cli import EXIT_USAGE, exit_on_interrupt, fail
from runtime.kernels import Segments, select_kernel
from runtime.launch import RankEnv, run_ranks

PROG = "runtime.calibrate"
SIZES = [1 << 12, 1 << 15, 1 << 18, 1 << 20, 1 << 22]


def _best(fn: Callable[[], object], repeat: int = 20) -> float:
    fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def gemm_flops(tokens: int = 2048, hidden: int = 64, out: int = 192) -> float:
    """FLOP/s of a ``[tokens, hidden] @ [hidden, out]`` fp32 GEMM on one thread."""
    a, b = torch.randn(tokens, hidden), torch.randn(hidden, out)
    return 2.0 * tokens * hidden * out / _best(lambda: a @ b)


ATTN_LENGTH = 2048


def attention_flops(length: int = ATTN_LENGTH, heads: int = 8, kv_heads: int = 2, dim: int = 8) -> tuple[float, float]:
    """(forward, backward) FLOP/s of the CPU flash kernel on one causal sample."""
    kernel = select_kernel("auto", torch.device("cpu"))
    q, k, v = torch.randn(length, heads, dim), torch.randn(length, kv_heads, dim), torch.randn(length, kv_heads, dim)
    seg = Segments.same([length])
    out, lse = kernel.forward(q, k, v, seg, causal=True)
    dout = torch.randn_like(out)
    flops = 2.0 * length**2 * heads * dim
    fwd = _best(lambda: kernel.forward(q, k, v, seg, causal=True))
    bwd = _best(lambda: kernel.backward(dout, q, k, v, out, lse, seg, causal=True))
    return flops / fwd, 2.5 * flops / bwd


def _fit(sizes: list[float], times: list[float]) -> tuple[float, float]:
    """Least-squares ``t = latency + bytes / bw``; returns (latency s, bandwidth B/s)."""
    slope, intercept = np.polyfit(np.asarray(sizes, dtype=float), np.asarray(times), 1)
    return max(float(intercept), 0.0), 1.0 / max(float(slope), 1e-15)


def _comm_rank(env: RankEnv, _: object) -> dict[str, list[float]]:
    torch.set_num_threads(1)
    out: dict[str, list[float]] = {"a2a": [], "ring": []}
    nxt, prv = (env.rank + 1) % env.world, (env.rank - 1) % env.world
    for size in SIZES:
        n = size // 4
        send, recv = torch.randn(n), torch.empty(n)
        # _best runs its callable at once, inside this iteration, so the loop variables are current
        a2a = _best(lambda: dist.all_to_all_single(recv, send))  # noqa: B023
        out["a2a"].append(a2a)

        def ring() -> None:
            ops = [dist.P2POp(dist.isend, send, nxt), dist.P2POp(dist.irecv, recv, prv)]  # noqa: B023 (run at once)
            for w in dist.batch_isend_irecv(ops):
                w.wait()

        out["ring"].append(_best(ring))
    return out


def comm_figures(world: int) -> dict[str, float]:
    """Fitted all-to-all and ring-hop latency and bandwidth over ``world`` local gloo ranks."""
    results = run_ranks(_comm_rank, world, None, timeout_s=300)
    fig: dict[str, float] = {}
    for name in ("a2a", "ring"):
        times = [max(r[name][i] for r in results) for i in range(len(SIZES))]
        # an all-to-all sends (world-1)/world of the buffer; a ring hop sends all of it
        sent = [s * (world - 1) / world if name == "a2a" else s for s in SIZES]
        lat, bw = _fit(sent, times)
        fig[f"{name}_latency_s"], fig[f"{name}_bw"] = lat, bw
    return fig


def build_parser() -> Parser:
    """The command line: no options yet (``--help`` only); errors raise ``ValueError`` (one line)."""
    return Parser(
        prog=PROG,
        description="Measure the figures of the cpu cluster preset on this machine (GEMM and CPU flash-attention "
        "throughput on one thread, gloo all-to-all and ring-hop latency and bandwidth over 2 and 4 local "
        "ranks) and print them as one JSON object.",
    )


def main(argv: list[str] | None = None) -> None:
    """Print the measured figures as JSON (after checking the command line)."""
    try:
        build_parser().parse_args(argv)
    except ValueError as exc:
        fail(PROG, exc, EXIT_USAGE)
    exit_on_interrupt(PROG)  # Ctrl-C during the measurements: one line, status 130
    torch.set_num_threads(1)
    fwd, bwd = attention_flops()
    saturation = ATTN_LENGTH / (ATTN_LENGTH + AnalyticCostModel.attn_half_length)  # the default saturation
    report: dict[str, Any] = {
        "threads": 1,
        "gemm_flops": gemm_flops(),
        "attn_length": ATTN_LENGTH,
        "attn_fwd_flops": fwd,
        "attn_bwd_flops": bwd,
        "attn_fwd_peak": fwd / saturation,
        "attn_bwd_peak": bwd / saturation,
    }
    for world in (2, 4):
        report[f"world{world}"] = comm_figures(world)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
