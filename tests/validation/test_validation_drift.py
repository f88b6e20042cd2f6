"""Issue 28, pure: the /proc parsers (fixtures), the speed-factor correction, the verdict rule (hand-computed
cases) and the interleaving schedule (seeded; every case gets every block once, in order)."""

from __future__ import annotations

import pytest

from nspsim_runtime.machine import parse_cpuinfo_mhz, parse_loadavg, parse_scaling_khz, parse_stat, steal_share
from nspsim_runtime.machine import summarise as machine_summary
from nspsim_runtime.validation.drift import (
    EXIT_MACHINE_MOVED,
    Machine,
    block_drift,
    case_drift,
    step_factors,
    verdict,
)
from nspsim_runtime.validation.rounds import case_blocks, schedule
from nspsim_runtime.validation.stats import CaseResult, summarise

STAT = """cpu  10606 0 3080 35624 135 0 41 59 0 0
cpu0 5249 0 1472 17943 58 0 9 28 0 0
cpu1 5357 0 1608 17680 76 0 32 30 0 0
intr 130206 0 0
"""
CPUINFO = """processor\t: 0
model name\t: AMD EPYC
cpu MHz\t\t: 2596.122
processor\t: 1
cpu MHz\t\t: 2400.000
"""


def test_proc_parsers_read_fixtures() -> None:
    assert parse_loadavg("1.11 0.28 0.09 3/101 5147\n") == (1.11, 0.28, 0.09)
    assert parse_stat(STAT) == (10606 + 3080 + 35624 + 135 + 41 + 59, 59)
    assert parse_stat("cpu  1 2 3 4\n") == (10, 0)  # an old kernel without steal
    assert parse_cpuinfo_mhz(CPUINFO) == [2596.122, 2400.0]
    assert parse_cpuinfo_mhz("processor : 0\n") == []
    assert parse_scaling_khz(["2600000\n", "", "1200000"]) == [2600.0, 1200.0]
    for bad, parse in (("", parse_loadavg), ("intr 1 2\n", parse_stat)):
        with pytest.raises(ValueError):
            parse(bad)  # type: ignore[operator]


def test_steal_share_and_machine_summary() -> None:
    a = {"time": 0, "load1": 2.5, "cpu_total": 1000, "cpu_steal": 10, "mhz": 2600.0}
    b = {"time": 1, "load1": 3.0, "cpu_total": 1200, "cpu_steal": 30, "mhz": 2400.0}
    c = {"time": 2, "load1": 2.0, "cpu_total": 1400, "cpu_steal": 80, "mhz": None}
    assert steal_share(a, b) == pytest.approx(0.1)
    assert steal_share(a, a) is None and steal_share({"cpu_total": None}, b) is None
    got = machine_summary([a, b, c], busy_ranks=2, cores=2)
    assert got["steal"] == pytest.approx(70 / 400) and got["steal_max"] == pytest.approx(0.25)
    assert got["foreign_load"] == pytest.approx(0.25) and got["foreign_load_max"] == pytest.approx(0.5)  # (l-2)/2
    assert (got["mhz_min"], got["mhz_max"]) == (2400.0, 2600.0) and got["samples"] == 3 and got["load1"] == 2.5


def test_speed_factors_and_corrected_error_hand_computed() -> None:
    blocks = [
        {"first": 0, "count": 1, "warmup": True, "before_s": 0.010, "after_s": 0.010},
        {"first": 1, "count": 1, "before_s": 0.010, "after_s": 0.012},  # mean 0.011 -> 1.1
        {"first": 2, "count": 2, "before_s": 0.012, "after_s": 0.018},  # mean 0.015 -> 1.5
    ]
    factors = step_factors(blocks, [1, 2, 3], calibration_s=0.010)
    assert factors == pytest.approx((1.1, 1.5, 1.5))
    assert block_drift(0.012, 0.018) == pytest.approx(0.5) and block_drift(0.018, 0.012) == pytest.approx(0.5)
    assert case_drift(blocks) == pytest.approx(0.5)  # the warm-up block is left out
    with pytest.raises(ValueError, match="step 9"):
        step_factors(blocks, [9], 0.01)
    case = CaseResult(label="a", ranks=2, planner="nsp", batches=(1,), measured_s=(1.2, 1.4, 1.6),
                      predicted_s=(1.0, 1.0, 1.0), speed_factors=factors, reference_drift=0.5)  # fmt: skip
    assert case.error == pytest.approx(-0.4 / 1.4)  # raw: (1.0 - 1.4) / 1.4
    assert case.corrected_predicted_step_s == pytest.approx((1.1 + 1.5 + 1.5) / 3)
    assert case.corrected_error == pytest.approx(((4.1 / 3) - 1.4) / 1.4)
    assert case.speed_factor == pytest.approx(4.1 / 3) and case.flagged
    out = case.to_dict()
    assert out["predicted_step_s"] == pytest.approx(1.0) and out["corrected_error"] == case.corrected_error
    plain = CaseResult(label="b", ranks=2, planner="nsp", batches=(1,), measured_s=(1.0, 1.0), predicted_s=(1.2, 1.2))
    assert plain.corrected_error is None and not plain.flagged
    assert summarise([case, plain]).corrected_mape is None  # some case has no factors
    assert summarise([case]).corrected_mape == pytest.approx(abs(case.corrected_error))


STEADY = Machine(run_drift=0.03, median_factor=1.02, flagged=0, steal=0.0, foreign_load=0.1)


@pytest.mark.parametrize(
    ("raw", "corrected", "machine", "status", "code"),
    [
        (0.08, 0.07, STEADY, "within", 0),  # rule 1
        (0.08, 0.07, Machine(steal=0.2), "within", 0),  # rule 1 with a signal noted
        (0.234, 0.08, Machine(run_drift=0.5, median_factor=1.3), "machine", EXIT_MACHINE_MOVED),  # rule 2
        (0.234, 0.08, STEADY, "machine", EXIT_MACHINE_MOVED),  # rule 2: the correction alone explains it
        (0.78, 0.40, Machine(foreign_load=0.9), "machine", EXIT_MACHINE_MOVED),  # rule 3
        (0.30, 0.30, Machine(flagged=2), "machine", EXIT_MACHINE_MOVED),  # rule 3: flagged cases
        (0.30, 0.29, STEADY, "model", 1),  # rule 4
        (0.30, None, Machine(), "model", 1),  # rule 4: no reference, no signal
    ],
)
def test_verdict_with_max_mape(raw: float, corrected: float | None, machine: Machine, status: str, code: int) -> None:
    got = verdict(raw, corrected, machine, max_mape=0.10)
    assert (got.status, got.exit_code) == (status, code)
    assert got.line.startswith("verdict: ") and "\n" not in got.line


def test_verdict_thresholds_are_strict_and_named() -> None:
    at = Machine(run_drift=0.10, median_factor=1.09, steal=0.05, foreign_load=0.25)  # at or below every limit
    assert verdict(0.3, 0.3, at, 0.1).status == "model"
    above = verdict(0.3, 0.3, Machine(run_drift=0.34, steal=0.08), 0.1)
    assert "moved 34%" in above.line and "steal 8%" in above.line and len(above.signals) == 2
    assert verdict(0.10, None, Machine(), 0.10).status == "within"  # raw equal to the limit passes


def test_verdict_without_max_mape_names_the_cause() -> None:
    assert verdict(0.234, 0.08, STEADY, None).status == "machine"  # the correction removes >= a third
    assert verdict(0.30, 0.25, STEADY, None).status == "steady"  # removes less than a third
    assert verdict(0.30, 0.30, Machine(steal=0.2), None).status == "machine"
    assert all(verdict(0.3, 0.1, Machine(steal=0.2), None).exit_code == 0 for _ in range(1))


def test_blocks_of_a_case() -> None:
    assert case_blocks(4, 1, 1) == [(0, 1), (1, 1), (2, 1), (3, 1)]
    assert case_blocks(6, 2, 1) == [(0, 1), (1, 2), (3, 2), (5, 1)]
    assert case_blocks(3, 5, 0) == [(0, 3)]
    with pytest.raises(ValueError, match="block-steps"):
        case_blocks(3, 0, 1)


def test_schedule_is_seeded_and_covers_every_block_in_order() -> None:
    steps = [4, 4, 6, 3, 4]
    rounds = schedule(steps, block_steps=1, warmup=1, seed=11)
    assert rounds == schedule(steps, block_steps=1, warmup=1, seed=11)
    assert [[b.case for b in r] for r in rounds] != [
        [b.case for b in r] for r in schedule(steps, block_steps=1, warmup=1, seed=12)
    ]
    assert all(b.warmup == (i == 0) for i, r in enumerate(rounds) for b in r)
    for case, n in enumerate(steps):
        mine = [(b.first, b.count) for r in rounds for b in r if b.case == case]
        assert mine == case_blocks(n, 1, 1)  # every block once, in step order
        assert sum(c for _, c in mine) == n
    assert len(rounds) == 6 and {b.case for b in rounds[5]} == {2}
    orders = {tuple(b.case for b in r) for r in schedule([4] * 5, block_steps=1, warmup=1, seed=3)}
    assert len(orders) > 1  # shuffled anew each round


def test_foreign_cpu_share_from_proc_fixtures() -> None:
    from nspsim_runtime.machine import foreign_cpu, parse_busy, parse_pid_jiffies

    # user nice system idle iowait irq softirq steal: busy = 10606 + 0 + 3080 + 0 + 41 = 13727
    assert parse_busy(STAT) == 13727
    pid = "4242 (python -m x) R 1 2 3 4 5 6 7 8 9 10 250 75 0 0 20 0 3 0 100"
    assert parse_pid_jiffies(pid) == 325  # utime 250 + stime 75, after a name holding spaces
    a = {"cpu_total": 1000, "cpu_steal": 0, "cpu_busy": 600, "cpu_own": 500}
    b = {"cpu_total": 1200, "cpu_steal": 0, "cpu_busy": 780, "cpu_own": 640}  # 180 busy, 140 ours: 40 of 200 others'
    assert foreign_cpu(a, b) == pytest.approx(0.2)
    assert foreign_cpu(a, {**b, "cpu_own": 700}) == 0.0  # never negative
    assert foreign_cpu(a, {"cpu_total": 1200}) is None
    summary = machine_summary([{"load1": 2.0}, {**a, "load1": 2.0}, {**b, "load1": 2.0}, {"load1": 2.0}], busy_ranks=2)
    assert summary["foreign_cpu"] == pytest.approx(0.2) and summary["foreign_cpu_max"] == pytest.approx(0.2)
