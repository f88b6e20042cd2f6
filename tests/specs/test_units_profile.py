"""Token-count parsing and the JSON profile format."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from nspsim.cost.profile import LengthTable, Profile, load_profile, parse_profile
from nspsim.units import format_tokens, parse_tokens


@pytest.mark.parametrize(
    "text, value",
    [
        ("65536", 65536),
        ("192k", 196_608),
        ("192K", 196_608),
        ("2M", 2_097_152),
        ("1.5k", 1536),
        (" 8k ", 8192),
        ("1G", 1024**3),
    ],
)
def test_parse_tokens(text: str, value: int) -> None:
    assert parse_tokens(text) == value


@pytest.mark.parametrize("text", ["", "abc", "-5", "0", "1.3k", "12kb", "3T"])
def test_parse_tokens_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        parse_tokens(text)


def test_format_tokens() -> None:
    assert format_tokens(347) == "347" and format_tokens(196_608) == "192K" and format_tokens(2_097_152) == "2M"


def _write(tmp_path: Path, data: object) -> Path:
    path = tmp_path / "p.json"
    path.write_text(json.dumps(data))
    return path


def test_profile_round_trip(tmp_path: Path) -> None:
    data = {
        "format": "nspsim-profile",
        "version": 1,
        "name": "x",
        "alltoall_bw_by_degree": {"2": 1e11, "16": 1e10},
        "nonattn_flops": 3e14,
        "attn_fwd_flops_by_length": [[1024, 1e14], [8192, 2e14]],
    }
    prof = load_profile(_write(tmp_path, data))
    assert prof.alltoall_bw_by_degree == {2: 1e11, 16: 1e10} and prof.nonattn_flops == 3e14
    assert Profile.lookup(prof.alltoall_bw_by_degree, 8) == 1e11
    assert Profile.lookup(prof.alltoall_bw_by_degree, 1) == 1e11
    assert prof.attn_fwd_flops_by_length is not None
    assert prof.attn_fwd_flops_by_length(np.array([8192]))[0] == 2e14


@pytest.mark.parametrize(
    "data, message",
    [
        ({"format": "other"}, "not an nspsim profile"),
        ({"format": "nspsim-profile", "version": 1, "bogus": 1}, "unknown profile keys"),
        ({"format": "nspsim-profile", "version": 1, "nonattn_flops": -1}, "positive number"),
        ({"format": "nspsim-profile", "version": 1, "alltoall_bw_by_degree": {"x": 1}}, "not a positive integer"),
        ({"format": "nspsim-profile", "version": 1, "attn_fwd_flops_by_length": [[2, 1], [1, 1]]}, "increasing"),
    ],
)
def test_profile_errors(tmp_path: Path, data: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        load_profile(_write(tmp_path, data))


def test_profile_file_errors(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="cannot read profile"):
        load_profile(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{oops")
    with pytest.raises(ValueError, match="invalid JSON"):
        load_profile(bad)


def test_length_table_validation() -> None:
    with pytest.raises(ValueError):
        LengthTable(lengths=(), values=())
    assert parse_profile({"format": "nspsim-profile", "version": 1}).name == "profile"


def test_builtin_flexsp_profile_reproduces_the_published_drop_past_one_host() -> None:
    from nspsim.cost.profile import builtin_profile_names

    assert "flexsp-a100" in builtin_profile_names()
    prof = load_profile("flexsp-a100")
    assert prof.alltoall_bw_by_degree[8] == 96.5e9 and prof.alltoall_bw_by_degree[16] == 10.3e9
    assert prof.source.startswith("FlexSP")
