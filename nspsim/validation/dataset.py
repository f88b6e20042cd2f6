"""The reference-set format: published measurements, one TOML ``[[row]]`` each (docs/validation.md).

A file is ``format = "nspsim-reference"``, ``version = 1`` and rows::

    [[row]]
    id = "tt-llama3-8b-a100x64-fsdp-selective-op"   # unique across the set: [a-z0-9.-]
    kind = "end-to-end"                             # end-to-end | kernel | collective
    published = 2973.0                              # the figure as published
    unit = "tokens/s/gpu"                           # one of UNITS[kind]
    note = "..."                                    # optional
    [row.source]                                    # repo + path + commit, or paper, or url; and where
    repo = "pytorch/torchtitan"
    path = "docs/performance.md"
    commit = "157a12c562288b3bccb077003a97f18a4ca657aa"
    where = "table 'Llama 3 8B', row 'selective op'"
    [row.config]                                    # the configuration in nspsim's terms (per kind)

The built-in set is every ``*.toml`` beside this module under ``reference/``; a user's own file has
the same form. Reading checks the form only (ids, kinds, units, sources, a positive figure); whether
the model can express a row is :mod:`nspsim.validation.evaluate`'s question, answered per row.
"""

from __future__ import annotations

import importlib.resources
import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FORMAT = "nspsim-reference"
VERSION = 1
KINDS: tuple[str, ...] = ("end-to-end", "kernel", "collective")
UNITS: Mapping[str, tuple[str, ...]] = {
    "end-to-end": ("tokens/s/gpu", "s/step"),
    "kernel": ("TFLOP/s", "ms", "iter/s"),
    "collective": ("us", "GB/s-algbw", "GB/s-busbw", "GB/s-per-device"),
}
RATE_UNITS = frozenset({"tokens/s/gpu", "TFLOP/s", "iter/s", "GB/s-algbw", "GB/s-busbw", "GB/s-per-device"})
"""Units in which a faster prediction is a larger number (the others are times)."""
_ID = re.compile(r"^[a-z0-9][a-z0-9.\-]*$")
_COMMIT = re.compile(r"^[0-9a-f]{40}$")
MIN_NUMBER, MAX_NUMBER = 1e-30, 1e30
"""Every number of a row (its published figure, its configuration's sizes and rates) lies in this
range: 30 orders of magnitude either side of 1 hold every unit used (tokens/s, TFLOP/s, GB/s, s,
bytes), and a subnormal or huge value cannot turn an error into 0 or infinity."""
ROW_KEYS = frozenset({"id", "kind", "published", "unit", "note", "source", "config"})
SOURCE_KEYS = frozenset({"repo", "path", "commit", "paper", "url", "where"})


@dataclass(frozen=True, kw_only=True)
class Source:
    """Where a figure was published: a repository file at a commit, a paper, or a web address (an
    issue thread), plus ``where`` in it (table, figure, row)."""

    where: str
    repo: str | None = None
    path: str | None = None
    commit: str | None = None
    paper: str | None = None
    url: str | None = None

    def __post_init__(self) -> None:
        in_repo = (self.repo, self.path, self.commit)
        if any(v is not None for v in in_repo) and not all(v is not None for v in in_repo):
            raise ValueError("a repository source needs repo, path and commit together")
        if self.commit is not None and not _COMMIT.match(self.commit):
            raise ValueError(f"source commit must be 40 lowercase hex digits, got {self.commit!r}")
        if self.repo is None and self.paper is None and self.url is None:
            raise ValueError("a source needs repo + path + commit, a paper, or a url")
        if not isinstance(self.where, str) or not self.where.strip():
            raise ValueError("a source needs 'where' (the table, figure or row the figure is read from)")

    @property
    def cite(self) -> str:
        """One line a reader can open: ``owner/repo@commit12:path (where)``, the paper, or the url."""
        if self.repo is not None:
            base = f"{self.repo}@{str(self.commit)[:12]}:{self.path}"
        elif self.paper is not None:
            base = self.paper + (f" <{self.url}>" if self.url else "")
        else:
            base = str(self.url)
        return f"{base} ({self.where})"


@dataclass(frozen=True, kw_only=True)
class ReferenceRow:
    """One published figure and the configuration that produced it."""

    id: str
    kind: str
    published: float
    unit: str
    source: Source
    config: Mapping[str, Any] = field(default_factory=dict)
    note: str = ""
    origin: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not _ID.match(self.id):
            raise ValueError(f"row id {self.id!r} must be lowercase letters, digits, '.' and '-'")
        if self.kind not in KINDS:
            raise ValueError(f"row {self.id}: kind {self.kind!r} is not one of {', '.join(KINDS)}")
        if self.unit not in UNITS[self.kind]:
            raise ValueError(f"row {self.id}: unit {self.unit!r} is not one of {', '.join(UNITS[self.kind])}")
        value = self.published
        if isinstance(value, bool) or not isinstance(value, int | float) or not MIN_NUMBER <= value <= MAX_NUMBER:
            raise ValueError(
                f"row {self.id}: published must be a positive number from {MIN_NUMBER:g} to {MAX_NUMBER:g}, "
                f"got {value!r}"
            )
        if not isinstance(self.config, Mapping):
            raise ValueError(f"row {self.id}: config must be a table")

    @property
    def is_rate(self) -> bool:
        """Whether a faster configuration has a larger figure (throughput) rather than a smaller (time)."""
        return self.unit in RATE_UNITS


def builtin_paths() -> list[Path]:
    """The built-in reference files, in name order."""
    folder = importlib.resources.files("nspsim.validation") / "reference"
    return sorted(Path(str(p)) for p in folder.iterdir() if p.name.endswith(".toml"))


def load_reference(paths: Sequence[str | Path] | None = None) -> tuple[ReferenceRow, ...]:
    """Rows of the given files (the built-in set when ``None``); ``ValueError`` naming the file and row
    for a malformed file, and for an id used twice."""
    if paths is not None and any(not str(p).strip() for p in paths):
        raise ValueError("reference file: empty path; give a TOML file")
    files = builtin_paths() if paths is None else [Path(p) for p in paths]
    rows: list[ReferenceRow] = []
    seen: dict[str, str] = {}
    for path in files:
        for row in _read(path):
            if row.id in seen:
                raise ValueError(f"{path}: row id {row.id!r} is already used in {seen[row.id]}")
            seen[row.id] = path.name
            rows.append(row)
    return tuple(rows)


def _read(path: Path) -> list[ReferenceRow]:
    if not path.is_file():  # a FIFO would block, a directory or device is no reference file
        what = "does not exist" if not path.exists() else "is not a regular file"
        raise ValueError(f"reference file {path} {what}")
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8-sig"))  # a leading byte-order mark is not content
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{path}: not valid TOML ({exc})") from None
    except UnicodeDecodeError:
        raise ValueError(f"{path}: not a UTF-8 text file") from None
    version = data.get("version")
    if data.get("format") != FORMAT or isinstance(version, bool) or not isinstance(version, int) or version != VERSION:
        raise ValueError(f'{path}: not a reference set (expected format = "{FORMAT}" and version = {VERSION})')
    extra = sorted(set(data) - {"format", "version", "row"})
    if extra:
        raise ValueError(
            f"{path}: unknown top-level key(s) {', '.join(extra)} (a reference file has format, version, [[row]])"
        )
    raw = data.get("row")
    if not isinstance(raw, list) or not raw:
        raise ValueError(f"{path}: a reference set needs at least one [[row]]")
    rows = []
    for i, item in enumerate(raw):
        where = f"{path}: row {i + 1}" + (f" ({item.get('id')})" if isinstance(item, dict) and "id" in item else "")
        try:
            rows.append(_row(item, path.name))
        except (ValueError, TypeError) as exc:
            message = str(exc)
            if isinstance(item, dict) and message.startswith(f"row {item.get('id')}: "):
                message = message.split(": ", 1)[1]
            raise ValueError(f"{where}: {message}") from None
    return rows


def _row(item: Any, origin: str) -> ReferenceRow:
    if not isinstance(item, dict):
        raise ValueError("a row must be a table")
    unknown = sorted(set(item) - ROW_KEYS)
    if unknown:
        raise ValueError(f"unknown key(s) {', '.join(unknown)} (known: {', '.join(sorted(ROW_KEYS))})")
    missing = sorted({"id", "kind", "published", "unit", "source"} - set(item))
    if missing:
        raise ValueError(f"missing key(s) {', '.join(missing)}")
    source = item["source"]
    if not isinstance(source, dict):
        raise ValueError("source must be a table")
    if "where" not in source:
        raise ValueError("a source needs 'where' (the table, figure or row the figure is read from)")
    bad = sorted(set(source) - SOURCE_KEYS)
    if bad:
        raise ValueError(f"unknown source key(s) {', '.join(bad)} (known: {', '.join(sorted(SOURCE_KEYS))})")
    not_text = sorted(k for k, v in source.items() if not isinstance(v, str))
    if not_text:
        raise ValueError(f"source {', '.join(not_text)} must be text")
    note = item.get("note", "")
    if not isinstance(note, str):
        raise ValueError("note must be a string")
    return ReferenceRow(
        id=item["id"],
        kind=item["kind"],
        published=item["published"],
        unit=item["unit"],
        source=Source(**source),
        config=item.get("config", {}),
        note=note,
        origin=origin,
    )
