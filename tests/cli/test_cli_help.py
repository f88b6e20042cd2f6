"""``--help`` shows every option's default on every ``nspsim`` subcommand and on ``nspsim_runtime.train``,
every option has a help text, and ``nspsim --version`` prints the package version (issue 15, item 18)."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from importlib.metadata import version

import pytest

from nspsim.cli.main import build_parser, main
from nspsim_runtime.training.args import build_parser as train_parser


def _parsers(parser: argparse.ArgumentParser, name: str) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    yield name, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub, child in action.choices.items():
                yield from _parsers(child, f"{name} {sub}")


ALL = [*_parsers(build_parser(), "nspsim"), ("nspsim_runtime.train", train_parser())]


@pytest.mark.parametrize("name, parser", ALL, ids=[n for n, _ in ALL])
def test_every_option_has_help_and_shows_its_default(name: str, parser: argparse.ArgumentParser) -> None:
    formatter = parser.formatter_class(prog=name)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) or action.help == argparse.SUPPRESS:
            continue
        assert action.help, f"{name} {action.option_strings or action.dest} has no help text"
        if action.option_strings and action.nargs != 0 and action.default not in (None, []):
            assert "default" in str(formatter._get_help_string(action)), f"{name} {action.option_strings}"


@pytest.mark.parametrize(
    "argv, shown",
    [
        (["compare"], ["(default: 8)", "(default: stream)", "(default: 2M)", "(default: 192K)"]),
        (["plan"], ["(default: nsp)", "(default: 64)", "(default: qwen3-30b-a3b)", "(default: h100)"]),
        (["simulate"], ["(default: stream)", "(default: 0.0)"]),
        (["trace", "stats"], ["(default: 0)"]),
        (["info"], ["(default: wikipedia)", "(default: ulysses)"]),
    ],
)
def test_subcommand_help_shows_defaults(argv: list[str], shown: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main([*argv, "--help"])
    assert done.value.code == 0
    text = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    for item in shown:
        assert item in text
    assert "(default: False)" not in text and "(default: None)" not in text  # switches and unset values say nothing


def test_runtime_train_help_shows_defaults() -> None:
    text = " ".join(train_parser().format_help().split())
    for item in ("(default: 10)", "(default: 0.001)", "(default: fsdp)", "(default: plan)", "(default: 8K)"):
        assert item in text
    assert "--no-simulate do not simulate each plan" in text and "(default: True)" not in text


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0 and capsys.readouterr().out == f"nspsim {version('nspsim')}\n"
