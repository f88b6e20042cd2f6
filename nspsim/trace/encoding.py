"""Text encoding of trace files: UTF-8, or UTF-16/32 when the file starts with a byte-order mark.

Only the first four bytes are read to pick the codec (a UTF-8 mark is dropped by ``utf-8-sig``).
Trade-off: UTF-16/32 text without a mark is read as UTF-8 and fails on its NUL characters; the
readers then say so in their error message rather than guessing.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

_BOMS = (
    (b"\xff\xfe\x00\x00", "utf-32"),
    (b"\x00\x00\xfe\xff", "utf-32"),
    (b"\xef\xbb\xbf", "utf-8-sig"),
    (b"\xff\xfe", "utf-16"),
    (b"\xfe\xff", "utf-16"),
)


def _encoding(path: Path) -> str:
    """UTF-8, unless the file starts with a byte-order mark (UTF-8, UTF-16 or UTF-32, as editors and
    spreadsheet exports on Windows write them); the codec then drops the mark."""
    with path.open("rb") as handle:
        head = handle.read(4)
    return next((codec for bom, codec in _BOMS if head.startswith(bom)), "utf-8")


def _open_text(path: Path, newline: str | None = None) -> TextIO:
    """``path`` opened as text in its :func:`_encoding`; undecodable bytes become U+FFFD (and then
    fail the line they are on with a readable error)."""
    return path.open(encoding=_encoding(path), errors="replace", newline=newline)


@contextmanager
def _loadtxt_source(path: Path, newline: str | None = None) -> Iterator[Path | TextIO]:
    """What ``np.loadtxt`` should read: the path itself for plain UTF-8 (its fastest path), else the
    file opened in its encoding."""
    if _encoding(path) == "utf-8":
        yield path
        return
    with _open_text(path, newline) as handle:
        yield handle
