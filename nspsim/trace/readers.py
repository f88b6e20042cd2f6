"""Readers of length files: text (one integer per line), ``.npy``, ``.csv`` and ``.jsonl``.

``parse_lengths`` parses a file's bytes, read once (:func:`nspsim.jsonfile.read_bytes`, so a pipe or
a process substitution reads like a file), with the reader its suffix picks; ``read_lengths`` reads
and parses a path. Text and CSV go through numpy's C parser (1M lines in about 0.1 s); a slow pass
over the lines runs only when that parse fails, to name the line at fault. JSONL costs one
``json.loads`` a line. Every length must be in [1, ``MAX_LENGTH``] (``base``). Trade-off: a bad file
is parsed twice, so that the fast path carries no per-line checks and every error still names its
line in one ``ValueError``.
"""

from __future__ import annotations

import csv
import io
import json
import re
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from nspsim.jsonfile import parse_json, read_bytes
from nspsim.trace.base import MAX_LENGTH, IntArray
from nspsim.trace.encoding import decode_lenient

_INT_RE = re.compile(r"\+?\d+")


def read_lengths(path: Path) -> IntArray:
    """The lengths in the file at ``path``: ``.npy``, ``.csv`` or ``.jsonl`` by suffix, anything else as
    text. Raises a one-line ``ValueError`` on any problem, an empty file included."""
    return parse_lengths(read_bytes(path, "trace file"), where=str(path), suffix=path.suffix)


def parse_lengths(data: bytes, *, where: str, suffix: str) -> IntArray:
    """The lengths in ``data``, the bytes of a file named ``where`` whose suffix is ``suffix`` (which
    picks the reader, as in :func:`read_lengths`)."""
    lengths = _READERS.get(suffix.lower(), _read_text)(data, where)
    if lengths.size == 0:
        raise ValueError(f"{where}: empty trace (no lengths found)")
    return lengths


def _positive_int(token: str) -> int | None:
    """The value of a decimal token if it is a positive integer (of any size), else None."""
    token = token.strip()
    if not _INT_RE.fullmatch(token) or not token.isascii():
        return None
    digits = token.lstrip("+").lstrip("0")
    if len(digits) > len(str(MAX_LENGTH)):  # too long to be a length: no need to convert 5000 digits
        return MAX_LENGTH + 1
    value = int(digits or "0")
    return value if value > 0 else None


def _check_length(where: str, token: str) -> None:
    """Raise unless ``token`` is a length: a positive integer of at most ``MAX_LENGTH``."""
    value = _positive_int(token)
    if value is None:
        raise _bad_value(where, token)
    if value > MAX_LENGTH:
        raise _too_long(where, token)


_SHOWN_TOKEN = 40
_SHOWN_NAMES = 8


def _names(names: Sequence[str]) -> str:
    """Column or field names for an error message: the first few, each cut to a readable length."""
    shown = ", ".join(repr(n if len(n) <= _SHOWN_TOKEN else n[:_SHOWN_TOKEN] + "...") for n in names[:_SHOWN_NAMES])
    return shown + (f", ... ({len(names)} in all)" if len(names) > _SHOWN_NAMES else "")


def _bad_value(where: str, token: str) -> ValueError:
    """The error for a token that is not a length; a long token (a binary file read as text) is cut."""
    shown = repr(token) if len(token) <= _SHOWN_TOKEN else f"{token[:_SHOWN_TOKEN]!r}... ({len(token):,} characters)"
    hint = (
        " (NUL characters: UTF-16 or UTF-32 text without a byte-order mark? Save it as UTF-8)"
        if "\x00" in token
        else ""
    )
    return ValueError(f"{where}: {shown} is not a positive integer{hint}")


def _universal_newlines(text: str) -> str:
    """``text`` with CRLF and CR line endings made LF, as a file opened in text mode reads them (a
    no-op scan for LF-only text; ``StringIO(newline=None)`` would halve the parser's speed)."""
    return text.replace("\r\n", "\n").replace("\r", "\n") if "\r" in text else text


def _too_long(where: str, token: str) -> ValueError:
    shown = repr(token) if len(token) <= _SHOWN_TOKEN else f"{token[:_SHOWN_TOKEN]!r}... ({len(token):,} digits)"
    return ValueError(f"{where}: {shown}: lengths too large (a sample may have at most {MAX_LENGTH:,} = 2**36 tokens)")


def _read_text(data: bytes, where: str) -> IntArray:
    """Fast path: ``np.loadtxt`` (C parser) of the decoded text. On any failure, ``_scan_text`` names
    the bad line."""
    text = _universal_newlines(decode_lenient(data))
    arr = _loadtxt_lengths(text)
    if arr is None:
        _scan_text(text, where)
        raise ValueError(f"{where}: could not read lengths (expected one positive integer per line)")
    return arr


def _loadtxt_lengths(text: str) -> IntArray | None:
    """``np.loadtxt`` of one length per line, or None if ``text`` is not that."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # loadtxt warns on empty input; emptiness is checked by the caller
            comments = "#" if "#" in text else None  # numpy strips comments in Python: skip it when none
            arr = np.loadtxt(io.StringIO(text), dtype=np.int64, comments=comments, ndmin=1)
    except (ValueError, OverflowError):
        return None
    if arr.ndim != 1 or (arr.size and (int(arr.min()) < 1 or int(arr.max()) > MAX_LENGTH)):
        return None
    return np.asarray(arr, dtype=np.int64)


def _scan_text(text: str, where: str) -> None:
    """Slow path: raise for the first line that is not a single length."""
    for number, line in enumerate(io.StringIO(text), start=1):
        body = line.split("#", 1)[0].strip()
        if body:
            _check_length(f"{where} line {number}", body)


def _read_npy(data: bytes, where: str) -> IntArray:
    try:
        arr = np.load(io.BytesIO(data), allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise ValueError(f"{where}: not a readable .npy array ({exc})") from None
    if not isinstance(arr, np.ndarray):  # np.load opens a .npz archive too
        raise ValueError(f"{where}: need a .npy array, got a .npz archive (save one array with np.save)")
    if arr.ndim != 1 or arr.dtype.kind not in "iu":
        raise ValueError(f"{where}: need a 1-D integer array, got shape {arr.shape} dtype {arr.dtype}")
    if arr.size and int(arr.min()) < 1:
        bad = int(np.argmax(arr < 1))
        raise _bad_value(f"{where} index {bad}", str(arr[bad]))
    if arr.size and int(arr.max()) > MAX_LENGTH:
        bad = int(np.argmax(arr > MAX_LENGTH))
        raise _too_long(f"{where} index {bad}", str(arr[bad]))
    return np.asarray(arr, dtype=np.int64)


def _csv_header(text: str, where: str) -> tuple[int, int]:
    """(line number of the header, index of the ``length`` column); skips blank and ``#`` lines."""
    for number, line in enumerate(io.StringIO(text, newline=""), start=1):
        if line.strip() and not line.lstrip().startswith("#"):
            columns = [c.strip() for c in next(csv.reader([line]))]
            if "length" not in columns:
                found = _names(columns)
                raise ValueError(
                    f"{where} line {number}: no 'length' column in the CSV header (columns found: {found})"
                )
            return number, columns.index("length")
    raise ValueError(f"{where}: empty trace (no CSV header)")


def _read_csv(data: bytes, where: str) -> IntArray:
    text = decode_lenient(data)
    header_line, column = _csv_header(text, where)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            arr = np.loadtxt(
                io.StringIO(text, newline=""),
                dtype=np.int64,
                delimiter=",",
                skiprows=header_line,
                usecols=column,
                comments="#",
                quotechar='"',
                ndmin=1,
            )
    except (ValueError, OverflowError):
        arr = None
    if arr is None or (arr.size and (int(arr.min()) < 1 or int(arr.max()) > MAX_LENGTH)):
        _scan_csv(text, where, header_line, column)
        raise ValueError(f"{where}: could not read the 'length' column")
    return np.asarray(arr, dtype=np.int64)


def _scan_csv(text: str, where: str, header_line: int, column: int) -> None:
    rows = csv.reader(io.StringIO(text, newline=""))
    for row in rows:
        if rows.line_num <= header_line or not any(c.strip() for c in row) or row[0].lstrip().startswith("#"):
            continue
        if column >= len(row):
            raise ValueError(f"{where} line {rows.line_num}: no value in the 'length' column ({len(row)} fields)")
        _check_length(f"{where} line {rows.line_num}", row[column].strip())


def _jsonl_length(where: str, number: int, line: str) -> int:
    obj = parse_json(line, where=where, what="object with a 'length' field", line=number)
    if not isinstance(obj, dict) or "length" not in obj:
        found = _names(list(obj)) if isinstance(obj, dict) else type(obj).__name__
        raise ValueError(f"{where} line {number}: no 'length' field (fields found: {found})")
    value = obj["length"]
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise _bad_value(f"{where} line {number}", json.dumps(value))
    if value > MAX_LENGTH:
        raise _too_long(f"{where} line {number}", str(value))
    return value


def _read_jsonl(data: bytes, where: str) -> IntArray:
    """One ``json.loads`` per line (about 1-2 us a line). Prefer text or ``.npy`` for huge traces."""
    lines = io.StringIO(_universal_newlines(decode_lenient(data)))
    values = [_jsonl_length(where, n, line) for n, line in enumerate(lines, start=1) if line.strip()]
    return np.asarray(values, dtype=np.int64)


_READERS: dict[str, Callable[[bytes, str], IntArray]] = {
    ".npy": _read_npy,
    ".csv": _read_csv,
    ".jsonl": _read_jsonl,
}
