"""Output folders written by one run at a time, and result sets that change whole or not at all.

A command that writes a *set* of files (a sweep's results, summary, CSV and resolved config; a
training run's records, plans and config) must never leave a mix of two runs, a truncated file or an
earlier result deleted. Two devices do it:

* :func:`output_lock` - an exclusive ``flock`` on a hidden lock file in the output folder, held for the
  whole run; a second run into the same output fails at once with one line instead of interleaving
  its writes. The kernel drops the lock when the process dies (SIGKILL included), so no stale lock
  needs cleaning; the lock file itself stays (empty, hidden).
* :func:`commit_files` - every file of the set is first written under a temporary name beside its
  target (same folder, so the same file system), and only when all of them are written are they
  renamed over their targets (``os.replace``, atomic per file). A write that fails (a full disk, an
  unserialisable value) removes the temporary files and leaves every target as it was. Targets that
  exist but are not writable are refused before anything is written.

Trade-off: the renames are atomic one by one, not as a set; with the lock held, only a crash between
two renames (microseconds) could leave a mix, where in-place writes left one on every failure.
"""

from __future__ import annotations

import fcntl
import os
import secrets
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

LOCK_PREFIX = ".nspsim-"


class OutputLock:
    """The held lock of :func:`output_lock`, for a holder whose lifetime is not one block (a training
    run's outputs, opened at its first step and closed at its end): :meth:`release` it."""

    def __init__(self, folder: Path, name: str, *, what: str, output: str | None = None) -> None:
        """``output``: how the refusal names the output (default: the folder)."""
        path = folder / f"{LOCK_PREFIX}{name}.lock"
        try:
            self._fd: int | None = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        except OSError as exc:
            raise ValueError(f"{folder}: cannot create the lock file {path.name} ({exc.strerror})") from None
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self.release()
            raise ValueError(
                f"{output or folder}: another {what} is writing into this output now; "
                "wait for it to finish or choose another output"
            ) from None

    def release(self) -> None:
        """Drop the lock (closing its file); a second call does nothing."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class WriteFailed(ValueError):
    """A file of a set could not be written (``target``, ``reason``); the set's targets are unchanged."""

    def __init__(self, target: Path, reason: str) -> None:
        super().__init__(f"{target}: cannot write ({reason}); the earlier files are unchanged")
        self.target, self.reason = target, reason


@contextmanager
def output_lock(folder: Path, name: str, *, what: str) -> Iterator[None]:
    """Hold the lock ``folder/.nspsim-<name>.lock`` for the block; ``ValueError`` (one line naming
    ``what`` and the folder) if another process holds it."""
    lock = OutputLock(folder, name, what=what)
    try:
        yield
    finally:
        lock.release()


def commit_files(writers: Mapping[Path, Callable[[Path], object]]) -> list[Path]:
    """Write each target with ``writers[target](temporary path)``, then rename them all into place
    (module doc); a symlinked target is replaced where it points (the link stays). Returns the
    targets as given. ``ValueError`` with one line if a target is not writable or a write fails; the
    targets are then unchanged."""
    resolved = {target: target.resolve() if target.is_symlink() else target for target in writers}
    for target in resolved.values():
        if target.exists() and (not target.is_file() or not os.access(target, os.W_OK)):
            raise ValueError(f"{target}: exists and is not a writable file; nothing was written")
    staged: list[tuple[Path, Path]] = []
    current = next(iter(resolved.values()), Path())
    try:
        for given, write in writers.items():
            current = resolved[given]
            temporary = _temporary(current)
            staged.append((temporary, current))
            write(temporary)
    except OSError as exc:
        _remove(staged)
        raise WriteFailed(current, exc.strerror or type(exc).__name__) from None
    except BaseException:
        _remove(staged)
        raise
    for temporary, target in staged:
        os.replace(temporary, target)
    return list(writers)


def _temporary(target: Path) -> Path:
    """A new empty file beside ``target`` (created with the umask's permissions, as the target would be)."""
    path = target.with_name(f".{target.name}.{os.getpid()}-{secrets.token_hex(4)}.tmp")
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
    return path


def _remove(staged: list[tuple[Path, Path]]) -> None:
    for temporary, _ in staged:
        temporary.unlink(missing_ok=True)
