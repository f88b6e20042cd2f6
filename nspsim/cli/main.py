"""The ``nspsim`` command line: a thin layer that parses flags into configs and prints results.

Each subcommand lives in ``nspsim/cli/commands/<name>.py`` and exposes ``register(subparsers)``;
:data:`nspsim.cli.commands.COMMANDS` lists them and this module builds the parser from that list and
applies the error policy. Commands import only the leaf :mod:`nspsim.cli.flags`, never this module, so
there is no import circle. Every result command takes ``--json``. User errors (bad flags, unknown
presets, malformed files, impossible budgets) end with one line ``nspsim: error: ...`` on stderr and
exit status 2; a traceback means a bug in nspsim. ``nspsim --version`` prints the installed package's
version; every ``--help`` shows the options' defaults. ``compare``, ``plan`` and ``simulate`` take
``--config FILE``, the resolved config they wrote, as defaults (:mod:`nspsim.cli.config_file`).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from importlib.metadata import PackageNotFoundError, version

from nspsim.cli.commands import COMMANDS
from nspsim.cli.config_file import parse_with_config
from nspsim.cli.flags import EXIT_USAGE, Parser, shown, silence_closed_stdout

Handler = Callable[[argparse.Namespace], int]


def package_version() -> str:
    """The installed ``nspsim`` distribution's version (``unknown`` when run from a bare source tree)."""
    try:
        return version("nspsim")
    except PackageNotFoundError:
        return "unknown (not installed; pip install -e .)"


def build_parser() -> argparse.ArgumentParser:
    """The full ``nspsim`` parser: every module in ``nspsim.cli.commands`` registers its subcommand."""
    parser = Parser(prog="nspsim", description="Nested sequence parallelism simulator and planners.")
    parser.add_argument("--version", action="version", version=f"nspsim {package_version()}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    for register in COMMANDS:
        register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``nspsim`` console script."""
    try:
        args = parse_with_config(build_parser(), argv)  # inside: a Ctrl-C while the commands import is one line too
        handler: Handler = args.func
        return handler(args)
    except BrokenPipeError:  # e.g. `nspsim trace stats T | head`: the reader left, nothing to report
        return silence_closed_stdout()
    except (ValueError, OSError) as exc:
        print(f"nspsim: error: {shown(' '.join(str(exc).split()))}", file=sys.stderr)  # may quote a file
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("nspsim: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
