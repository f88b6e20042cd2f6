"""Length traces read from files: text, npy, csv and jsonl, byte-order marks and encodings, and the error
that names a bad line."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from nspsim.trace import (
    EmpiricalTrace,
    HistogramTrace,
    load_trace,
)


def test_load_text_with_comments_blanks_and_trailing_newline(tmp_path: Path) -> None:
    path = tmp_path / "lens.txt"
    path.write_text("# a comment\n12\n\n  7  \n3 # trailing note\n1\n")
    trace = load_trace(str(path))
    assert isinstance(trace, EmpiricalTrace)
    assert trace.materialize().tolist() == [12, 7, 3, 1]
    assert (trace.name, trace.source) == ("lens.txt", str(path))


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("5\n" * 16 + "abc\n", r"lens\.txt line 17: 'abc' is not a positive integer"),
        ("5\n0\n", r"line 2: '0' is not a positive integer"),
        ("5\n-3\n", r"line 2: '-3' is not a positive integer"),
        ("5\n2.5\n", r"line 2: '2\.5' is not a positive integer"),
        ("5\n1 2\n", r"line 2: '1 2' is not a positive integer"),
        ("# only comments\n\n", r"lens\.txt: empty trace"),
        ("", r"lens\.txt: empty trace"),
    ],
)
def test_load_text_errors(tmp_path: Path, body: str, message: str) -> None:
    path = tmp_path / "lens.txt"
    path.write_text(body)
    with pytest.raises(ValueError, match=message):
        load_trace(str(path))


def test_unknown_name_and_directory(tmp_path: Path) -> None:
    builtins = r"\(built-in traces: code, commoncrawl, longtail-paper, wikipedia\)"
    with pytest.raises(ValueError, match=r"trace file not found: nope\.txt " + builtins):
        load_trace("nope.txt")
    with pytest.raises(ValueError, match="is a directory"):
        load_trace(str(tmp_path))


def test_load_npy(tmp_path: Path) -> None:
    path = tmp_path / "lens.npy"
    np.save(path, np.array([4, 9, 2], dtype=np.int32))
    assert load_trace(str(path)).materialize().tolist() == [4, 9, 2]
    np.save(path, np.array([4, 0, 2]))
    with pytest.raises(ValueError, match=r"lens\.npy index 1: '0' is not a positive integer"):
        load_trace(str(path))
    np.save(path, np.array([1.0, 2.0]))
    with pytest.raises(ValueError, match="need a 1-D integer array, got shape .* dtype float64"):
        load_trace(str(path))
    np.save(path, np.ones((2, 2), dtype=np.int64))
    with pytest.raises(ValueError, match=r"shape \(2, 2\)"):
        load_trace(str(path))


def test_load_csv(tmp_path: Path) -> None:
    path = tmp_path / "lens.csv"
    path.write_text('id,"length",note\n1,10,"a, quoted"\n2,20,b\n\n3,30,c\n')
    assert load_trace(str(path)).materialize().tolist() == [10, 20, 30]
    path.write_text("id,len,note\n1,10,a\n")
    found = r"\(columns found: 'id', 'len', 'note'\)"
    with pytest.raises(ValueError, match=r"line 1: no 'length' column in the CSV header " + found):
        load_trace(str(path))
    path.write_text("id,length\n1,10\n2,x\n")
    with pytest.raises(ValueError, match=r"lens\.csv line 3: 'x' is not a positive integer"):
        load_trace(str(path))
    path.write_text("id,length\n")
    with pytest.raises(ValueError, match="empty trace"):
        load_trace(str(path))


def test_load_jsonl(tmp_path: Path) -> None:
    path = tmp_path / "lens.jsonl"
    path.write_text('{"length": 5, "id": "a"}\n\n{"id": "b", "length": 8}\n')
    assert load_trace(str(path)).materialize().tolist() == [5, 8]
    for body, message in [
        ('{"length": 5}\n{"len": 3, "id": 1}\n', r"line 2: no 'length' field \(fields found: 'len', 'id'\)"),
        ('{"length": 5}\n{"length": "7"}\n', r"line 2: '\"7\"' is not a positive integer"),
        ('{"length": true}\n', r"line 1: 'true' is not a positive integer"),
        ('{"length": 5}\n{"length": 5\n', r"line 2: invalid JSON"),
    ]:
        path.write_text(body)
        with pytest.raises(ValueError, match=message):
            load_trace(str(path))


@pytest.mark.parametrize("encoding", ["utf-8-sig", "utf-16", "utf-16-be", "utf-32", "utf-32-be"])
@pytest.mark.parametrize(
    ("name", "body"),
    [
        ("lens.txt", "# a comment\n10\n20\n\n30\n"),
        ("lens.csv", 'id,"length"\n1,10\n2,20\n3,30\n'),
        ("lens.jsonl", '{"length": 10}\n{"length": 20}\n{"length": 30}\n'),
    ],
)
def test_trace_files_with_a_byte_order_mark_are_read(tmp_path: Path, encoding: str, name: str, body: str) -> None:
    """Editors and spreadsheet exports on Windows write a byte-order mark (UTF-8) or UTF-16 text."""
    path = tmp_path / name
    data = body.encode(encoding)
    marks = {"utf-16-be": b"\xfe\xff", "utf-32-be": b"\x00\x00\xfe\xff"}  # Python writes none for these codecs
    data = marks.get(encoding, b"") + data
    path.write_bytes(data)
    assert load_trace(str(path)).materialize().tolist() == [10, 20, 30]


def test_unmarked_utf16_and_stray_bytes_in_comments(tmp_path: Path) -> None:
    path = tmp_path / "lens.txt"
    path.write_bytes("10\n20\n".encode("utf-16-le"))  # no byte-order mark: cannot be told from UTF-8
    with pytest.raises(ValueError, match=r"line 1: .* is not a positive integer \(NUL characters: UTF-16 or UTF-32"):
        load_trace(str(path))
    path.write_bytes(b"# caf\xe9 (Latin-1) lengths\n10\n20\n")  # undecodable only inside a comment
    assert load_trace(str(path)).materialize().tolist() == [10, 20]


def test_a_marked_file_still_names_its_bad_line(tmp_path: Path) -> None:
    path = tmp_path / "lens.txt"
    path.write_bytes("10\n2x\n".encode("utf-16"))
    with pytest.raises(ValueError, match=r"lens\.txt line 2: '2x' is not a positive integer"):
        load_trace(str(path))
    hist = HistogramTrace(name="h", source="s", edges=(1, 4, 10), counts=(3, 1), alpha=(-1.5, 0.25))
    marked = tmp_path / "h.json"
    marked.write_bytes(json.dumps(hist.to_json_dict()).encode("utf-8-sig"))
    assert load_trace(str(marked)) == hist
    marked.write_bytes(b"\xff\xff{}")
    with pytest.raises(ValueError, match=r"h\.json: not readable as utf-8 text \(invalid start byte at byte 0\)"):
        load_trace(str(marked))


def test_large_text_file_loads_exactly(tmp_path: Path) -> None:
    lengths = np.random.default_rng(0).integers(1, 2_000_000, size=1_000_000)
    path = tmp_path / "big.txt"
    path.write_text("\n".join(map(str, lengths.tolist())) + "\n")
    assert np.array_equal(load_trace(str(path)).materialize(), lengths)
