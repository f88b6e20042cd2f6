"""Numbers at and past every limit (issue 15, items 9, 11 and the seed part of 19): token counts are
parsed exactly and capped, options that overflow where they are consumed are bounded there, lengths
whose sum would overflow int64 are refused where they are read, and seeds are bounded at parse time."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from nspsim.cli.main import main
from nspsim.trace import HistogramTrace, load_trace
from nspsim.trace.stats import trace_stats
from nspsim.units import parse_tokens

TINY = ["--gpus", "8", "--tokens-per-batch", "64k", "--max-context", "16k"]


def _one_line_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("nspsim: error: ") and err.count("\n") == 1, err
    return err


# ---- token counts ------------------------------------------------------------------------------------


def test_token_counts_are_parsed_exactly_up_to_the_cap() -> None:
    assert parse_tokens(str(2**53)) == 2**53 and parse_tokens("8388608G") == 2**53
    assert parse_tokens("0.0009765625k") == 1 and parse_tokens("1.5000k") == 1536
    with pytest.raises(ValueError, match=r"above the limit of 9,007,199,254,740,992 \(2\*\*53\) tokens"):
        parse_tokens("99999999999999999999")  # used to become 1e20 through float
    with pytest.raises(ValueError, match="above the limit"):
        parse_tokens(str(2**53 + 1))
    with pytest.raises(ValueError, match="not a whole number"):
        parse_tokens("1.00000000000000000001k")  # float rounded it to 1024


@pytest.mark.parametrize("text", ["9" * 400, "9" * 5000 + "k", "1." + "0" * 5000 + "1"])
def test_a_token_count_with_hundreds_of_digits_is_a_short_value_error(text: str) -> None:
    with pytest.raises(ValueError) as info:  # OverflowError (or int()'s digit limit) before
        parse_tokens(text)
    assert len(str(info.value)) < 200


@pytest.mark.parametrize("flag", ["--token-budget", "--tokens-per-batch", "--max-context"])
def test_token_flags_past_the_cap_end_in_one_line(flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    err = _one_line_error(["info", flag, "9" * 400], capsys)
    assert f"argument {flag}: token count '99999999999999999999'... (400 characters) is above the limit" in err


def test_a_ratio_that_overflows_where_it_is_used_is_bounded_there(capsys: pytest.CaptureFixture[str]) -> None:
    for planner in ("nsp", "greedy"):
        err = _one_line_error(["plan", *TINY, "--planner", planner, "-O", "token_balance_ratio=1e308"], capsys)
        assert "token_balance_ratio must be 'auto', 'off' or a number in [1, 1,048,576]" in err
    assert main(["plan", *TINY, "-O", f"token_balance_ratio={2**20}"]) == 0  # the cap itself is fine


# ---- lengths too large ---------------------------------------------------------------------------------


def test_a_histogram_whose_last_edge_is_1e30_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "h.json"
    body = {"format": "nspsim-length-histogram/1", "name": "h", "source": "s", "edges": [1, 100, 1e30]}
    path.write_text(json.dumps({**body, "counts": [5, 5]}))
    err = _one_line_error(["trace", "stats", str(path)], capsys)  # OverflowError traceback before
    assert "h.json: histogram 'h': lengths too large: the last edge a 31-digit number" in err
    with pytest.raises(ValueError, match="lengths too large"):
        HistogramTrace(name="h", source="s", edges=(1, 2**36 + 2), counts=(1,))
    assert HistogramTrace(name="h", source="s", edges=(1, 2**36 + 1), counts=(1,)).max_length == 2**36


def test_huge_integers_in_a_histogram_are_one_line_errors(tmp_path: Path) -> None:
    path = tmp_path / "h.json"
    path.write_text(
        '{"format": "nspsim-length-histogram/1", "name": "h", "source": "s", "edges": [1, 10],'
        ' "counts": [5], "alpha": [1' + "0" * 400 + "]}"
    )
    with pytest.raises(ValueError, match=r"h\.json: histogram 'h': alpha: a value is too large"):
        load_trace(str(path))


@pytest.mark.parametrize("command", [["trace", "stats"], ["plan", *TINY, "--trace"], ["info", "--trace"]])
def test_lengths_whose_sum_overflows_int64_are_refused_as_too_large(
    tmp_path: Path, command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "big.txt"
    path.write_text(f"{2**62}\n{2**62}\n100\n")  # summed in int64: negative, an internal-invariant message
    err = _one_line_error([*command, str(path)], capsys)
    assert f"big.txt line 1: '{2**62}': lengths too large (a sample may have at most 68,719,476,736" in err


@pytest.mark.parametrize(
    "name, write",
    [
        ("big.npy", lambda p: np.save(p, np.array([5, 2**62], dtype=np.int64))),
        ("big.csv", lambda p: p.write_text(f"length\n5\n{2**62}\n")),
        ("big.jsonl", lambda p: p.write_text(f'{{"length": 5}}\n{{"length": {2**62}}}\n')),
    ],
)
def test_every_reader_refuses_a_length_above_the_cap(tmp_path: Path, name: str, write: object) -> None:
    path = tmp_path / name
    write(path)  # type: ignore[operator]
    with pytest.raises(ValueError, match=r"(index|line) \d: '4611686018427387904': lengths too large"):
        load_trace(str(path))


def test_the_largest_length_loads_and_sums_exactly(tmp_path: Path) -> None:
    path = tmp_path / "edge.txt"
    path.write_text(f"{2**36}\n{2**36}\n1\n")
    stats = trace_stats(load_trace(str(path)).materialize())
    assert stats.total_tokens == 2**37 + 1 and stats.max == 2**36


def test_a_sum_past_int64_is_refused_even_when_every_length_is_allowed() -> None:
    from nspsim.trace.base import MAX_LENGTH, MAX_TOTAL, exact_total

    many = np.broadcast_to(np.int64(MAX_LENGTH), (MAX_TOTAL // MAX_LENGTH + 1,))  # no memory: one value repeated
    with pytest.raises(ValueError, match="lengths too large: they sum to 9,223,372,036,854,775,808 tokens"):
        exact_total(many, "t")
    assert exact_total(many[:-1], "t") == MAX_TOTAL - MAX_TOTAL % MAX_LENGTH


def test_trace_stats_refuses_lengths_that_would_wrap() -> None:
    with pytest.raises(ValueError, match="lengths too large"):
        trace_stats(np.array([2**62, 2**62]))  # "token_share_by_bucket needs keys ... summing to 1" before


# ---- seeds ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["info", "--seed"],
        ["plan", *TINY, "--seed"],
        ["compare", *TINY, "--iters", "1", "--planners", "static", "--seed"],
        ["trace", "stats", "wikipedia", "--seed"],
    ],
)
def test_seeds_above_int64_are_refused_at_parse_time(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    err = _one_line_error([*argv, str(2**64)], capsys)
    assert "argument --seed: must be at most 2**63 - 1 = 9,223,372,036,854,775,807, got '18446744073709551616'" in err


def test_the_largest_seed_is_accepted(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", *TINY, "--seed", str(2**63 - 1)]) == 0
    assert main(["trace", "stats", "wikipedia", "--samples", "100", "--seed", str(2**63 - 1)]) == 0
    capsys.readouterr()
    err = _one_line_error(["trace", "stats", "wikipedia", "--seed", "-1"], capsys)
    assert "argument --seed: must be >= 0" in err


def test_simulate_seed_is_bounded(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plan = tmp_path / "p.json"
    assert main(["plan", *TINY, "-o", str(plan)]) == 0
    capsys.readouterr()
    err = _one_line_error(["simulate", str(plan), "--seed", str(2**63)], capsys)
    assert "argument --seed: must be at most 2**63 - 1" in err


def test_an_option_with_thousands_of_digits_is_a_short_error(capsys: pytest.CaptureFixture[str]) -> None:
    """int() refuses literals over 4300 digits; the value used to read as "not a finite number" (via
    float) in a message that repeated all 5000 digits twice."""
    err = _one_line_error(["plan", *TINY, "-O", "beam_width=" + "9" * 5000], capsys)
    assert "integer option value with 5,000 characters is too large" in err and len(err) < 300


@pytest.mark.parametrize("gpus", [2**21, 2**30, 2**63, 2**64, 2**1000])
@pytest.mark.parametrize("command", [["info"], ["plan"], ["compare", "--iters", "1", "--quiet"]])
def test_a_cluster_past_a_million_gpus_is_refused_at_once(
    command: list[str], gpus: int, capsys: pytest.CaptureFixture[str]
) -> None:
    """--gpus 2**30 made `plan` run out of 24 GB of memory, 2**63 ended in numpy's "array is too big"
    and `info` accepted 2**1000; a power of two above 2**20 is now one line naming the limit."""
    assert main([*command, "--gpus", str(gpus), "--model", "tiny", "--cluster", "cpu"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("nspsim: error: cluster 'cpu': at most 1,048,576 (2**20) GPUs"), err


def test_a_million_gpus_is_accepted(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["info", "--gpus", str(2**20), "--model", "tiny", "--cluster", "cpu"]) == 0
