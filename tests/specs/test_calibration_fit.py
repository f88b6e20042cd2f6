"""Calibration fits (pure): known coefficients are recovered exactly from synthetic timings, and the
profile built from measurements loads and prices what was measured."""

from __future__ import annotations

import numpy as np
import pytest

from nspsim.cost.analytic import AnalyticCostModel
from nspsim.cost.profile import parse_profile
from nspsim.specs.clusters import get_cluster
from nspsim.specs.model import tiny
from nspsim.specs.training import TrainingSpec
from nspsim_runtime.calibration.fit import LinkMeasurement, Measurements, attention_flops, build_profile, fit_link


def test_fit_link_recovers_latency_and_bandwidth_exactly() -> None:
    sizes = [4096.0, 32768.0, 262144.0, 1048576.0, 4194304.0]
    times = [3e-4 + s / 1.5e9 for s in sizes]
    lat, bw, err = fit_link(sizes, times)
    assert lat == pytest.approx(3e-4, rel=1e-9) and bw == pytest.approx(1.5e9, rel=1e-9) and err < 1e-9


def test_fit_link_needs_two_points() -> None:
    with pytest.raises(ValueError, match="at least two"):
        fit_link([1.0], [1.0])


def _measurements() -> Measurements:
    spec = tiny()
    lengths = (256, 1024, 4096)
    # synthetic kernels: 8 heads at 4 GFLOP/s, 4 heads at 3 GFLOP/s (backward 2 GFLOP/s)
    fwd = {h: tuple(attention_flops(n, h, spec.head_dim, False) / r for n in lengths) for h, r in ((8, 4e9), (4, 3e9))}
    bwd = {h: tuple(attention_flops(n, h, spec.head_dim, True) / 2e9 for n in lengths) for h in (8, 4)}
    tokens = (64, 256, 1024)
    sizes = (4096.0, 65536.0, 1048576.0)
    return Measurements(
        model="tiny",
        head_dim=spec.head_dim,
        attn_lengths=lengths,
        attn_fwd_s=fwd,
        attn_bwd_s=bwd,
        layer_tokens=tokens,
        nonattn_fwd_s=tuple(1e-4 + 2e-6 * t for t in tokens),
        nonattn_bwd_s=tuple(2e-4 + 4e-6 * t for t in tokens),
        head_fwd_s=tuple(5e-5 + 1e-6 * t for t in tokens),
        head_bwd_s=tuple(1e-4 + 2e-6 * t for t in tokens),
        optimizer_s=0.01,
        step_s=0.004,
        micro_batch_s=2e-3,
        links=tuple(
            LinkMeasurement(collective=c, group_size=2, nbytes=sizes, seconds=tuple(lat + s / bw for s in sizes))
            for c, lat, bw in (
                ("alltoall", 4e-4, 1e9),
                ("p2p", 1e-4, 2e9),
                ("allgather", 2e-4, 8e8),
                ("reduce_scatter", 3e-4, 6e8),
            )
        ),  # fmt: skip
        overlap_slowdown=1.25,
        element_bytes=4,
    )


def test_profile_from_measurements_prices_what_was_measured() -> None:
    data = build_profile(_measurements(), name="syn", provenance={"host": "h", "date": "d", "ranks": 2}, cluster="cpu")
    profile = parse_profile(data, "syn")
    cost = AnalyticCostModel(
        model=tiny(),
        cluster=get_cluster("cpu", 2),
        training=TrainingSpec(act_bytes=4, param_bytes=4, grad_bytes=4),
        profile=profile,
    )
    for n in (256, 1024, 4096):
        assert cost.attention(np.array([n]), 1).fwd.compute == pytest.approx(attention_flops(n, 8, 8, False) / 4e9)
        assert cost.attention(np.array([n]), 2).bwd.compute == pytest.approx(attention_flops(n, 4, 8, True) / 2e9)
    na = cost.non_attention(500.0)
    assert na.fwd_compute == pytest.approx(1e-4 + 2e-6 * 500) and na.bwd_compute == pytest.approx(2e-4 + 4e-6 * 500)
    assert cost.head(500.0) == pytest.approx((5e-5 + 5e-4, 1e-4 + 1e-3))
    assert cost.alltoall_time(1e6, 2) == pytest.approx(4e-4 + 1e-3)
    assert cost.latency(2) == pytest.approx(4e-4)
    assert cost.micro_batch_overhead() == 2e-3
    assert cost.optimizer_time() == 0.01 and cost.step_overhead() == 0.004 and profile.ranks == 2
    assert data["fit"]["alltoall[2]"]["max_rel_error"] < 1e-9
    assert data["fit"]["nonattn_fwd_s_by_tokens"]["affine_max_rel_error"] < 1e-9


def test_executor_timings_become_micro_batch_cost_and_per_token_layer_cost() -> None:
    from dataclasses import replace

    from nspsim_runtime.calibration.fit import executor_overhead, isolated_step

    base = _measurements()
    spec = tiny()
    m = replace(base, num_layers=spec.num_layers, micro_batch_s=0.0)
    exec_tokens = (128, 512, 1024)
    # isolated per layer: (1e-4 + 2e-6 t) + (2e-4 + 4e-6 t); head: (5e-5 + 1e-6 t) + (1e-4 + 2e-6 t)
    iso = [spec.num_layers * (3e-4 + 6e-6 * t) + 1.5e-4 + 3e-6 * t for t in exec_tokens]
    assert [isolated_step(m, t) for t in exec_tokens] == pytest.approx(iso, rel=1e-12)
    # the executor adds 5 ms per micro-batch and 3 us per token and layer
    m = replace(
        m,
        exec_tokens=exec_tokens,
        exec_local_s=tuple(i + 5e-3 + 3e-6 * spec.num_layers * t for i, t in zip(iso, exec_tokens)),
    )
    fit = executor_overhead(m)
    assert fit is not None
    assert fit.micro_batch_s == pytest.approx(5e-3, rel=1e-9) and fit.per_token_layer_s == pytest.approx(3e-6, rel=1e-9)
    profile = parse_profile(build_profile(m, name="x", provenance={"ranks": 2}, cluster="cpu"), "x")
    cost = AnalyticCostModel(
        model=spec,
        cluster=get_cluster("cpu", 2),
        training=TrainingSpec(act_bytes=4, param_bytes=4, grad_bytes=4),
        profile=profile,
    )
    assert cost.micro_batch_overhead() == pytest.approx(5e-3, rel=1e-9)
    na = cost.non_attention(500.0)
    # the extra splits 1:2 between forward and backward, as the isolated times do (they are 1:2 exactly)
    assert na.fwd_compute == pytest.approx(1e-4 + (2e-6 + 1e-6) * 500, rel=1e-9)
    assert na.bwd_compute == pytest.approx(2e-4 + (4e-6 + 2e-6) * 500, rel=1e-9)
    assert profile.fit["executor"]["isolated_nonattn_fwd_s"] == pytest.approx(list(base.nonattn_fwd_s))


def test_executor_residual_below_the_tables_adds_nothing() -> None:
    from dataclasses import replace

    from nspsim_runtime.calibration.fit import executor_overhead, isolated_step

    m = replace(_measurements(), num_layers=2, exec_tokens=(128, 1024), exec_local_s=(0.0, 0.0))
    fit = executor_overhead(m)
    assert fit is not None and fit.micro_batch_s == 0.0 and fit.per_token_layer_s == 0.0
    assert fit.residual_s == pytest.approx((-isolated_step(m, 128), -isolated_step(m, 1024)))
    with pytest.raises(ValueError, match="one value per token count"):
        replace(m, exec_local_s=(0.1,))


def test_executor_fit_with_a_negative_intercept_refits_the_slope_through_the_origin() -> None:
    from dataclasses import replace

    from nspsim_runtime.calibration.fit import executor_overhead, isolated_step

    base = replace(_measurements(), num_layers=2)
    tokens = (100, 200, 300)
    residual = (-1e-4 + 1e-6 * 100, -1e-4 + 1e-6 * 200, -1e-4 + 1e-6 * 300)  # a = -0.1 ms, b = 1 us/token
    measured = tuple(isolated_step(base, t) + r for t, r in zip(tokens, residual))
    m = replace(base, exec_tokens=tokens, exec_local_s=measured)
    fit = executor_overhead(m)
    x = np.array([100.0, 200.0, 300.0])
    slope = float(x @ np.array(residual) / (x @ x))  # least squares through the origin
    assert fit is not None and fit.micro_batch_s == 0.0
    assert fit.per_token_layer_s == pytest.approx(slope / 2, rel=1e-9)


def test_a_measured_dip_is_fitted_non_decreasing_not_refused() -> None:
    """A loaded machine measured 5.607 ms at 256 tokens and 3.514 ms at 1,024 (CI, 2026-12-02): the
    least-squares non-decreasing fit pools the two, and the profile's time table accepts it."""
    from nspsim.cost.profile.tables import TimeTable
    from nspsim_runtime.calibration.fit import rising, time_table

    assert rising([0.005607, 0.003514, 0.006, 0.01]) == pytest.approx((0.0045605, 0.0045605, 0.006, 0.01))
    table = time_table([256, 1024, 4096, 8192], [0.005607, 0.003514, 0.006, 0.01])
    TimeTable(tokens=tuple(p[0] for p in table), seconds=tuple(p[1] for p in table))


def test_full_block_timings_price_the_ring_steps_off_diagonal_blocks() -> None:
    """Full L x L blocks measured at 6 GFLOP/s forward and 3 backward (twice a causal sample's FLOPs):
    the profile prices a full block at its measured time, and a degree-2 ring's later step is all full."""
    from dataclasses import replace

    from nspsim.cost.backends.ring import ring_kernels

    spec, lengths = tiny(), (256, 1024)
    full_fwd = {8: tuple(2 * attention_flops(n, 8, spec.head_dim, False) / 6e9 for n in lengths)}
    full_bwd = {8: tuple(2 * attention_flops(n, 8, spec.head_dim, True) / 3e9 for n in lengths)}
    m = replace(_measurements(), attn_full_lengths=lengths, attn_full_fwd_s=full_fwd, attn_full_bwd_s=full_bwd)
    data = build_profile(m, name="syn", provenance={"ranks": 2}, cluster="cpu")
    assert np.array(data["attn_full_fwd_flops_by_length"]) == pytest.approx(np.array([[256, 6e9], [1024, 6e9]]))
    cost = AnalyticCostModel(
        model=spec,
        cluster=get_cluster("cpu", 2),
        training=TrainingSpec(backend="ring", act_bytes=4, param_bytes=4, grad_bytes=4),
        profile=parse_profile(data, "syn"),
    )
    assert cost.full_attn_throughput(np.array([512]), backward=True)[0] == pytest.approx(3e9)
    # L = 2048 at k = 2: c = 512; a GPU's share F = attention_flops(2048) / 2, its later step F / 2 full,
    # its first step F / 4 causal (8 heads at 4e9 forward, 2e9 backward) and F / 4 full.
    share = attention_flops(2048, 8, spec.head_dim, False) / 2
    f0, b0, fs, bs = ring_kernels(cost, np.array([2048]), 2)
    assert fs[0] == pytest.approx(share / 2 / 6e9) and bs[0] == pytest.approx(2.5 * share / 2 / 3e9)
    assert f0[0] == pytest.approx(share / 4 / 4e9 + share / 4 / 6e9)
    assert b0[0] == pytest.approx(2.5 * (share / 4 / 2e9 + share / 4 / 3e9))
    with pytest.raises(ValueError, match="one value per length in attn_full_lengths"):
        replace(m, attn_full_fwd_s={8: (1.0,)})
