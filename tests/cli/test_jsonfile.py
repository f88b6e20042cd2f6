"""``nspsim.jsonfile``: every way a user's JSON file can fail gives one line naming the file."""

from __future__ import annotations

from pathlib import Path

import pytest

from nspsim.jsonfile import parse_json, read_json


def test_a_good_file_is_parsed(tmp_path: Path) -> None:
    path = tmp_path / "ok.json"
    path.write_text('{"a": [1, 2]}')
    assert read_json(path, "plan") == {"a": [1, 2]}


@pytest.mark.parametrize(
    "content, message",
    [
        (b'{"a": 1,\n "b": }', r"bad\.json line 2: invalid JSON \(Expecting value\)$"),
        (b"[" * 100_000 + b"]" * 100_000, r"bad\.json: not a plan \(JSON nested too deeply\)$"),
        (b"\xff{}", r"bad\.json: not readable as utf-8 text \(invalid start byte at byte 0\)$"),
    ],
)
def test_a_bad_file_gives_one_line_naming_it(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=message) as info:
        read_json(path, "plan")
    assert "\n" not in str(info.value)


def test_a_missing_file_names_the_document(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"^cannot read cost profile .*nope\.json: No such file or directory$"):
        read_json(tmp_path / "nope.json", "cost profile")


def test_a_json_lines_line_is_named_by_its_file_line() -> None:
    """The parser's own count (a line ending in a newline can read as line 2) never leaks through."""
    with pytest.raises(ValueError, match=r"^t\.jsonl line 7: invalid JSON"):
        parse_json('{"length": 5\n', where="t.jsonl", what="object with a 'length' field", line=7)
    with pytest.raises(ValueError, match=r"^t\.jsonl line 7: not an object with a 'length' field \(JSON nested"):
        parse_json("[" * 100_000, where="t.jsonl", what="object with a 'length' field", line=7)
