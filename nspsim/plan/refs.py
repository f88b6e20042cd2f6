"""Identity references a plan carries: which cluster, model and batch it was made for.

Each reference holds names, sizes and a content fingerprint (SHA-256 of the spec's canonical JSON,
first 16 hex digits), so a plan loaded for another cluster or model, or a batch that changed, is
refused with a message that says so. Trade-off: fingerprints are of whole specs, so any field change
(even one irrelevant to the plan) invalidates old plans.

Fields added after the first plan files (the cluster and model ``spec``, the batch's dropped-sample
counts) are written to the file but left out of the plan's content hash (:meth:`identity`): the
fingerprint beside them already covers them, and is checked against them when a file is read, so
old plans keep their hash and new plans hash as before. A recorded spec lets a mismatch name the
fields that differ. :class:`ProfileRef` names the cost profile a plan was made with (a plan made
with analytic costs has none, and hashes as before).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any

import numpy as np

from nspsim.cost.profile import Profile
from nspsim.specs.cluster import ClusterSpec
from nspsim.specs.model import ModelSpec
from nspsim.trace.batching import Batch

_UNHASHED = frozenset({"spec", "dropped_count", "dropped_tokens", "file"})
"""Reference fields that do not enter a plan's content hash (their fingerprint covers them)."""


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
    """Stable hash of a model spec (every field; the window fields only when set: :meth:`ModelSpec.record`)."""
    return _fingerprint(model.record())


def profile_fingerprint(profile: Profile) -> str:
    """Stable hash of a cost profile's coefficients (its ``name`` and ``source`` text left out)."""
    return _fingerprint(profile.coefficients())


def ref_identity(ref: object) -> dict[str, Any]:
    """The fields of a reference that enter a plan's content hash: all but :data:`_UNHASHED`, and
    only those set (a field added later and left unset hashes as the files before it did)."""
    return {k: v for k, v in ref_record(ref).items() if k not in _UNHASHED}


def ref_record(ref: object) -> dict[str, Any]:
    """Every set field of a reference, as written to a plan file."""
    values = {f.name: getattr(ref, f.name) for f in fields(ref)}  # type: ignore[arg-type]
    return {k: (dict(v) if isinstance(v, Mapping) else v) for k, v in values.items() if v is not None}


def spec_differences(recorded: Mapping[str, Any] | None, current: Mapping[str, Any]) -> str:
    """``"hidden 4096 in the plan, 5120 now; ..."``: the spec fields that differ (nested ones dotted),
    or why they cannot be named (a plan file written before specs were recorded)."""
    if recorded is None:
        return "the plan file does not record the spec, so which fields changed is unknown"
    old, new = _flatten(recorded), _flatten(json.loads(json.dumps(current)))  # compare as the file holds them
    diffs = [
        f"{k if k.isprintable() else repr(k)} {old.get(k, '(absent)')!r} in the plan, {new.get(k, '(absent)')!r} now"
        for k in sorted(old | new)
        if old.get(k) != new.get(k)
    ]
    return "; ".join(diffs) or "no field differs"


def _flatten(spec: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in spec.items():
        if isinstance(value, Mapping):
            out.update(_flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def _check_spec(spec: object, fingerprint: str, what: str) -> None:
    """A recorded spec must be an object whose fingerprint is the recorded one."""
    if spec is None:
        return
    if not isinstance(spec, Mapping):
        raise ValueError(f"{what} spec must be an object, got {spec!r}")
    if _fingerprint(dict(spec)) != fingerprint:
        raise ValueError(f"the recorded {what} spec does not match its fingerprint {fingerprint}")


@dataclass(frozen=True, kw_only=True)
class ClusterRef:
    """Which cluster a plan was made for."""

    name: str
    num_gpus: int
    fingerprint: str
    spec: Mapping[str, Any] | None = field(default=None, compare=False)  # every field; None in older files
    file: str | None = field(default=None, compare=False)  # the cluster file (--cluster) it was read from

    def __post_init__(self) -> None:
        _check_str(self.name, "cluster name")
        if self.file is not None:
            _check_str(self.file, "cluster file")
        _check_int(self.num_gpus, "cluster num_gpus", 1)
        _check_str(self.fingerprint, "cluster fingerprint")
        _check_spec(self.spec, self.fingerprint, "cluster")

    @staticmethod
    def of(cluster: ClusterSpec, file: str | None = None) -> ClusterRef:
        """Reference to ``cluster``, read from the cluster ``file`` (``None`` for a preset)."""
        return ClusterRef(
            name=cluster.name,
            num_gpus=cluster.num_gpus,
            fingerprint=cluster.fingerprint(),
            spec=asdict(cluster),
            file=file,
        )

    @property
    def source(self) -> str:
        """What ``--cluster`` takes to describe this cluster again: its file, else the preset name."""
        return self.file if self.file is not None else self.name

    @property
    def label(self) -> str:
        """``name x num_gpus``, e.g. ``h100x64``."""
        return f"{self.name}x{self.num_gpus}"


@dataclass(frozen=True, kw_only=True)
class ModelRef:
    """Which model a plan was made for."""

    name: str
    fingerprint: str
    spec: Mapping[str, Any] | None = field(default=None, compare=False)  # every field; None in older files

    def __post_init__(self) -> None:
        _check_str(self.name, "model name")
        _check_str(self.fingerprint, "model fingerprint")
        _check_spec(self.spec, self.fingerprint, "model")

    @staticmethod
    def of(model: ModelSpec) -> ModelRef:
        """Reference to ``model``."""
        return ModelRef(name=model.name, fingerprint=model_fingerprint(model), spec=model.record())


@dataclass(frozen=True, kw_only=True)
class BatchRef:
    """Which batch a plan routes: trace, sampler settings, what ``max_context`` dropped (``None`` in
    files written before it was recorded) and the batch's content fingerprint."""

    trace: str
    seed: int
    index: int
    tokens_per_batch: int
    max_context: int
    fingerprint: str
    dropped_count: int | None = None
    dropped_tokens: int | None = None

    def __post_init__(self) -> None:
        _check_str(self.trace, "batch trace")
        _check_int(self.seed, "batch seed", 0)
        _check_int(self.index, "batch index", 0)
        _check_int(self.tokens_per_batch, "batch tokens_per_batch", 1)
        _check_int(self.max_context, "batch max_context", 1)
        _check_str(self.fingerprint, "batch fingerprint")
        if (self.dropped_count is None) != (self.dropped_tokens is None):
            raise ValueError("batch dropped_count and dropped_tokens must be given together")
        if self.dropped_count is not None:
            _check_int(self.dropped_count, "batch dropped_count", 0)
            _check_int(self.dropped_tokens, "batch dropped_tokens", 0)

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
            dropped_count=batch.dropped_count,
            dropped_tokens=batch.dropped_tokens,
        )

    def check_lengths(self, lengths: Sequence[int]) -> None:
        """Raise ``ValueError`` unless ``lengths`` are the batch this reference fingerprints (a file
        whose lengths were edited, even with its content hash recomputed, is refused). A reference
        without dropped counts (an older file) is checked as a batch that dropped nothing."""
        try:
            batch = Batch(
                lengths=tuple(lengths),
                trace=self.trace,
                seed=self.seed,
                index=self.index,
                tokens_per_batch=self.tokens_per_batch,
                max_context=self.max_context,
                dropped_count=self.dropped_count or 0,
                dropped_tokens=self.dropped_tokens or 0,
            )
        except ValueError as exc:
            raise ValueError(f"its lengths are not the batch its batch reference describes ({exc})") from None
        if batch.fingerprint() != self.fingerprint:
            older = "" if self.dropped_count is not None else " (or the file predates recorded dropped-sample counts)"
            raise ValueError(
                f"its lengths do not match the batch fingerprint {self.fingerprint}: they were edited{older}; "
                "re-create the plan (nspsim plan -o)"
            )


@dataclass(frozen=True, kw_only=True)
class ProfileRef:
    """Which cost profile a plan was made with: its ``name``, the ``source`` it was loaded from (the
    ``--profile`` value: a path or a built-in name) and the fingerprint of its coefficients."""

    name: str
    source: str
    fingerprint: str

    def __post_init__(self) -> None:
        _check_str(self.name, "profile name")
        _check_str(self.source, "profile source")
        _check_str(self.fingerprint, "profile fingerprint")

    @staticmethod
    def of(profile: Profile, source: str) -> ProfileRef:
        """Reference to ``profile``, loaded from ``source``."""
        return ProfileRef(name=profile.name, source=source, fingerprint=profile_fingerprint(profile))

    @property
    def label(self) -> str:
        """``name (source)``, or just the source when they are the same."""
        return self.source if self.name == self.source else f"{self.name} ({self.source})"
