"""Ring attention's pieces against the Ulysses kernel of the same sample, on this CPU, interleaved.

Issue 28: ``nsp ring @2`` was over-predicted against every other validation case. This times, in one
process with one thread (as a rank runs), per sample length L at degree 2 (the tiny model, fp32):

* ``ring_rank{0,1}_{fwd,bwd}``: the runtime's own block walk (``RingBackend._block_forward`` /
  ``_block_backward``: row gathers, kernel, merge) over both steps, without the send/receive;
* ``kern_{diag,cross,step1}_{fwd,bwd}_r{0,1}``: the kernel calls alone on pre-gathered blocks;
* ``merge_{c,2c}``: ``merge_partial`` alone on c and 2c query rows (c = L/4);
* ``uly_{fwd,bwd}``: a Ulysses rank's kernel, causal over L with half the heads;
* ``causal_{c,2c}`` and ``full_{cc,2cc}``: one causal sample of c and 2c tokens, and full c x c and
  2c x c blocks, with all heads: what the profile's causal and full-block tables measure.

Every round runs every item once, the order rotated and reversed between rounds, so a machine whose
speed drifts slows every item alike; medians over rounds are compared. Trade-off: single-process
timings leave out the K/V hops (the profile's p2p fit prices them, and they overlap the kernels).

    python benchmarks/ring_components_ab.py --lengths 5550,5904 --rounds 9 -o out/ring_components.json
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from nspsim.execution.shards import NodeShards, ring_blocks
from nspsim.sp_tree import Node
from nspsim_runtime.backends.ring import RingBackend, merge_partial
from nspsim_runtime.kernels import Segments, select_kernel

HEADS, KV_HEADS, DIM = 8, 2, 8  # the tiny model
Fn = Callable[[], object]


class _Ctx:
    """What the ring's block methods read from an ExecContext: the kernel."""

    def __init__(self, kernel: Any) -> None:
        self.kernel = kernel


def _point(kernel: Any, nq: int, nk: int, heads: int, kv: int, causal: bool, gen: torch.Generator) -> tuple[Fn, Fn]:
    q = torch.randn(nq, heads, DIM, generator=gen)
    k, v = torch.randn(nk, kv, DIM, generator=gen), torch.randn(nk, kv, DIM, generator=gen)
    seg = Segments.pairs([nq], [nk])
    out, lse = kernel.forward(q, k, v, seg, causal)
    dout = torch.randn_like(out)
    return (lambda: kernel.forward(q, k, v, seg, causal)), (
        lambda: kernel.backward(dout, q, k, v, out, lse, seg, causal)
    )


def _ring_items(kernel: Any, length: int, gen: torch.Generator) -> dict[str, Fn]:
    """The runtime's ring walk per rank, and each of its kernel calls alone."""
    backend, ctx = RingBackend(num_heads=HEADS, num_kv_heads=KV_HEADS), _Ctx(kernel)
    shards = NodeShards(node=Node(2, 0), backend="ring", samples=np.array([0]), lengths=np.array([length]))
    rows = [int(shards.rank_tokens[r]) for r in (0, 1)]
    q = [torch.randn(n, HEADS, DIM, generator=gen) for n in rows]
    kv = [torch.randn(n, 2 * KV_HEADS, DIM, generator=gen) for n in rows]
    dout = [torch.randn(n, HEADS, DIM, generator=gen) for n in rows]
    blocks = {
        (r, s): [(b, Segments.pairs(b.q_lengths.tolist(), b.k_lengths.tolist())) for b in ring_blocks(shards, r, s)]
        for r in (0, 1)
        for s in (0, 1)
    }

    def walk_fwd(r: int) -> tuple[torch.Tensor, torch.Tensor]:
        out, lse = torch.zeros(q[r].shape), torch.full(q[r].shape[:2], -float("inf"))
        for s in (0, 1):
            for b, seg in blocks[(r, s)]:
                backend._block_forward(ctx, b, seg, q[r], kv[(r - s) % 2], out, lse)
        return out, lse

    state = [walk_fwd(r) for r in (0, 1)]

    def walk_bwd(r: int) -> None:
        dq, dkv = torch.zeros(q[r].shape), [torch.zeros(x.shape) for x in kv]
        for s in (0, 1):
            src = (r - s) % 2
            for b, seg in blocks[(r, s)]:
                local = (q[r], dout[r], state[r][0], state[r][1])
                backend._block_backward(ctx, b, seg, local, kv[src], dq, dkv[src])

    items: dict[str, Fn] = {}
    for r in (0, 1):
        items[f"ring_rank{r}_fwd"] = lambda r=r: walk_fwd(r)
        items[f"ring_rank{r}_bwd"] = lambda r=r: walk_bwd(r)
        for s in (0, 1):
            src = (r - s) % 2
            for b, seg in blocks[(r, s)]:
                name = ("diag" if b.causal else "cross") if s == 0 else "step1"
                qi, ki = torch.as_tensor(b.q_rows), torch.as_tensor(b.k_rows)
                qq, do = q[r].index_select(0, qi), dout[r].index_select(0, qi)
                kk, vv = backend._split(kv[src].index_select(0, ki))
                o, lse = kernel.forward(qq, kk, vv, seg, b.causal)
                items[f"kern_{name}_fwd_r{r}"] = lambda a=(qq, kk, vv, seg, b.causal): kernel.forward(*a)
                items[f"kern_{name}_bwd_r{r}"] = lambda a=(do, qq, kk, vv, o, lse, seg, b.causal): kernel.backward(*a)
    return items


def items_for(kernel: Any, length: int, gen: torch.Generator) -> dict[str, Fn]:
    """Every timed item of one sample length (module docstring)."""
    c = length // 4
    items = _ring_items(kernel, length, gen)
    for name, n in (("c", c), ("2c", 2 * c)):
        out, lse, idx = torch.zeros(n, HEADS, DIM), torch.zeros(n, HEADS), torch.arange(n)
        o, lse_b = torch.randn(n, HEADS, DIM, generator=gen), torch.randn(n, HEADS, generator=gen)
        items[f"merge_{name}"] = lambda a=(out, lse, idx, o, lse_b): merge_partial(*a)
    shapes = {
        "uly": (length, length, HEADS // 2, KV_HEADS // 2, True),
        "causal_c": (c, c, HEADS, KV_HEADS, True),
        "causal_2c": (2 * c, 2 * c, HEADS, KV_HEADS, True),
        "full_cc": (c, c, HEADS, KV_HEADS, False),
        "full_2cc": (2 * c, c, HEADS, KV_HEADS, False),
    }
    for name, (nq, nk, h, kv, causal) in shapes.items():
        items[f"{name}_fwd"], items[f"{name}_bwd"] = _point(kernel, nq, nk, h, kv, causal, gen)
    return items


def run(lengths: list[int], rounds: int) -> dict[str, dict[str, list[float]]]:
    """Seconds of every item per length and round, interleaved (module docstring)."""
    torch.set_num_threads(1)
    kernel, gen = select_kernel("auto", torch.device("cpu")), torch.Generator().manual_seed(0)
    all_items = {n: items_for(kernel, n, gen) for n in lengths}
    order = [(n, k) for n in lengths for k in all_items[n]]
    for n, k in order:
        all_items[n][k]()  # warm-up
    times: dict[str, dict[str, list[float]]] = {str(n): {k: [] for k in all_items[n]} for n in lengths}
    for r in range(rounds):
        shift = (r * 7) % len(order)
        this = order[shift:] + order[:shift]
        for n, k in this[::-1] if r % 2 else this:
            start = time.perf_counter()
            all_items[n][k]()
            times[str(n)][k].append(time.perf_counter() - start)
    return times


def report(times: dict[str, dict[str, list[float]]]) -> list[str]:
    """Per length: ring walk and kernels against Ulysses, and full-block against causal FLOP rates."""
    flops = 2 * HEADS * DIM  # causal forward FLOPs per (query, key) pair with all heads, half masked
    lines = []
    for n_text, items in times.items():
        n, m = int(n_text), {k: float(np.median(v)) for k, v in items.items()}
        c = n // 4
        walk = [(m["ring_rank0_" + p] + m["ring_rank1_" + p]) / 2 for p in ("fwd", "bwd")]
        kern = [
            np.mean([sum(m[f"kern_{b}_{p}_r{r}"] for b in ("diag", "cross", "step1")) for r in (0, 1)])
            for p in ("fwd", "bwd")
        ]
        rate = {p: (flops * c * c / m[f"causal_c_{p}"], 2 * flops * c * c / m[f"full_cc_{p}"]) for p in ("fwd", "bwd")}
        lines.append(
            f"L={n}: ring walk / Ulysses kernel fwd {walk[0] / m['uly_fwd']:.3f} bwd {walk[1] / m['uly_bwd']:.3f}; "
            f"kernels alone fwd {kern[0] / m['uly_fwd']:.3f} bwd {kern[1] / m['uly_bwd']:.3f}; "
            f"full c x c / causal c FLOP rate fwd {rate['fwd'][1] / rate['fwd'][0]:.2f} "
            f"bwd {rate['bwd'][1] / rate['bwd'][0]:.2f}; merges {m['merge_c'] * 1e3:.2f} / {m['merge_2c'] * 1e3:.2f} ms"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--lengths", default="5550,5904", help="sample lengths, comma-separated")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("-o", "--output", default="out/ring_components.json")
    args = parser.parse_args()
    lengths = [int(x) for x in args.lengths.split(",")]
    if not lengths or min(lengths) < 8 or args.rounds < 1:
        parser.error("lengths must be at least 8 tokens and rounds at least 1")
    times = run(lengths, args.rounds)
    with open(args.output, "w") as f:
        json.dump({"raw_s": times, "rounds": args.rounds}, f, indent=1)
    print("\n".join(report(times)))


if __name__ == "__main__":
    main()
