"""Cluster files: a cluster's hardware as TOML, with units written out (docs/clusters.md).

The keys are :class:`~nspsim.specs.cluster.ClusterSpec`'s fields and, under ``[gpu]``,
:class:`~nspsim.specs.cluster.GpuSpec`'s; a field whose metadata names a unit takes a quantity string
read by :func:`~nspsim.specs.quantity.parse_quantity` (``nvlink_bw = "370 GB/s"``). The GPU count is
not in the file: it is the run's (``--gpus``), and a cluster smaller than one host is one host of that
many GPUs. ``extends = "h100"`` (a preset name, or a file path relative to this file) starts from
another description and replaces the keys this one gives, ``[gpu]`` key by key.

Every mistake is one ``ValueError`` line that names the file and the key: an unknown or missing key,
a quantity without a unit or of the wrong kind (``"370 GB"`` for a bandwidth), a value of the wrong
type, an ``extends`` loop, and what the specs' own checks refuse. Trade-off: a flat schema mirroring
the specs (one name per concept, the same in ``nspsim info --json``) rather than a topology graph
(ASTRA-sim's): nspsim's cost model knows hosts joined by NVLink and one NIC per GPU, and a file can
describe no more than the model prices.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import MISSING, Field, asdict, fields
from pathlib import Path
from typing import Any

from nspsim.specs.cluster import ClusterSpec, GpuSpec
from nspsim.specs.quantity import UNIT_WORDS, parse_quantity

PRESET_DIR = Path(__file__).parent
"""Where the built-in presets live: ``<name>.toml``, read by the same code as a user's file."""

PLAUSIBLE = {
    "B": (2.0**20, 2.0**50),
    "B/s": (1e3, 1e16),
    "FLOP/s": (1e6, 1e19),
    "s": (1e-9, 10.0),
}
"""The range a quantity read from a file must lie in (a latency may also be 0): from 1 MiB to 1 PiB of
memory, 1 kB/s to 10 PB/s, 1 MFLOP/s to 10 EFLOP/s, 1 ns to 10 s, orders of magnitude around every
device nspsim prices, so a unit slip ("0.35 GB/s" as "0.35 B/s") is refused where it enters."""
RANGE_TEXT = {
    "B": "1 MiB to 1 PiB",
    "B/s": "1 kB/s to 10 PB/s",
    "FLOP/s": "1 MFLOP/s to 10 EFLOP/s",
    "s": "0 or 1 ns to 10 s",
}
MAX_COUNT = 4096
"""The largest integer field (``gpus_per_node``, ``gemm_tile_rows``): no host or GEMM tile is larger."""
MAX_TEXT = 200

_NOT_IN_FILE = frozenset({"gpu", "num_gpus"})
"""ClusterSpec fields a file does not give: ``[gpu]`` is a table, the GPU count is the run's."""


def read_cluster_file(path: Path, num_gpus: int) -> ClusterSpec:
    """The cluster ``path`` describes, with ``num_gpus`` GPUs; ``ValueError`` (one line) otherwise."""
    return cluster_of(cluster_values(path), num_gpus, f"cluster file {path}")


def cluster_values(path: Path) -> dict[str, Any]:
    """The fields ``path`` gives (``[gpu]`` as a nested dict), over those of what it extends, checked
    and complete; :func:`cluster_of` turns them into a spec of any GPU count."""
    return _resolved(path, ())


def cluster_of(values: Mapping[str, Any], num_gpus: int, where: str | None = None) -> ClusterSpec:
    """The spec of ``values`` (:func:`cluster_values`) with ``num_gpus`` GPUs; a cluster smaller than one
    host is one host of that many GPUs. A ``ValueError`` of the specs is prefixed with ``where``."""
    top = {k: v for k, v in values.items() if k != "gpu"}
    gpus_per_node = top.pop("gpus_per_node", _default(ClusterSpec, "gpus_per_node"))
    if isinstance(num_gpus, int) and 0 < num_gpus < gpus_per_node:
        gpus_per_node = num_gpus
    try:
        gpu = GpuSpec(**values["gpu"])
        return ClusterSpec(gpu=gpu, num_gpus=num_gpus, gpus_per_node=gpus_per_node, **top)
    except (TypeError, ValueError) as exc:
        raise ValueError(str(exc) if where is None else f"{where}: {exc}") from None


def describe_cluster(cluster: ClusterSpec) -> dict[str, Any]:
    """The resolved description as plain data (SI units: bytes, B/s, FLOP/s, seconds) with a
    ``units`` table naming each quantity's unit: what ``nspsim info --json`` prints."""
    units = {f.name: f.metadata["unit"] for f in fields(ClusterSpec) if "unit" in f.metadata}
    units |= {f"gpu.{f.name}": f.metadata["unit"] for f in fields(GpuSpec) if "unit" in f.metadata}
    return {**asdict(cluster), "num_nodes": cluster.num_nodes, "units": units}


def _resolved(path: Path, seen: tuple[Path, ...]) -> dict[str, Any]:
    """The file's values (quantities as floats) over those of what it extends."""
    data = _load(path)
    where = f"cluster file {path}"
    real = path.resolve()
    if real in seen:
        chain = " -> ".join(str(p) for p in (*seen, real))
        raise ValueError(f"{where}: 'extends' loops back to itself ({chain})")
    base: dict[str, Any] = {"gpu": {}}
    if "extends" in data:
        base = _resolved(_extended(data["extends"], path), (*seen, real))
    gpu_table = data.get("gpu", {})
    if not isinstance(gpu_table, Mapping):
        raise ValueError(f"{where}: 'gpu' must be a table ([gpu]) of GPU fields")
    top = _values(data, ClusterSpec, where, skip=_NOT_IN_FILE | {"extends"})
    gpu = _values(gpu_table, GpuSpec, f"{where}: [gpu]", skip=frozenset())
    merged = {**base, **top, "gpu": {**base["gpu"], **gpu}}
    merged["name"] = top.get("name", path.stem)  # never inherited: a variant is not the preset it extends
    if not seen:  # the file a run names: every required field must be there by now
        _check_complete(merged, where)
    return merged


def _load(path: Path) -> dict[str, Any]:
    where = f"cluster file {path}"
    if path.suffix.lower() != ".toml":
        raise ValueError(f"{where}: a cluster file is TOML and its name ends with .toml")
    if path.exists() and not path.is_file() and not path.is_dir():  # a FIFO would block the read
        raise ValueError(f"{where} is not a regular file")
    try:
        text = path.read_bytes().decode("utf-8-sig")  # a leading byte-order mark is not content
    except FileNotFoundError:
        raise ValueError(f"{where} does not exist") from None
    except IsADirectoryError:
        raise ValueError(f"{where} is a directory, not a file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{where} cannot be read: {exc}") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{where} is not valid TOML: {exc}") from None


def _extended(value: object, path: Path) -> Path:
    """The file an ``extends`` value names: a preset, or a path relative to ``path``'s folder."""
    if not isinstance(value, str) or not value:
        raise ValueError(f"cluster file {path}: 'extends' must name a preset or a .toml file, got {value!r}")
    preset = PRESET_DIR / f"{value}.toml"
    if "/" not in value and not value.endswith(".toml"):
        if not preset.is_file():
            known = ", ".join(sorted(p.stem for p in PRESET_DIR.glob("*.toml")))
            raise ValueError(f"cluster file {path}: 'extends' names no preset {value!r} (known: {known})")
        return preset
    target = path.resolve().parent / value  # relative to the file itself, not to a link to it
    if not target.exists():
        raise ValueError(f"cluster file {path}: 'extends' names {value!r}, which does not exist ({target})")
    return target


def _values(data: Mapping[str, Any], spec: type, where: str, skip: frozenset[str]) -> dict[str, Any]:
    """The table's fields of ``spec``, typed; unknown keys refused."""
    known = {f.name: f for f in fields(spec) if f.name not in skip}
    allowed = set(known) | set(skip & {"extends"}) | ({"gpu"} if spec is ClusterSpec else set())
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise ValueError(f"{where}: unknown key {unknown[0]!r} (known: {', '.join(sorted(allowed))})")
    return {name: _typed(data[name], f, f"{where}: {name}") for name, f in known.items() if name in data}


def _typed(value: object, f: Field[Any], what: str) -> object:
    unit = f.metadata.get("unit")
    if unit is not None:
        number = parse_quantity(value, unit, what)
        low, high = PLAUSIBLE[unit]
        if not (low <= number <= high or (number == 0 and unit == "s")):
            raise ValueError(
                f"{what}: {value!r} is outside the plausible range of {UNIT_WORDS[unit][0]} ({RANGE_TEXT[unit]})"
            )
        if unit == "B":
            if not number.is_integer():
                raise ValueError(f"{what}: {value!r} is not a whole number of bytes")
            return int(number)
        return number
    kind = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", "")
    if kind == "str":
        if not isinstance(value, str) or not value.strip() or not value.isprintable() or len(value) > MAX_TEXT:
            raise ValueError(
                f"{what} must be one line of printable text (at most {MAX_TEXT} characters), got {value!r}"
            )
        return value
    if kind == "int":
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_COUNT:
            raise ValueError(f"{what} must be an integer from 1 to {MAX_COUNT}, got {value!r}")
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{what} must be a number, got {value!r}")
    return float(value)


def _check_complete(values: Mapping[str, Any], where: str) -> None:
    for spec, table, prefix in ((ClusterSpec, values, ""), (GpuSpec, values["gpu"], "[gpu] ")):
        required = [
            f.name
            for f in fields(spec)
            if f.name not in _NOT_IN_FILE and f.default is MISSING and f.default_factory is MISSING
        ]
        missing = [name for name in required if name not in table]
        if missing:
            raise ValueError(f"{where}: {prefix}missing {', '.join(repr(m) for m in missing)}")


def _default(spec: type, name: str) -> Any:
    return next(f.default for f in fields(spec) if f.name == name)
