"""Validation statistics on constructed inputs: errors, the paired order test, Kendall's tau, cases."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nspsim_runtime.validation.cases import Case, default_suite, held_out_suite, load_cases
from nspsim_runtime.validation.stats import CaseResult, paired, summarise

BATCH = ("code", "tiny", 1, 1, 1, 0, 4, 2)


def case(label: str, measured: tuple[float, ...], predicted: tuple[float, ...], batches: tuple = BATCH) -> CaseResult:
    return CaseResult(label=label, ranks=2, planner=label, batches=batches, measured_s=measured, predicted_s=predicted)


def test_errors_are_signed_and_summarised() -> None:
    a = case("a", (1.0, 1.0, 1.0), (1.1, 1.1, 1.1))  # +10%
    b = case("b", (2.0, 2.0, 2.0), (1.6, 1.6, 1.6))  # -20%
    assert a.error == pytest.approx(0.1) and b.error == pytest.approx(-0.2)
    s = summarise([a, b])
    assert s.mape == pytest.approx(0.15) and s.max_abs_error == pytest.approx(0.2)
    assert s.geomean_abs_error == pytest.approx((0.1 * 0.2) ** 0.5)


def test_breakdown_errors_add_up_to_the_error() -> None:
    c = CaseResult(label="c", ranks=2, planner="c", batches=BATCH, measured_s=(2.0,), predicted_s=(1.5,),
                   measured_breakdown_s={"attn_fwd": 1.0, "non_attn": 1.0},
                   predicted_breakdown_s={"attn_fwd": 1.0, "non_attn": 0.5})  # fmt: skip
    assert c.breakdown_error == {"attn_fwd": 0.0, "non_attn": -0.25}
    assert sum(c.breakdown_error.values()) == pytest.approx(c.error)


def test_a_pair_resolves_beyond_two_standard_errors() -> None:
    # std 0.1 over 4 steps each: se 0.05, se of the difference 0.0707; 0.5 s apart is resolved
    a = case("a", (2.4, 2.6, 2.4, 2.6), (1.0, 1.0, 1.0, 1.0))
    b = case("b", (1.9, 2.1, 1.9, 2.1), (1.5, 1.5, 1.5, 1.5))
    p = paired(a, b)
    assert p is not None and p.stderr_s == pytest.approx((2 * (0.11547 / 2) ** 2) ** 0.5, rel=1e-3)
    assert p.resolved and not p.agrees  # measured a > b, predicted a < b
    s = summarise([a, b])
    assert (s.pairs_resolved, s.pairs_agree) == (1, 0) and s.kendall_tau == pytest.approx(-1.0)


def test_a_shared_batch_spread_does_not_resolve_a_small_difference() -> None:
    # the batches vary 1 s .. 5 s; a is 0.1 s slower on every step: not beyond two standard errors
    a = case("a", (1.1, 3.1, 5.1), (1.0, 3.0, 5.0))
    b = case("b", (1.0, 3.0, 5.0), (1.1, 3.1, 5.1))
    assert not paired(a, b).resolved  # type: ignore[union-attr]


def test_noisy_pairs_are_not_resolved_and_other_batches_never_pair() -> None:
    a = case("a", (1.0, 1.2, 0.9), (1.0, 1.0, 1.0))
    b = case("b", (1.1, 1.0, 1.0), (1.0, 1.0, 1.0))
    assert not paired(a, b).resolved  # type: ignore[union-attr]
    c = case("c", (9.0, 9.0, 9.0), (1.0, 1.0, 1.0), batches=("wikipedia",))
    s = summarise([a, b, c])
    assert len(s.pairs) == 1 and s.pairs_resolved == 0


def test_suites_cover_the_strategies_and_ranks() -> None:
    cases = default_suite((2, 4))
    planners = {c.planner for c in cases}
    assert {"static:degree=1", "static:degree=2", "static:degree=4", "flexsp", "basp", "nsp2l", "nsp"} <= planners
    assert {c.backend for c in cases} == {"ulysses", "ring"} and {"0", "all"} <= {c.lookahead for c in cases}
    assert any(c.recompute == "all" for c in cases) and any(c.token_budget for c in cases)
    assert {c.ranks for c in cases} == {2, 4}
    held = held_out_suite((2,))
    assert not {(c.trace, c.seed) for c in held} & {(c.trace, c.seed) for c in cases}
    assert len({c.name for c in cases}) == len(cases)


def test_case_files(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    path.write_text(json.dumps([{"ranks": 2, "planner": "nsp", "tokens_per_batch": "8k", "lookahead": 0}]))
    (c,) = load_cases(str(path))
    assert c.tokens_per_batch == 8192 and c.lookahead == "0" and "--lookahead" in c.train_args()
    for bad, message in [
        ([{"ranks": 3, "planner": "nsp"}], "power of two"),
        ([{"ranks": 2}], "needs at least"),
        ([{"ranks": 2, "planner": "nsp", "colour": 1}], "unknown keys"),
        ([{"ranks": 2, "planner": "nsp", "steps": 2}], "steps must be"),
        ({}, "non-empty JSON list"),
    ]:
        path.write_text(json.dumps(bad))
        with pytest.raises(ValueError, match=message):
            load_cases(str(path))


def test_case_names_say_what_differs() -> None:
    assert Case(ranks=4, planner="nsp", backend="ring", lookahead="0").name == "nsp ring lookahead=0 @4"
    assert Case(ranks=2, planner="nsp", trace="wikipedia").name == "nsp wikipedia @2"
