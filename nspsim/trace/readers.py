"""Readers of length files: text (one integer per line), ``.npy``, ``.csv`` and ``.jsonl``.

``read_lengths`` picks the reader by suffix. Text and CSV go through numpy's C parser (1M lines in
about 0.1 s); a slow pass over the lines runs only when that parse fails, to name the line at fault.
JSONL costs one ``json.loads`` a line. Trade-off: a bad file is read twice, so that the fast path
carries no per-line checks and every error still names its line in one ``ValueError``.
"""

from __future__ import annotations

import csv
import json
import re
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TextIO

import numpy as np

from nspsim.jsonfile import parse_json
from nspsim.trace.base import IntArray
from nspsim.trace.encoding import _loadtxt_source, _open_text

_INT_RE = re.compile(r"\+?\d+")


def read_lengths(path: Path) -> IntArray:
    """The lengths in the file at ``path``: ``.npy``, ``.csv`` or ``.jsonl`` by suffix, anything else as
    text. Raises a one-line ``ValueError`` on any problem, an empty file included."""
    lengths = _READERS.get(path.suffix.lower(), _read_text)(path)
    if lengths.size == 0:
        raise ValueError(f"{path}: empty trace (no lengths found)")
    return lengths


def _positive_int(token: str) -> int | None:
    """The value of a decimal token if it is a positive integer that fits int64, else None."""
    token = token.strip()
    if not _INT_RE.fullmatch(token):
        return None
    value = int(token)
    return value if 0 < value < 2**63 else None


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


def _read_text(path: Path) -> IntArray:
    """Fast path: ``np.loadtxt`` (C parser). On any failure, ``_scan_text`` names the bad line; if
    every line is fine (undecodable bytes inside ``#`` comments), read the decoded text instead."""
    with _loadtxt_source(path) as source:
        arr = _loadtxt_lengths(source)
    if arr is None:
        _scan_text(path)
        with _open_text(path) as decoded:
            arr = _loadtxt_lengths(decoded)
    if arr is None:
        raise ValueError(f"{path}: could not read lengths (expected one positive integer per line)")
    return arr


def _loadtxt_lengths(source: Path | TextIO) -> IntArray | None:
    """``np.loadtxt`` of one positive integer per line, or None if ``source`` is not that."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # loadtxt warns on empty input; emptiness is checked by the caller
            arr = np.loadtxt(source, dtype=np.int64, comments="#", ndmin=1)
    except (ValueError, OverflowError):
        return None
    if arr.ndim != 1 or (arr.size and int(arr.min()) < 1):
        return None
    return np.asarray(arr, dtype=np.int64)


def _scan_text(path: Path) -> None:
    """Slow path: raise for the first line that is not a single positive integer."""
    with _open_text(path) as lines:
        for number, line in enumerate(lines, start=1):
            body = line.split("#", 1)[0].strip()
            if body and _positive_int(body) is None:
                raise _bad_value(f"{path} line {number}", body)


def _read_npy(path: Path) -> IntArray:
    try:
        arr = np.load(path, allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise ValueError(f"{path}: not a readable .npy array ({exc})") from None
    if arr.ndim != 1 or arr.dtype.kind not in "iu":
        raise ValueError(f"{path}: need a 1-D integer array, got shape {arr.shape} dtype {arr.dtype}")
    if arr.size and (int(arr.min()) < 1 or int(arr.max()) >= 2**63):
        bad = int(np.argmax((arr < 1) | (arr >= 2**63)))
        raise _bad_value(f"{path} index {bad}", str(arr[bad]))
    return np.asarray(arr, dtype=np.int64)


def _csv_header(path: Path) -> tuple[int, int]:
    """(line number of the header, index of the ``length`` column); skips blank and ``#`` lines."""
    with _open_text(path, newline="") as handle:
        for number, line in enumerate(handle, start=1):
            if line.strip() and not line.lstrip().startswith("#"):
                columns = [c.strip() for c in next(csv.reader([line]))]
                if "length" not in columns:
                    found = _names(columns)
                    raise ValueError(
                        f"{path} line {number}: no 'length' column in the CSV header (columns found: {found})"
                    )
                return number, columns.index("length")
    raise ValueError(f"{path}: empty trace (no CSV header)")


def _read_csv(path: Path) -> IntArray:
    header_line, column = _csv_header(path)
    try:
        with warnings.catch_warnings(), _loadtxt_source(path, newline="") as source:
            warnings.simplefilter("ignore")
            arr = np.loadtxt(
                source,
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
    if arr is None or (arr.size and int(arr.min()) < 1):
        _scan_csv(path, header_line, column)
        raise ValueError(f"{path}: could not read the 'length' column")
    return np.asarray(arr, dtype=np.int64)


def _scan_csv(path: Path, header_line: int, column: int) -> None:
    with _open_text(path, newline="") as handle:
        rows = csv.reader(handle)
        for row in rows:
            if rows.line_num <= header_line or not any(c.strip() for c in row) or row[0].lstrip().startswith("#"):
                continue
            if column >= len(row):
                raise ValueError(f"{path} line {rows.line_num}: no value in the 'length' column ({len(row)} fields)")
            if _positive_int(row[column]) is None:
                raise _bad_value(f"{path} line {rows.line_num}", row[column].strip())


def _jsonl_length(path: Path, number: int, line: str) -> int:
    obj = parse_json(line, where=str(path), what="object with a 'length' field", line=number)
    if not isinstance(obj, dict) or "length" not in obj:
        found = _names(list(obj)) if isinstance(obj, dict) else type(obj).__name__
        raise ValueError(f"{path} line {number}: no 'length' field (fields found: {found})")
    value = obj["length"]
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value < 2**63:
        raise _bad_value(f"{path} line {number}", json.dumps(value))
    return value


def _read_jsonl(path: Path) -> IntArray:
    """One ``json.loads`` per line (about 1-2 us a line). Prefer text or ``.npy`` for huge traces."""
    with _open_text(path) as handle:
        values = [_jsonl_length(path, n, line) for n, line in enumerate(handle, start=1) if line.strip()]
    return np.asarray(values, dtype=np.int64)


_READERS: dict[str, Callable[[Path], IntArray]] = {".npy": _read_npy, ".csv": _read_csv, ".jsonl": _read_jsonl}
