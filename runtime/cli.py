"""Command-line error policy shared by the runtime's entry points (``runtime.train``, ``runtime.report``).

Bad arguments end with exactly one line ``<prog>: error: <message>`` on stderr and exit status 2:
:class:`nspsim.cli.flags.Parser` turns argparse's usage-plus-message exit into a ``ValueError``
(``CliError``) the entry point reports with :func:`fail`. Trade-off: no usage dump on error
(``--help`` still prints it).
"""

from __future__ import annotations

import os
import sys
from typing import NoReturn

EXIT_USAGE = 2


def fail(prog: str, exc: BaseException, code: int, rank: int | None = None, hard: bool = False) -> NoReturn:
    """Write ``prog: [rank R: ]error: <first line of exc>`` and exit with ``code``; ``hard`` skips
    interpreter teardown (``os._exit``: a distributed peer may be gone and teardown could block)."""
    where = f"rank {rank}: " if rank is not None else ""
    first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    sys.stderr.write(f"{prog}: {where}error: {first}\n")
    sys.stderr.flush()
    if hard:
        os._exit(code)
    sys.exit(code)
