"""Reading JSON documents that users hand in (plans, cost profiles, length histograms) with one-line errors.

Every failure becomes a ``ValueError`` whose message names the file (or the ``where`` given) and says
what is wrong, in one line the CLI prints as is: ``cannot read plan p.json: No such file or
directory``, ``p.json: not readable as utf-8 text (invalid start byte at byte 0)``, ``p.json line 3:
invalid JSON (Expecting ',' delimiter)``, ``p.json: not a plan (JSON nested too deeply)``. The last
is :mod:`json`'s ``RecursionError`` on pathologically nested input, which would otherwise escape as
a traceback. What the document must contain is the caller's to check; this module only turns bytes
into Python values. The whole text is read at once (``json.loads``): these files are small, and the
exact line of a syntax error is worth more than streaming.

Every input file's bytes are read by :func:`read_bytes` (pipes and FIFOs included, without hanging on
a FIFO that has no writer), and every JSON nspsim writes is made by :func:`dumps_json`, which refuses
NaN and infinity (``json.dumps`` would write ``NaN``, which no JSON parser accepts).
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
from pathlib import Path
from typing import Any


def read_json(path: str | Path, what: str, *, encoding: str = "utf-8") -> Any:
    """The parsed JSON document in the file ``path``, read as ``encoding`` text; ``what`` names the kind
    of document (``"plan"``, ``"cost profile"``) in the one-line ``ValueError`` of any failure."""
    return parse_json(read_text(path, what, encoding=encoding), where=str(path), what=what)


def read_text(path: str | Path, what: str, *, encoding: str = "utf-8") -> str:
    """The text of the file ``path`` (the one place user JSON and JSON-lines files are read, so every
    check of the file itself lives here); a one-line ``ValueError`` naming ``what`` and ``path`` otherwise."""
    return decode_text(read_bytes(path, what), where=str(path), encoding=encoding)


def read_bytes(path: str | Path, what: str) -> bytes:
    """The whole content of the input file ``path``, read once (every user file nspsim reads comes
    through here: plans, profiles, traces); a one-line ``ValueError`` naming ``what`` and ``path`` otherwise.

    A regular file or a pipe is read: a process substitution (``<(...)``) or a named FIFO. The file is
    opened without blocking, so a FIFO that nothing writes to cannot hang the command: it reads as
    empty at once and is refused ("no writer"). An empty path, a directory and any other kind of file
    (a character device such as /dev/zero would never end, a socket cannot be opened) are refused.
    """
    if not str(path).strip():
        raise ValueError(f"{what}: empty path; give a file name")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO without a writer opens at once
    except OSError as exc:
        raise ValueError(f"cannot read {what} {path}: {exc.strerror}") from None
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise ValueError(f"{what} {path} is a directory; give a file")
        fifo = stat.S_ISFIFO(mode)
        if not (fifo or stat.S_ISREG(mode)):
            raise ValueError(f"{what} {path} is not a regular file or a pipe ({_kind(mode)}); give a file")
        if fifo:
            os.set_blocking(fd, True)  # with a writer: wait for its data; without one: end of file at once
        with os.fdopen(fd, "rb", closefd=False) as handle:
            data = handle.read()
    except OSError as exc:
        raise ValueError(f"cannot read {what} {path}: {exc.strerror}") from None
    finally:
        os.close(fd)
    if fifo and not data:
        raise ValueError(
            f"{what} {path} is a pipe with nothing written to it (no writer); start its writer first, "
            "or give a regular file"
        )
    return data


def decode_text(data: bytes, *, where: str, encoding: str = "utf-8") -> str:
    """``data`` decoded as ``encoding``; a one-line ``ValueError`` prefixed by ``where`` naming the first
    undecodable byte otherwise."""
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as exc:
        raise ValueError(f"{where}: not readable as {exc.encoding} text ({exc.reason} at byte {exc.start})") from None


def _kind(mode: int) -> str:
    kinds = ((stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))
    return next((name for test, name in kinds if test(mode)), "a special file")


class _NonFinite(Exception):
    """Raised by :func:`_refuse_constant`; carries the constant's spelling."""


def _refuse_constant(name: str) -> Any:
    raise _NonFinite(name)


def _finite_float(text: str) -> float:
    """A JSON number as a float; ``1e400`` overflows to infinity and is refused like ``Infinity``."""
    value = float(text)
    if not math.isfinite(value):
        raise _NonFinite(text)
    return value


_TOKEN = re.compile(r'"(?:\\.|[^"\\])*"|(-?Infinity|NaN)')


def _constant_line(text: str, name: str) -> int:
    """The line of the first ``name`` (``NaN``, ``Infinity``, ``-Infinity``) outside a JSON string."""
    if name not in ("NaN", "Infinity", "-Infinity"):  # an overflowing number such as 1e400
        at = text.find(name)
        return text.count("\n", 0, max(at, 0)) + 1
    for match in _TOKEN.finditer(text):
        if match.group(1) == name:
            return text.count("\n", 0, match.start()) + 1
    return 1


def parse_json(text: str, *, where: str, what: str, line: int | None = None) -> Any:
    """``text`` parsed as JSON; a one-line ``ValueError`` prefixed by ``where`` (usually the file name)
    otherwise. ``line``, when ``text`` is one line of a JSON-lines file, is its line number in the
    file, which the message names (``where line N: ...``) whatever the parser counted."""
    try:
        return json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float)
    except _NonFinite as exc:  # json.loads reads NaN and Infinity, which are not JSON: refused like bad syntax
        at = _constant_line(text, exc.args[0]) if line is None else line
        raise ValueError(
            f"{where} line {at}: invalid JSON ({exc.args[0]} is not a finite number; JSON has no NaN or infinity)"
        ) from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{where} line {exc.lineno if line is None else line}: invalid JSON ({exc.msg})") from None
    except RecursionError:
        place = where if line is None else f"{where} line {line}"
        raise ValueError(f"{place}: not {_article(what)} {what} (JSON nested too deeply)") from None


def dumps_json(
    obj: Any,
    *,
    what: str,
    indent: int | None = None,
    sort_keys: bool = False,
    separators: tuple[str, str] | None = None,
) -> str:
    """``obj`` as JSON text, the one way nspsim writes JSON (plans, ``--json`` output, configs, timelines):
    a NaN or an infinity, which :mod:`json` would write as the invalid tokens ``NaN`` / ``Infinity``,
    is a one-line ``ValueError`` naming ``what`` and where in ``obj`` the number is."""
    try:
        return json.dumps(obj, indent=indent, sort_keys=sort_keys, separators=separators, allow_nan=False)
    except ValueError:
        where = _non_finite(obj)
        raise ValueError(
            f"cannot write the {what} as JSON: {where or 'a value'} is not a finite number (NaN or infinity); "
            "this is a bug in nspsim, or an input (a cost profile, a flag) far outside its plausible range"
        ) from None


def _non_finite(obj: Any, at: str = "") -> str | None:
    """The dotted key path of the first non-finite float inside ``obj`` (``metadata.load_s``), or None."""
    if isinstance(obj, float):
        return None if math.isfinite(obj) else (at or "the value") + f" = {obj}"
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, (list, tuple)) else ()
    for key, value in items:
        found = _non_finite(value, f"{at}.{key}" if at else str(key))
        if found:
            return found
    return None


def _article(noun: str) -> str:
    return "an" if noun[:1].lower() in {"a", "e", "i", "o", "u"} else "a"
