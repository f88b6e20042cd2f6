"""Reading JSON documents that users hand in (plans, cost profiles, length histograms) with one-line errors.

Every failure becomes a ``ValueError`` whose message names the file (or the ``where`` given) and says
what is wrong, in one line the CLI prints as is: ``cannot read plan p.json: No such file or
directory``, ``p.json: not readable as utf-8 text (invalid start byte at byte 0)``, ``p.json line 3:
invalid JSON (Expecting ',' delimiter)``, ``p.json: not a plan (JSON nested too deeply)``. The last
is :mod:`json`'s ``RecursionError`` on pathologically nested input, which would otherwise escape as
a traceback. What the document must contain is the caller's to check; this module only turns bytes
into Python values. The whole text is read at once (``json.loads``): these files are small, and the
exact line of a syntax error is worth more than streaming.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def read_json(path: str | Path, what: str, *, encoding: str = "utf-8") -> Any:
    """The parsed JSON document in the file ``path``, read as ``encoding`` text; ``what`` names the kind
    of document (``"plan"``, ``"cost profile"``) in the one-line ``ValueError`` of any failure."""
    try:
        text = Path(path).read_text(encoding=encoding)
    except OSError as exc:
        raise ValueError(f"cannot read {what} {path}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: not readable as {exc.encoding} text ({exc.reason} at byte {exc.start})") from None
    return parse_json(text, where=str(path), what=what)


def parse_json(text: str, *, where: str, what: str, line: int | None = None) -> Any:
    """``text`` parsed as JSON; a one-line ``ValueError`` prefixed by ``where`` (usually the file name)
    otherwise. ``line``, when ``text`` is one line of a JSON-lines file, is its line number in the
    file, which the message names (``where line N: ...``) whatever the parser counted."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{where} line {exc.lineno if line is None else line}: invalid JSON ({exc.msg})") from None
    except RecursionError:
        place = where if line is None else f"{where} line {line}"
        raise ValueError(f"{place}: not {_article(what)} {what} (JSON nested too deeply)") from None


def _article(noun: str) -> str:
    return "an" if noun[:1].lower() in {"a", "e", "i", "o", "u"} else "a"
