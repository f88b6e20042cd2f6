"""Identity references a plan carries: which cluster, model and batch it was made for.

Each reference holds names, sizes and a content fingerprint (SHA-256 of the spec's canonical JSON,
first 16 hex digits), so a plan loaded for another cluster or model, or a batch that changed, is
refused with a message that says so. Trade-off: fingerprints are of whole specs, so any field change
(even one irrelevant to the plan) invalidates old plans.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

import numpy as np

from nspsim.specs.cluster import ClusterSpec
from nspsim.specs.model import ModelSpec

if TYPE_CHECKING:
    from nspsim.trace.batching import Batch


def _check_int(value: object, what: str, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{what} must be an integer >= {minimum}, got {value!r}")


def _check_str(value: object, what: str) -> None:
    if not isinstance(value, str):
        raise ValueError(f"{what} must be a string, got {value!r}")


def _fingerprint(obj: object) -> str:
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def model_fingerprint(model: ModelSpec) -> str:
    """Stable hash of a model spec (every field)."""
    return _fingerprint(asdict(model))


@dataclass(frozen=True, kw_only=True)
class ClusterRef:
    """Which cluster a plan was made for."""

    name: str
    num_gpus: int
    fingerprint: str

    def __post_init__(self) -> None:
        _check_str(self.name, "cluster name")
        _check_int(self.num_gpus, "cluster num_gpus", 1)
        _check_str(self.fingerprint, "cluster fingerprint")

    @staticmethod
    def of(cluster: ClusterSpec) -> ClusterRef:
        """Reference to ``cluster``."""
        return ClusterRef(name=cluster.name, num_gpus=cluster.num_gpus, fingerprint=cluster.fingerprint())

    @property
    def label(self) -> str:
        """``name x num_gpus``, e.g. ``h100x64``."""
        return f"{self.name}x{self.num_gpus}"


@dataclass(frozen=True, kw_only=True)
class ModelRef:
    """Which model a plan was made for."""

    name: str
    fingerprint: str

    def __post_init__(self) -> None:
        _check_str(self.name, "model name")
        _check_str(self.fingerprint, "model fingerprint")

    @staticmethod
    def of(model: ModelSpec) -> ModelRef:
        """Reference to ``model``."""
        return ModelRef(name=model.name, fingerprint=model_fingerprint(model))


@dataclass(frozen=True, kw_only=True)
class BatchRef:
    """Which batch a plan routes: trace, sampler settings and the batch's content fingerprint."""

    trace: str
    seed: int
    index: int
    tokens_per_batch: int
    max_context: int
    fingerprint: str

    def __post_init__(self) -> None:
        _check_str(self.trace, "batch trace")
        _check_int(self.seed, "batch seed", 0)
        _check_int(self.index, "batch index", 0)
        _check_int(self.tokens_per_batch, "batch tokens_per_batch", 1)
        _check_int(self.max_context, "batch max_context", 1)
        _check_str(self.fingerprint, "batch fingerprint")

    @staticmethod
    def of(batch: Batch) -> BatchRef:
        """Reference to ``batch``."""
        return BatchRef(
            trace=batch.trace,
            seed=batch.seed,
            index=batch.index,
            tokens_per_batch=batch.tokens_per_batch,
            max_context=batch.max_context,
            fingerprint=batch.fingerprint(),
        )
