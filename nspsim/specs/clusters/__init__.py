"""Cluster presets and files: ``--cluster NAME`` is a shipped description, ``--cluster FILE.toml`` a
user's own, both read by :func:`~nspsim.specs.clusters.file.read_cluster_file` (docs/clusters.md).

The presets are the ``*.toml`` files of this folder (package data): NVIDIA A100, H100, H200, H800 and
H20 hosts, link variants, and ``cpu`` for the gloo runtime. A preset is parsed once per process.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from nspsim.specs.cluster import ClusterSpec
from nspsim.specs.clusters.file import PRESET_DIR, cluster_of, cluster_values, describe_cluster, read_cluster_file

__all__ = ["CLUSTER_PRESETS", "PRESET_DIR", "describe_cluster", "get_cluster", "is_cluster_file", "read_cluster_file"]

CLUSTER_PRESETS: tuple[str, ...] = tuple(sorted(p.stem for p in PRESET_DIR.glob("*.toml")))
"""The preset names, one per file of :data:`PRESET_DIR`."""


def is_cluster_file(name: str) -> bool:
    """Whether ``--cluster`` names a file rather than a preset (a ``.toml`` name or a path)."""
    return name.lower().endswith(".toml") or "/" in name or "\\" in name


def get_cluster(name: str, num_gpus: int = 64) -> ClusterSpec:
    """A preset by name, or the cluster file at path ``name``, with ``num_gpus`` GPUs; ``ValueError``
    (one line) for an unknown name, a bad file or a GPU count the hosts cannot hold."""
    if is_cluster_file(name):
        return read_cluster_file(Path(name), num_gpus)
    if name not in CLUSTER_PRESETS:
        raise ValueError(
            f"unknown cluster preset {name!r} (known: {', '.join(CLUSTER_PRESETS)}; or a cluster file ending in .toml)"
        )
    return cluster_of(_preset(name), num_gpus)


@functools.cache
def _preset(name: str) -> dict[str, Any]:
    """The preset's fields, read once per process (:func:`cluster_of` copies them per call)."""
    return cluster_values(PRESET_DIR / f"{name}.toml")
