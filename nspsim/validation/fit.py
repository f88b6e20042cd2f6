"""Coefficients from component rows: the published attention-kernel curves of :mod:`nspsim.specs.kernels`.

Only ``kind = "kernel"`` rows enter a fit, never an end-to-end row (docs/validation.md, "the split").
For each (GPU family, kernel, head dimension) with causal rows in TFLOP/s:

* forward rows fit the forward curve ``peak * L / (L + half)`` (least squares on log(model / published),
  so every row weighs by its relative error);
* with forward rows too, forward+backward rows fit the backward curve through
  ``T_fb = 3.5 / (1 / T_fwd + 2.5 / T_bwd)`` (FlashAttention's convention: backward 2.5x forward);
* forward+backward rows alone fit one curve for both passes (the split cannot be recovered);
* forward rows alone (FA3, cuDNN on H100; FA2 at head dim 256) take the backward curve as the forward
  one times the ratio of FA2's fitted backward to forward throughput at 16K tokens on the same family
  and the nearest head dimension where FA2's backward was measured.

Rows the kernel model does not describe stay out: non-causal attention (nspsim trains causal LMs),
kernels nspsim does not offer (FlashAttention-1, xformers, unfused attention), other units.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np
from scipy.optimize import least_squares

from nspsim.cost.backends.base import BWD_ATTN_FLOP_RATIO
from nspsim.specs.kernels import AttentionCurves, KernelCurve
from nspsim.validation.dataset import ReferenceRow
from nspsim.validation.hardware import ROW_KERNELS, family_of

RATIO_LENGTH = 16384.0
R = BWD_ATTN_FLOP_RATIO


def attention_fit_rows(rows: Iterable[ReferenceRow]) -> dict[tuple[str, str, int], list[ReferenceRow]]:
    """The rows each (family, kernel, head dim) curve is fitted to."""
    out: dict[tuple[str, str, int], list[ReferenceRow]] = defaultdict(list)
    for row in rows:
        c = row.config
        if row.kind != "kernel" or c.get("op") != "attention" or row.unit != "TFLOP/s" or not c.get("causal"):
            continue
        kernel, family = ROW_KERNELS.get(str(c.get("kernel"))), family_of(str(c.get("gpu")))
        if kernel is None or family is None or c.get("pass") not in ("fwd", "fwd+bwd"):
            continue
        out[(family, kernel, int(c["head_dim"]))].append(row)
    return dict(out)


def _fit(lengths: np.ndarray, target: np.ndarray, model: object) -> KernelCurve:
    def residual(x: np.ndarray) -> np.ndarray:
        curve = KernelCurve(float(np.exp(x[0])), float(np.exp(x[1])))
        return np.asarray(np.log(model(curve, lengths) / target))  # type: ignore[operator]

    start = np.log([float(target.max()) * 1.2, 1000.0])
    x = least_squares(residual, start, method="lm").x
    return KernelCurve(_significant(float(np.exp(x[0]))), round(float(np.exp(x[1])), 1))


def fit_attention_curves(rows: Iterable[ReferenceRow]) -> dict[tuple[str, str, int], AttentionCurves]:
    """Fitted curves per (family, kernel, head dim) from the kernel rows (module docstring)."""
    groups = attention_fit_rows(rows)
    out: dict[tuple[str, str, int], AttentionCurves] = {}
    pending: list[tuple[tuple[str, str, int], KernelCurve, list[ReferenceRow]]] = []
    for key in sorted(groups):
        group = groups[key]
        fwd = [r for r in group if r.config["pass"] == "fwd"]
        both = [r for r in group if r.config["pass"] == "fwd+bwd"]
        if fwd:
            lf, tf = _points(fwd)
            fcurve = _fit(lf, tf, lambda c, L: c(L))
            if both:
                lb, tb = _points(both)
                bcurve = _fit(lb, tb, lambda c, L, f=fcurve: (1 + R) / (1.0 / f(L) + R / c(L)))
                out[key] = AttentionCurves(fcurve, bcurve)
            else:
                pending.append((key, fcurve, group))
        else:
            lb, tb = _points(both)
            curve = _fit(lb, tb, lambda c, L: c(L))
            out[key] = AttentionCurves(curve, curve)
    with_backward = [k for k in out if k[1] == "fa2"]  # FA2 curves whose backward rows were measured
    for key, fcurve, _ in pending:
        family, _, head_dim = key
        measured = [d for (f, _, d) in with_backward if f == family]
        if not measured:
            continue  # no FA2 backward to borrow the ratio from: the kernel stays unpublished there
        nearest = min(measured, key=lambda d: (abs(np.log2(d) - np.log2(head_dim)), d))
        fa2 = out[(family, "fa2", nearest)]
        at = np.array([RATIO_LENGTH])
        ratio = float(fa2.bwd(at)[0] / fa2.fwd(at)[0])
        bcurve = KernelCurve(_significant(fcurve.peak * ratio), fcurve.half_length)
        out[key] = AttentionCurves(fcurve, bcurve)
    return out


def _significant(value: float, digits: int = 4) -> float:
    """``value`` to ``digits`` significant digits (what the shipped constants print)."""
    return float(f"{value:.{digits}g}")


def _points(rows: list[ReferenceRow]) -> tuple[np.ndarray, np.ndarray]:
    lengths = np.array([float(r.config["seqlen"]) for r in rows])
    return lengths, np.array([r.published * 1e12 for r in rows])


def curves_source(curves: Mapping[tuple[str, str, int], AttentionCurves]) -> str:
    """The Python literal of :data:`nspsim.specs.kernels.ATTENTION_CURVES` for ``curves`` (what
    ``python -m nspsim.validation.fit`` prints to paste after a change of the reference set)."""
    lines = ["ATTENTION_CURVES: Mapping[tuple[str, str, int], AttentionCurves] = {"]
    for key, c in sorted(curves.items()):
        fwd, bwd = c.fwd, c.bwd
        lines.append(
            f"    {key!r}: AttentionCurves(KernelCurve({fwd.peak:.4g}, {fwd.half_length}), "
            f"KernelCurve({bwd.peak:.4g}, {bwd.half_length})),"
        )
    lines.append("}")
    return "\n".join(lines).replace("e+", "e")


if __name__ == "__main__":
    from nspsim.validation.dataset import load_reference

    print(curves_source(fit_attention_curves(load_reference())))


@dataclass(frozen=True)
class LinkLatencies:
    """Collective latencies fitted to nccl-tests time sweeps: one collective's fixed cost inside a host
    and across hosts, and the extra cost per peer of an all-to-all."""

    intra_s: float
    inter_s: float
    alltoall_peer_s: float


LATENCY_OPS = ("allgather", "reduce_scatter", "alltoall")


def latency_fit_rows(rows: Iterable[ReferenceRow]) -> list[ReferenceRow]:
    """Collective time rows (``us``) of the collectives a training step uses, on Hopper parts, that the
    model expresses (:func:`nspsim.validation.evaluate.evaluate_row` gives them a value)."""
    from nspsim.validation.evaluate import evaluate_row

    return [
        r
        for r in rows
        if r.kind == "collective"
        and r.unit == "us"
        and r.config.get("op") in LATENCY_OPS
        and family_of(str(r.config.get("gpu"))) == "h100"
        and evaluate_row(r).simulated is not None
    ]


def fit_link_latencies(rows: Iterable[ReferenceRow]) -> LinkLatencies:
    """Least-squares latencies (relative error) over :func:`latency_fit_rows`: each row's time is the
    model's bandwidth time (latencies zeroed) plus ``intra`` or ``inter`` plus, for an all-to-all,
    ``peer`` per peer."""
    from nspsim.validation.evaluate import collective_row_seconds

    fit_rows = latency_fit_rows(rows)
    bandwidth = np.array([collective_row_seconds(r, zero_latency=True) for r in fit_rows])
    published = np.array([r.published * 1e-6 for r in fit_rows])
    gpus = np.array([float(r.config["gpus"]) for r in fit_rows])
    cross = np.array([float(r.config["gpus"]) > float(r.config["gpus_per_node"]) for r in fit_rows])
    a2a = np.array([r.config["op"] == "alltoall" for r in fit_rows])

    def residual(x: np.ndarray) -> np.ndarray:
        intra, inter, peer = np.exp(x)
        lat = np.where(cross, inter, intra) + np.where(a2a, peer * (gpus - 1), 0.0)
        return np.asarray(np.log((bandwidth + lat) / published))

    x = least_squares(residual, np.log([20e-6, 40e-6, 2e-6]), method="lm").x
    intra, inter, peer = (round(float(v), 7) for v in np.exp(x))
    return LinkLatencies(intra, inter, peer)


GEMM_SOURCE_ROWS: frozenset[str] = frozenset({"mamf-a100-sxm-bf16", "mamf-h100-bf16"})
"""The GEMM rows whose figures are the GPU specs' ``matmul_flops`` (:mod:`nspsim.specs.cluster`)."""


def fitted_row_ids(rows: Iterable[ReferenceRow]) -> frozenset[str]:
    """Ids of the rows some shipped coefficient was fitted to or read from: the attention-curve rows,
    the collective-latency rows, and the GEMM rows of the matmul rates."""
    rows = tuple(rows)
    attention = {r.id for group in attention_fit_rows(rows).values() for r in group}
    latency = {r.id for r in latency_fit_rows(rows)}
    gemm = {r.id for r in rows if r.id in GEMM_SOURCE_ROWS}
    return frozenset(attention | latency | gemm)
