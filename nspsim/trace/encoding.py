"""Text encoding of trace files: UTF-8, or UTF-16/32 when the file starts with a byte-order mark.

The codec is picked from the first four bytes of the file's content, already read into memory
(:func:`nspsim.jsonfile.read_bytes` reads every input once), so a pipe or a process substitution
(``<(...)``), which can be read only once, is sniffed and parsed from the same buffer. A UTF-8 mark
is dropped by ``utf-8-sig``. Trade-off: UTF-16/32 text without a mark is read as UTF-8 and fails on
its NUL characters; the readers then say so in their error message rather than guessing.
"""

from __future__ import annotations

_BOMS = (
    (b"\xff\xfe\x00\x00", "utf-32"),
    (b"\x00\x00\xfe\xff", "utf-32"),
    (b"\xef\xbb\xbf", "utf-8-sig"),
    (b"\xff\xfe", "utf-16"),
    (b"\xfe\xff", "utf-16"),
)


def encoding_of(data: bytes) -> str:
    """UTF-8, unless ``data`` starts with a byte-order mark (UTF-8, UTF-16 or UTF-32, as editors and
    spreadsheet exports on Windows write them); the codec then drops the mark."""
    return next((codec for bom, codec in _BOMS if data.startswith(bom)), "utf-8")


def decode_lenient(data: bytes) -> str:
    """``data`` as text in its :func:`encoding_of`; undecodable bytes become U+FFFD (and then fail the
    line they are on with a readable error, or vanish with the ``#`` comment they sit in)."""
    return data.decode(encoding_of(data), errors="replace")
