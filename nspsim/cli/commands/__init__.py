"""Subcommands of the ``nspsim`` CLI. Each module exposes ``register(subparsers)``; add new ones here."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from typing import Any

from nspsim.cli.commands import compare, info, inspect, plan, plot, simulate, sweep, trace, validate

Register = Callable[["argparse._SubParsersAction[Any]"], None]

COMMANDS: Sequence[Register] = (
    trace.register,
    info.register,
    inspect.register,
    simulate.register,
    compare.register,
    plan.register,
    sweep.register,
    plot.register,
    validate.register,
)
