"""Issue 28, pure: the common level of interleaved cases, each case's deviation from it, and the verdict's
rule that a case standing out is the model's error whatever the machine did (hand-computed cases)."""

from __future__ import annotations

import math

import pytest

from nspsim_runtime.validation.drift import EXIT_MACHINE_MOVED, Machine, verdict
from nspsim_runtime.validation.level import MIN_CASES, deviations, spread, standout_phrase, step_error_se

MOVED = Machine(run_drift=0.49, flagged=7)


def test_step_error_se_hand_computed() -> None:
    # per-step errors (2-1)/1 = 1.0 and (2-2)/2 = 0.0: std (ddof 1) sqrt(0.5), over sqrt(2) -> 0.5
    assert step_error_se([1.0, 2.0], [2.0, 2.0]) == pytest.approx(0.5)
    assert step_error_se([1.0], [3.0]) == 0.0


def test_deviation_off_the_median_level_hand_computed() -> None:
    rows = [("a", 2, -0.10, 0.0), ("b", 2, -0.20, 0.0), ("c", 2, 0.17, 0.01)]
    devs = deviations(rows, 0.10)
    assert [d.level for d in devs] == [-0.10] * 3  # the median error
    assert devs[0].deviation == pytest.approx(0.0)
    assert devs[1].deviation == pytest.approx(0.8 / 0.9 - 1)  # -11.1%: beyond 10% and 2 x 0 -> stands out
    assert devs[2].deviation == pytest.approx(1.17 / 0.9 - 1)  # +30%
    assert devs[2].stderr == pytest.approx(0.01 / 0.9)
    assert [d.stands_out for d in devs] == [False, True, True]
    assert spread(devs) == pytest.approx((0.0 + 0.1 / 0.9 + 0.27 / 0.9) / 3)
    assert standout_phrase(devs) == "b -11% (se 0%), c +30% (se 1%)"


def test_noise_keeps_a_case_from_standing_out() -> None:
    rows = [("a", 2, 0.0, 0.0), ("b", 2, 0.0, 0.0), ("c", 2, 0.15, 0.03)]
    assert not deviations(rows, 0.10)[2].stands_out  # 15% < 10% + 2 x 3%
    assert deviations(rows, 0.05)[2].stands_out  # 15% > 5% + 2 x 3%


def test_levels_are_per_rank_count_and_need_enough_cases() -> None:
    rows = [("a", 2, -0.2, 0.0), ("b", 2, -0.2, 0.0), ("c", 2, -0.2, 0.0), ("d", 4, 0.5, 0.0), ("e", 4, 0.0, 0.0)]
    devs = deviations(rows)
    assert [d.level for d in devs[:3]] == [-0.2] * 3 and not any(d.stands_out for d in devs[:3])
    assert MIN_CASES == 3 and devs[3].level == 0.0 and not devs[3].stands_out  # two cases have no majority
    assert devs[3].deviation == pytest.approx(0.5)


def test_verdict_blames_the_model_for_a_case_that_stands_out_on_a_moving_machine() -> None:
    # this session's default run 1: raw 10.1%, the reference moved 49%; nsp ring +47% off a -7% level
    errors = [-0.04, -0.01, -0.09, -0.11, -0.12, -0.11, 0.36, -0.08, -0.06, 0.03]
    rows = [(f"case{i}", 2, e, 0.03) for i, e in enumerate(errors)]
    devs = deviations(rows, 0.10)
    assert [d.label for d in devs if d.stands_out] == ["case6"]
    raw = sum(abs(e) for e in errors) / len(errors)
    got = verdict(raw, 0.147, MOVED, 0.10, devs)
    assert (got.status, got.exit_code) == ("model", 1)
    assert got.line.startswith("verdict: the model is wrong for case6 +")
    assert "every case -7% alike" in got.line  # median of ten: (-0.08 - 0.06) / 2
    # without the deviations the same run is put on the machine (the old rule)
    assert verdict(raw, 0.147, MOVED, 0.10).exit_code == EXIT_MACHINE_MOVED
    # without --max-mape the line names the case too, and exits 0
    free = verdict(raw, 0.147, MOVED, None, devs)
    assert (free.status, free.exit_code) == ("model", 0) and "case6" in free.line


def test_a_common_level_alone_stays_the_machine() -> None:
    errors = [-0.20, -0.22, -0.18, -0.21, -0.19]  # every case alike: no case stands out
    devs = deviations([(f"c{i}", 2, e, 0.02) for i, e in enumerate(errors)], 0.10)
    assert not any(d.stands_out for d in devs) and spread(devs) is not None and spread(devs) < 0.02
    got = verdict(0.20, 0.13, MOVED, 0.10, devs)
    assert (got.status, got.exit_code) == ("machine", EXIT_MACHINE_MOVED)
    within = verdict(0.08, 0.13, MOVED, 0.10, devs)
    assert within.exit_code == 0 and "off the common level" not in within.line
    assert math.isclose(devs[2].level, -0.20)


def test_contention_keeps_a_standout_from_blaming_the_model() -> None:
    # a busy-loop started 40 s into a default run: static:degree=1 +37% off a -21% level, foreign load 0.39 per core
    errors = [0.08, -0.23, -0.22, -0.20, -0.21, -0.21, -0.27, -0.18, -0.22, -0.17]
    devs = deviations([(f"c{i}", 2, e, 0.05) for i, e in enumerate(errors)], 0.10)
    assert [d.label for d in devs if d.stands_out] == ["c0"]
    busy = verdict(0.199, 0.135, Machine(run_drift=0.4, foreign_load=0.39), 0.10, devs)
    assert (busy.status, busy.exit_code) == ("machine", EXIT_MACHINE_MOVED) and "foreign load 0.39" in busy.line
    stolen = verdict(0.199, 0.135, Machine(steal=0.2), 0.10, devs)
    assert stolen.exit_code == EXIT_MACHINE_MOVED
    drifted = verdict(0.199, 0.135, Machine(run_drift=0.4), 0.10, devs)  # a speed drift alone: the model's
    assert (drifted.status, drifted.exit_code) == ("model", 1)
