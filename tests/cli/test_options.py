"""``nspsim.options``: one typed ``key=value`` parser and finite float flag types for every entry point."""

from __future__ import annotations

import argparse

import pytest

from nspsim.options import non_negative_float, parse_option, parse_options, parse_value, positive_float


@pytest.mark.parametrize(
    "text, value",
    [
        ("8", 8),
        ("-1", -1),
        ("1_000", 1000),
        ("0.5", 0.5),
        ("1e-3", 1e-3),
        ("1e3", 1000.0),
        ("True", True),
        ("false", False),
        ("auto", "auto"),
        (" attn-fwd ", "attn-fwd"),
        ("highs", "highs"),
    ],
)
def test_values_are_typed_by_one_rule(text: str, value: object) -> None:
    parsed = parse_value(text)
    assert parsed == value and type(parsed) is type(value)


@pytest.mark.parametrize("text", ["nan", "inf", "-inf", "NaN", "  "])
def test_non_finite_and_empty_values_are_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_value(text)


def test_options_need_key_and_value_once() -> None:
    assert parse_option(" beam_width = 8 ") == ("beam_width", 8)
    assert parse_options(["degree=16", "monotone=false"]) == {"degree": 16, "monotone": False}
    for bad in ("beam_width", "=8", "beam_width="):
        with pytest.raises(ValueError, match="must look like KEY=VALUE"):
            parse_option(bad)
    with pytest.raises(ValueError, match="not a finite number"):
        parse_option("time_limit=inf")
    with pytest.raises(ValueError, match="given twice"):
        parse_options(["degree=2", "degree=4"])


def test_float_flags_refuse_nan_and_inf() -> None:
    assert positive_float("0.5") == 0.5 and non_negative_float("0") == 0.0
    for bad in ("nan", "inf", "-inf", "0", "-1", "x"):
        with pytest.raises(argparse.ArgumentTypeError):
            positive_float(bad)
    for bad in ("nan", "inf", "-0.1"):
        with pytest.raises(argparse.ArgumentTypeError):
            non_negative_float(bad)
