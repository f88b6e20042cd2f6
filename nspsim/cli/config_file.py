"""``--config FILE``: re-run a command from the resolved config it wrote beside its result.

``nspsim compare -o X.html`` writes ``X.config.json``, ``nspsim plan -o P.json`` ``P.config.json``,
``nspsim simulate --timeline T.json`` ``T.config.json`` and ``nspsim_runtime.train --records R``
``R.config.json``; each names the command that wrote it (:data:`COMMAND_KEY`). Given back to the
same command with ``--config``, every value in it becomes the default of the flag it came from and
the flags given on the command line override them, so the run is repeated as it was (the same
batches, plans and step times) or varied one flag at a time.

How (:func:`parse_with_config`): the command line is parsed once to find ``--config``; the file is
read (:func:`read_config`: a JSON object written by this command); the command's
:class:`ConfigFormat` maps its keys to argparse dests (a key it does not know is refused; the values
the command derived, such as the static-best degree, are read and ignored); every value is checked
by its flag's own type and choices (so a value the flag would refuse is refused, naming the key);
the values become the parser's defaults (``set_defaults``); and the command line is parsed again.
What the flags build then validates itself as always (the dataclasses' ``__post_init__``). Output
paths are never taken from a config: a re-run writes where its own flags say; input paths (a trace,
profile or model file) are as the first run was given them, relative to where it started.

A config written before configs named their command is recognised by its keys (:data:`SIGNATURES`).
Every problem is one ``ValueError`` line naming the file. Trade-off: a value is checked against its
flag by formatting it as the flag's text and parsing that back, so a config holds plain JSON values
(numbers as numbers, no ``2M`` spellings); what the commands write is exactly that.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

from nspsim.jsonfile import read_json
from nspsim.options import parse_value
from nspsim.workload import WorkloadConfig

COMMAND_KEY = "command"
"""The key of a written config that names the command that wrote it (``"nspsim compare"``)."""

SIGNATURES = (
    ("points", "nspsim sweep"),
    ("runtime", "nspsim_runtime.train"),
    ("simulation", "nspsim simulate"),
    ("batch_index", "nspsim plan"),
    ("run", "nspsim compare"),
)
"""(key, writer): how a config without :data:`COMMAND_KEY` (written before it existed) is recognised."""
READERS = ("nspsim compare", "nspsim plan", "nspsim simulate", "nspsim_runtime.train")
"""The commands that take ``--config`` (a sweep's config is read by ``nspsim plot``, not by them)."""

WORKLOAD_FIELDS = tuple(f.name for f in fields(WorkloadConfig))

Settings = dict[str, tuple[str, Any]]
"""argparse dest -> (the config key it came from, its value)."""


@dataclass(frozen=True, kw_only=True)
class ConfigFormat:
    """How one command reads its config: ``command`` (as written under :data:`COMMAND_KEY`) and
    ``settings``, which maps the config's keys to dests (:data:`Settings`) and refuses unknown keys
    (:func:`keys`, :func:`section`)."""

    command: str
    settings: Callable[[dict[str, Any]], Settings]


def stamped(command: str, config: Mapping[str, Any]) -> dict[str, Any]:
    """``config`` with :data:`COMMAND_KEY` first: what every command writes beside its result."""
    return {COMMAND_KEY: command, **{k: v for k, v in config.items() if k != COMMAND_KEY}}


def add_config_flag(parser: argparse.ArgumentParser, form: ConfigFormat) -> None:
    """``--config FILE`` on ``parser``, read as ``form`` says (:func:`parse_with_config`)."""
    parser.add_argument(
        "--config",
        default=None,
        metavar="FILE",
        help=f"re-run from the resolved config (X.config.json) that {form.command} wrote: its values become "
        "the defaults and the flags given here override them",
    )
    parser.set_defaults(config_reader=(parser, form))


def parse_with_config(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """``argv`` parsed by ``parser``; when it gives ``--config FILE`` (on ``parser`` or on the subcommand
    it selects), parsed again with the file's values as defaults (module docstring)."""
    args = parser.parse_args(argv)
    reader = getattr(args, "config_reader", None)
    if getattr(args, "config", None) is not None and reader is not None:
        target, form = reader
        defaults = config_defaults(target, form, args.config)
        target.set_defaults(**defaults)
        args = parser.parse_args(argv)
    if hasattr(args, "config_reader"):
        del args.config_reader
    return args


def read_config(data: Any, command: str) -> dict[str, Any]:
    """``data`` (a parsed JSON document) as a config that ``command`` wrote; a one-line ``ValueError``
    otherwise: not an object, or written by another command (which it names)."""
    if not isinstance(data, dict):
        raise ValueError(f"a config is a JSON object (what {command} wrote beside its result), got {_kind(data)}")
    writer = data.get(COMMAND_KEY)
    if writer is None:
        writer = next((name for key, name in SIGNATURES if key in data), None)
    if writer is None:
        raise ValueError(
            f"not a resolved config of any command (no {COMMAND_KEY!r} key, none of the keys the commands write); "
            f"give the X.config.json that {command} wrote"
        )
    if writer != command:
        hint = f"; give it to {writer} --config" if writer in READERS else ""
        raise ValueError(f"written by {writer}, but {command} reads only its own configs{hint}")
    return data


def config_defaults(parser: argparse.ArgumentParser, form: ConfigFormat, path: str) -> dict[str, Any]:
    """dest -> default of every value of the config in ``path``, each checked by its flag; a missing or
    unparsable file is :func:`nspsim.jsonfile.read_json`'s one line, every other refusal names ``--config PATH``."""
    data = read_json(path, "config file")
    try:
        settings = form.settings(read_config(data, form.command))
        actions = {a.dest: a for a in parser._actions}
        return {dest: _checked(actions.get(dest), key, value) for dest, (key, value) in settings.items()}
    except ValueError as exc:
        raise ValueError(f"--config {path}: {exc}") from None


def _checked(action: argparse.Action | None, key: str, value: Any) -> Any:
    """``value`` as its flag takes it; a ``ValueError`` naming ``key`` when the flag would refuse it. A
    dest without a flag (a value only the config sets) was checked by its format."""
    if action is None:
        return value
    if value is None:
        if action.default is not None:
            raise ValueError(f"{key}: null, but {_flag(action)} takes a value")
        return None
    if action.nargs == 0 or isinstance(action, argparse.BooleanOptionalAction):
        if not isinstance(value, bool):
            raise ValueError(f"{key}: true or false ({_flag(action)}), got {value!r}")
        return value
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ValueError(f"{key}: a {'string' if action.type is None else 'number'} ({_flag(action)}), got {value!r}")
    converted: Any = value
    if action.type is not None:
        parse: Callable[[str], Any] = action.type  # type: ignore[assignment]
        try:
            converted = parse(str(value))
        except (argparse.ArgumentTypeError, ValueError, TypeError) as exc:
            raise ValueError(f"{key}: {exc} ({_flag(action)})") from None
        if isinstance(value, str) != isinstance(converted, str) or converted != value:
            raise ValueError(f"{key}: {value!r} is not a value {_flag(action)} writes (a plain number)")
    elif not isinstance(value, str):
        raise ValueError(f"{key}: a string ({_flag(action)}), got {value!r}")
    if action.choices is not None and converted not in action.choices:
        raise ValueError(f"{key}: {value!r} is not one of {', '.join(map(str, action.choices))} ({_flag(action)})")
    return converted


def _flag(action: argparse.Action) -> str:
    return action.option_strings[-1] if action.option_strings else action.dest.upper()


def _kind(value: Any) -> str:
    return {list: "a list", str: "a string", type(None): "null", bool: "a boolean"}.get(type(value), "a number")


INPUTS_KEY = "inputs"
"""The key of a written config that records its input files: ``{trace|profile|model|cluster: [path,
digest]}`` (:func:`nspsim.workload.input_digests`)."""


def inputs_setting(data: Mapping[str, Any]) -> Settings:
    """The recorded input files as the setting ``config_inputs`` (no flag: checked after parsing by
    :func:`nspsim.workload.check_input_digests` against the inputs the re-run uses)."""
    value = data.get(INPUTS_KEY, {})
    shape = isinstance(value, dict) and all(
        k in ("trace", "profile", "model", "cluster")
        and isinstance(v, list)
        and len(v) == 2
        and all(isinstance(x, str) for x in v)
        for k, v in value.items()
    )
    if not shape:
        raise ValueError(f"{INPUTS_KEY}: an object of input files ([path, digest] by trace/profile/model/cluster)")
    return {"config_inputs": (INPUTS_KEY, value)} if value else {}


def keys(data: Mapping[str, Any], known: Collection[str], where: str = "") -> None:
    """Refuse a key of ``data`` that is not ``known`` (a config written by another version, or edited)."""
    unknown = [k for k in data if k not in known]
    if unknown:
        raise ValueError(f"{where + unknown[0]!r}: unknown key (known: {', '.join(known)})")


def require(data: Mapping[str, Any], names: Collection[str], where: str = "") -> None:
    """Refuse a config that lacks one of ``names``: a command writes every setting its run used, so a
    missing one (an edited file) would silently become today's default."""
    missing = [k for k in names if k not in data]
    if missing:
        raise ValueError(f"{where}{missing[0]}: missing (a config holds every setting its run used)")


def section(data: Mapping[str, Any], key: str, known: Collection[str], where: str = "") -> dict[str, Any]:
    """The object under ``key`` (``where``: the path of ``data`` in the file, for messages), whose keys
    must be exactly ``known``: a command writes every setting its run used, so a missing one (an
    edited file) is refused rather than replaced by today's default."""
    name = f"{where}{key}"
    if key not in data:
        raise ValueError(f"{name}: missing (a config holds every setting its run used)")
    value = data[key]
    if not isinstance(value, dict):
        raise ValueError(f"{name}: an object, got {_kind(value)}")
    keys(value, known, f"{name}.")
    require(value, known, f"{name}.")
    return value


def workload_settings(workload: Mapping[str, Any], inputs: Collection[str], where: str = "") -> Settings:
    """The ``inputs`` of a workload object (:class:`WorkloadConfig` fields) as settings: every workload
    flag's dest is its field's name."""
    return {name: (f"{where}{name}", workload[name]) for name in inputs if name in workload}


def option_strings(options: Any, key: str) -> dict[str, str]:
    """Planner options (an object of plain values) as ``KEY=VALUE`` texts that read back as the same
    values (:func:`nspsim.options.parse_value`); ``ValueError`` naming ``key`` otherwise."""
    if not isinstance(options, dict):
        raise ValueError(f"{key}: an object of planner options, got {_kind(options)}")
    out = {}
    for name, value in options.items():
        text = str(value).lower() if isinstance(value, bool) else str(value)
        if not isinstance(value, (bool, int, float, str)) or not _reads_back(text, value):
            raise ValueError(f"{key}.{name}: {value!r} is not a planner option value (true/false, a number or text)")
        out[name] = text
    return out


def _reads_back(text: str, value: Any) -> bool:
    try:
        parsed = parse_value(text)
    except ValueError:
        return False
    return type(parsed) is type(value) and parsed == value
