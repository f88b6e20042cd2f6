"""Output paths of the commands: checked before any work (:func:`output_file`), written as one set
with the files beside them (:func:`write_output`), and named on stderr (:func:`wrote`).

A long run must not fail at its very end because of its output path, so every check that asks the
file system runs first; the writes then go through :func:`nspsim.output_files.commit_files`, which
stages every file and renames them only when all are written, so a late failure (a full disk) leaves
the earlier outputs as they were.
"""

from __future__ import annotations

import errno
import json
import os
import sys
import tempfile
from collections.abc import Callable, Iterable, Mapping
from functools import partial
from pathlib import Path

from nspsim.cli.config_file import COMMAND_KEY
from nspsim.cli.flags import shown
from nspsim.output_files import WriteFailed, commit_files


def output_file(
    text: str,
    *,
    flag: str,
    inputs: Iterable[str | None] = (),
    siblings: Iterable[str] = (),
    make_parent: bool = False,
    writer: str | None = None,
) -> Path:
    """Check an output path before any work is done, so a long run cannot fail at its very end.

    Refuses an empty path, ``-`` (standard output carries the command's summary), a directory or a
    path ending in ``/``, an existing target that is neither a regular file nor a character device
    (a FIFO would block), a missing (or, with ``make_parent``, uncreatable) or unwritable parent
    directory, a target or sibling that cannot be opened for writing (probed, so a read-only or
    pseudo filesystem such as /proc fails here, not after the work), and a path that is one of the
    command's ``inputs`` (the output, or a file written beside it with one of the ``siblings``
    suffixes, would overwrite it). A character device such as /dev/null is accepted as a target;
    :func:`write_output` writes no siblings beside it. With ``writer`` (the command, as its configs
    name it), an existing ``.config.json`` sibling written by another command is refused: ``plan -o
    run.json`` and ``compare -o run.html`` would share ``run.config.json``.
    """
    if not text.strip():
        raise ValueError(f"{flag}: the output path is empty")
    if text == "-":
        raise ValueError(
            f"{flag} -: writing to standard output is not supported (it carries the summary); give a file name"
        )
    try:
        path = _check_output(Path(text), text, flag=flag, inputs=inputs, siblings=siblings, make_parent=make_parent)
    except OSError as exc:  # a name too long for the file system, a loop of links
        raise ValueError(f"{flag} {text}: {exc.strerror}") from None
    if writer is not None and ".config.json" in tuple(siblings):
        _check_config_owner(path.with_suffix(".config.json"), writer, f"{flag} {text}")
    return path


def _check_config_owner(config: Path, writer: str, where: str) -> None:
    """Refuse to replace ``config`` when another command wrote it (its ``command`` key says which)."""
    if not config.is_file():
        return
    try:
        owner = json.loads(config.read_text(encoding="utf-8")).get(COMMAND_KEY)
    except (OSError, ValueError, AttributeError):
        return  # not a config any command wrote: the other checks decide
    if isinstance(owner, str) and owner != writer:
        raise ValueError(
            f"{where}: {config} is the config {shown(owner)} wrote for another output, and {writer} would "
            "replace it; choose another name"
        )


def _check_output(
    path: Path, text: str, *, flag: str, inputs: Iterable[str | None], siblings: Iterable[str], make_parent: bool
) -> Path:
    """The checks of :func:`output_file` that ask the file system."""
    siblings = tuple(siblings)
    clash = next((suffix for suffix in siblings if path.name.endswith(suffix)), None)
    if clash is not None:  # x.plans.jsonl as --records would replace an earlier run's plan log
        raise ValueError(
            f"{flag} {text}: a name ending in {clash} is where the output beside another one goes "
            f"(X{clash} beside X); choose a name without it"
        )
    if path.is_dir():
        raise ValueError(f"{flag} {text} is a directory; give a file name")
    if text.endswith(("/", os.sep)):
        raise ValueError(f"{flag} {text} names a directory (it ends with '/'); give a file name")
    if path.exists() and not (path.is_file() or path.is_char_device()):
        raise ValueError(f"{flag} {text} is not a regular file (a FIFO, socket or block device); give a file name")
    parent = path.parent
    if make_parent and not parent.exists():
        try:
            parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ValueError(f"{flag} {text}: cannot create the directory {parent} ({exc.strerror})") from None
    if parent.exists() and not parent.is_dir():
        raise ValueError(f"{flag} {text}: {parent} is a file, not a directory")
    if not parent.is_dir():
        raise ValueError(f"{flag} {text}: the directory {parent} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ValueError(f"{flag} {text}: the directory {parent} is not writable")
    outputs = [path, *(path.with_suffix(suffix) for suffix in siblings if _regular_target(path))]
    for source in (Path(i) for i in inputs if i):
        for out in outputs:
            if out.exists() and source.exists() and out.samefile(source):
                raise ValueError(f"{flag} {text} would overwrite the input file {source}; write elsewhere")
    for out in outputs:
        _probe_writable(out, flag, text)
    return path


def _regular_target(path: Path) -> bool:
    """Whether ``path`` is (or will be created as) a regular file, beside which siblings may be written."""
    return not path.exists() or path.is_file()


def _probe_writable(path: Path, flag: str, text: str) -> None:
    """Check that ``path`` can be written without changing anything: an existing file is opened for
    appending; for a new one a uniquely named file is created and removed in its directory (safe when
    several ranks check the same path at once) and the name's length is checked. A read-only or
    pseudo filesystem (/proc, /sys) is thus refused before the work."""
    if path.is_dir():
        raise ValueError(f"{flag} {text}: {path} is a directory; remove it or choose another name")
    if path.exists() and not (path.is_file() or path.is_char_device()):  # a FIFO sibling would block the open
        raise ValueError(f"{flag} {text}: {path} is not a regular file (a FIFO, socket or block device); remove it")
    try:
        if path.exists():
            path.open("a").close()
            return
        fd, probe = tempfile.mkstemp(dir=path.parent, prefix=".nspsim-probe-")
        os.close(fd)
        os.unlink(probe)
        if len(os.fsencode(path.name)) > os.pathconf(path.parent, "PC_NAME_MAX"):
            raise OSError(errno.ENAMETOOLONG, os.strerror(errno.ENAMETOOLONG))
    except OSError as exc:
        raise ValueError(f"{flag} {text}: cannot write {path} ({exc.strerror})") from None


Sibling = str | Callable[[Path], object]
"""What :func:`write_output` writes beside its output: a text, or a writer of a binary file given the
path to write (``lambda p: pq.write_table(table, p)``)."""


def write_output(
    path: Path, text: str, *, flag: str, siblings: Mapping[str, Sibling] | None = None, quiet: bool = False
) -> None:
    """Write ``text`` to ``path`` (checked by :func:`output_file`) and each of ``siblings`` (suffix ->
    text or writer, :data:`Sibling`) beside it as ``path.with_suffix(suffix)``, as one set
    (:func:`nspsim.output_files.commit_files`: a failure this late, e.g. a full disk, leaves the
    earlier files as they were and is one line that names ``flag``); a character device such as
    /dev/null gets ``text`` in place and nothing beside it. Then :func:`wrote` names what was
    written, unless ``quiet``."""
    if not _regular_target(path):
        try:
            path.write_text(text)
        except OSError as exc:
            raise ValueError(f"{flag} {path}: cannot write ({exc.strerror})") from None
        if not quiet:
            wrote([path])
        return
    bodies = {path: text, **{path.with_suffix(suffix): body for suffix, body in (siblings or {}).items()}}
    try:
        commit_files(
            {
                target: partial(Path.write_text, data=body) if isinstance(body, str) else body
                for target, body in bodies.items()
            }
        )
    except WriteFailed as exc:
        raise ValueError(
            f"{flag} {path}: cannot write {exc.target} ({exc.reason}); the earlier files are unchanged"
        ) from None
    except ValueError as exc:
        raise ValueError(f"{flag} {path}: {exc}") from None
    if not quiet:
        wrote(list(bodies))


def wrote(paths: Iterable[Path]) -> None:
    """One line ``nspsim: wrote A, B`` on stderr naming the files a command wrote (every command that
    writes files says so; ``--quiet``, where a command has it, leaves it out)."""
    print(f"nspsim: wrote {', '.join(shown(str(p)) for p in paths)}", file=sys.stderr)
