"""The window plan: the W plans of one gradient-accumulation window and which pass each sample took.

A window is W consecutive batches drawn as usual (the *source* batches) whose gradients are summed into
one optimizer step. Every sample of the window enters that step whichever pass carries it, so a window
planner may move samples between the passes without changing the gradient (only the floating-point
order of the sum). A :class:`WindowPlan` records the sources (batch references and lengths), the
*assignment* (per pass, the window-wide ids of its samples, in the order its plan lists them; a
sample's id is its position in the sources concatenated in order) and one ordinary :class:`Plan` per
pass. Pass k routes the batch :func:`pass_batches` builds: the assigned lengths, drawn as batch
``first + k`` of the same trace, seed and budget, carrying what the sampler dropped while drawing source
k; so the per-step assignment (pass k = source k) gives back the source batches, and its plans are the
per-step plans, bit for bit. The per-step contract is unchanged: a window of one batch is a plan.

Validation on construction: the sources are consecutive batches of one trace whose lengths match their
fingerprints; the assignment is a permutation of the window's samples; each plan's lengths are its
pass's; every pass is planned by the same planner for the same cluster, model, tree, budget, backend
and profile. The content hash covers the sources, the assignment and the plans' content hashes
(metadata, e.g. the candidates' estimates, is outside it, as a plan's is).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from nspsim.jsonfile import dumps_json, parse_json, read_text
from nspsim.plan import WINDOW_SCHEMA, Plan, fields, plan_from_data
from nspsim.plan.refs import BatchRef, ref_identity, ref_record
from nspsim.trace.batching import Batch

WINDOW_SCHEMA_VERSION = 1
MAX_WINDOW = 256
"""Passes per optimizer step at most: gradient accumulation beyond a few dozen passes is unusual, and a
window plans all its passes at once (memory and planning time grow with W)."""

Assignment = tuple[tuple[int, ...], ...]
"""Per pass, the window-wide ids of its samples (see the module docstring)."""

_SAME_PLAN_FIELDS = ("planner", "cluster", "model", "spmax", "gpus_per_node", "token_budget", "backend", "profile")


def per_step_assignment(sizes: Sequence[int]) -> Assignment:
    """Pass k takes source k's samples in their order (what per-step planning routes)."""
    starts = np.concatenate([[0], np.cumsum(sizes)]).astype(int)
    return tuple(tuple(range(int(a), int(b))) for a, b in zip(starts[:-1], starts[1:]))


def pass_batches(sources: Sequence[Batch], assignment: Assignment) -> tuple[Batch, ...]:
    """The batch each pass routes (module docstring); ``ValueError`` if a pass exceeds the batch budget
    or the assignment does not fit the sources."""
    lengths = np.concatenate([s.lengths_array() for s in sources])
    _check_assignment(assignment, len(sources), lengths.size)
    return tuple(
        Batch(
            lengths=tuple(int(x) for x in lengths[list(ids)]),
            trace=src.trace,
            seed=src.seed,
            index=src.index,
            tokens_per_batch=src.tokens_per_batch,
            max_context=src.max_context,
            dropped_count=src.dropped_count,
            dropped_tokens=src.dropped_tokens,
        )
        for src, ids in zip(sources, assignment)
    )


def _check_assignment(assignment: Assignment, passes: int, samples: int) -> None:
    if len(assignment) != passes:
        raise ValueError(f"a window of {passes} batches needs {passes} passes, got {len(assignment)}")
    if any(not ids for ids in assignment):
        raise ValueError(f"pass {next(k for k, ids in enumerate(assignment) if not ids)} of the window has no samples")
    bad = next((i for ids in assignment for i in ids if not 0 <= i < samples), None)
    if bad is not None:  # checked before numpy sees it: an id such as 2**70 does not fit an int64
        raise ValueError(f"the assignment names sample {bad}, but the window's samples are 0 to {samples - 1}")
    flat = np.fromiter((i for ids in assignment for i in ids), dtype=np.int64)
    if flat.size != samples or not np.array_equal(np.sort(flat), np.arange(samples)):
        raise ValueError(f"the assignment must place each of the window's {samples} samples in exactly one pass")


@dataclass(frozen=True, kw_only=True)
class WindowPlan:
    """A validated window: sources, assignment and one plan per pass (module docstring)."""

    sources: tuple[BatchRef, ...]
    source_lengths: tuple[tuple[int, ...], ...]
    assignment: Assignment
    plans: tuple[Plan, ...]
    metadata: Mapping[str, float | int | str] = field(default_factory=dict)
    schema_version: int = WINDOW_SCHEMA_VERSION

    def __post_init__(self) -> None:
        if self.schema_version != WINDOW_SCHEMA_VERSION:
            raise ValueError(
                f"window schema version {self.schema_version} is not supported (expected {WINDOW_SCHEMA_VERSION})"
            )
        size = len(self.plans)
        if not 1 <= size <= MAX_WINDOW:
            raise ValueError(f"a window holds 1 to {MAX_WINDOW} passes, got {size}")
        if len(self.sources) != size or len(self.source_lengths) != size:
            raise ValueError(
                f"a window of {size} passes needs {size} source batches and their lengths, "
                f"got {len(self.sources)} and {len(self.source_lengths)}"
            )
        self._check_sources()
        _check_assignment(self.assignment, size, self.num_samples)
        self._check_plans()

    def _check_sources(self) -> None:
        first = self.sources[0]
        for k, (ref, lengths) in enumerate(zip(self.sources, self.source_lengths)):
            same = (ref.trace, ref.seed, ref.tokens_per_batch, ref.max_context)
            if same != (first.trace, first.seed, first.tokens_per_batch, first.max_context):
                raise ValueError(f"source batch {k} is drawn from another trace, seed or budget than source 0")
            if ref.index != first.index + k:
                raise ValueError(
                    f"a window's batches are consecutive: source {k} is batch {ref.index}, not {first.index + k}"
                )
            try:
                ref.check_lengths(lengths)
            except ValueError as exc:
                raise ValueError(f"source batch {k}: {exc}") from None

    def _check_plans(self) -> None:
        flat = np.asarray([x for lengths in self.source_lengths for x in lengths], dtype=np.int64)
        head = self.plans[0]
        try:
            sources = [_source_batch(ref, lengths) for ref, lengths in zip(self.sources, self.source_lengths)]
            passes = pass_batches(sources, self.assignment)
        except ValueError as exc:
            raise ValueError(f"the assignment overfills a pass: {exc}") from None
        for k, (plan, ids, src) in enumerate(zip(self.plans, self.assignment, self.sources)):
            differs = [name for name in _SAME_PLAN_FIELDS if getattr(plan, name) != getattr(head, name)]
            if differs:
                raise ValueError(
                    f"pass {k}'s plan differs from pass 0's in {', '.join(differs)}: one planner plans a window"
                )
            if plan.lengths != tuple(int(x) for x in flat[list(ids)]):
                raise ValueError(f"pass {k}'s plan routes other lengths than the samples assigned to it")
            batch = plan.batch
            if (batch.trace, batch.seed, batch.index, batch.max_context) != (
                src.trace,
                src.seed,
                src.index,
                src.max_context,
            ):
                raise ValueError(
                    f"pass {k}'s plan routes batch {batch.index} of {batch.trace}, not the window's pass {k}"
                )
            if batch.fingerprint != passes[k].fingerprint():  # the budget and the dropped samples are source k's
                raise ValueError(
                    f"pass {k}'s plan routes another batch than the window's pass {k} (its tokens_per_batch or "
                    f"dropped samples are not source {k}'s)"
                )

    # ---- views ---------------------------------------------------------------------------------
    @property
    def size(self) -> int:
        """W, the passes of the window."""
        return len(self.plans)

    @property
    def num_samples(self) -> int:
        """Samples in the window."""
        return sum(len(lengths) for lengths in self.source_lengths)

    @property
    def total_tokens(self) -> int:
        """Tokens in the window."""
        return sum(sum(lengths) for lengths in self.source_lengths)

    @cached_property
    def is_per_step(self) -> bool:
        """Whether every pass holds its own source batch (per-step planning)."""
        return self.assignment == per_step_assignment([len(x) for x in self.source_lengths])

    def moved_samples(self) -> int:
        """Samples routed in another pass than the batch that drew them."""
        sizes = np.cumsum([len(x) for x in self.source_lengths])
        return sum(int(np.sum(np.searchsorted(sizes, ids, side="right") != k)) for k, ids in enumerate(self.assignment))

    # ---- identity and JSON -----------------------------------------------------------------------
    @cached_property
    def content_hash(self) -> str:
        """SHA-256 over the sources, the assignment and the plans' content hashes (not metadata)."""
        header = {
            "schema": WINDOW_SCHEMA,
            "schema_version": self.schema_version,
            "sources": [ref_identity(ref) for ref in self.sources],
            "plans": [p.content_hash for p in self.plans],
        }
        digest = hashlib.sha256(json.dumps(header, sort_keys=True, separators=(",", ":")).encode())
        for ids in self.assignment:
            digest.update(np.asarray(ids, dtype="<i8").tobytes() + b"|")
        return digest.hexdigest()[:16]

    def __hash__(self) -> int:
        return hash(self.content_hash)

    def to_json(self, indent: int | None = None) -> str:
        """Canonical JSON text with the content hash (each pass's plan as a plan file would hold it)."""
        body = {
            "schema": WINDOW_SCHEMA,
            "schema_version": self.schema_version,
            "sources": [ref_record(ref) for ref in self.sources],
            "source_lengths": [list(x) for x in self.source_lengths],
            "assignment": [list(ids) for ids in self.assignment],
            "plans": [json.loads(p.to_json()) for p in self.plans],
            "metadata": dict(self.metadata),
            "content_hash": self.content_hash,
        }
        return dumps_json(body, what="window plan", indent=indent, sort_keys=True)

    @staticmethod
    def from_json(text: str, origin: str = "window plan") -> WindowPlan:
        """Parse and validate; a corrupt or foreign document raises a one-line ``ValueError``."""
        return window_from_data(parse_json(text, where=origin, what="window plan"), origin)

    def save(self, path: str | Path) -> None:
        """Write the window plan as JSON (callers decide where)."""
        Path(path).write_text(self.to_json(indent=1))

    @staticmethod
    def load(path: str | Path) -> WindowPlan:
        """Read a window plan file."""
        return WindowPlan.from_json(read_text(path, "window plan"), str(path))


def _source_batch(ref: BatchRef, lengths: Sequence[int]) -> Batch:
    """The source batch ``ref`` describes, with ``lengths`` (already checked against its fingerprint)."""
    return Batch(
        lengths=tuple(lengths),
        trace=ref.trace,
        seed=ref.seed,
        index=ref.index,
        tokens_per_batch=ref.tokens_per_batch,
        max_context=ref.max_context,
        dropped_count=ref.dropped_count or 0,
        dropped_tokens=ref.dropped_tokens or 0,
    )


def window_from_data(data: Any, origin: str) -> WindowPlan:
    """The window plan a decoded JSON document describes (every field exact-typed, as plans are)."""
    if not isinstance(data, dict) or data.get("schema") != WINDOW_SCHEMA:
        raise ValueError(f'{origin} is not an nspsim window plan (missing "schema": "{WINDOW_SCHEMA}")')
    try:
        plans = tuple(
            plan_from_data(p, f"{origin}: pass {k}") for k, p in enumerate(fields.list_field(data["plans"], "plans"))
        )
        window = WindowPlan(
            sources=tuple(
                BatchRef(**fields.dict_field(ref, f"sources[{k}]"))
                for k, ref in enumerate(fields.list_field(data["sources"], "sources"))
            ),
            source_lengths=tuple(
                fields.ints(x, f"source_lengths[{k}]")
                for k, x in enumerate(fields.list_field(data["source_lengths"], "source_lengths"))
            ),
            assignment=tuple(
                fields.ints(x, f"assignment[{k}]")
                for k, x in enumerate(fields.list_field(data["assignment"], "assignment"))
            ),
            plans=plans,
            metadata=fields.metadata(data.get("metadata", {})),
            schema_version=fields.int_field(data.get("schema_version"), "schema_version"),
        )
    except (KeyError, TypeError) as exc:
        raise ValueError(f"{origin} is corrupt: missing or malformed field {exc}") from None
    except OverflowError as exc:  # a number out of the int64 range (2**70)
        raise ValueError(f"{origin} is invalid: a number is out of range ({exc})") from None
    except ValueError as exc:
        text = str(exc)
        raise ValueError(text if text.startswith(origin) else f"{origin} is invalid: {text}") from None
    if data.get("content_hash") != window.content_hash:
        raise ValueError(f"{origin} is corrupt: content hash {data.get('content_hash')} does not match its content")
    return window


def window_plan(sources: Sequence[Batch], assignment: Assignment, plans: Sequence[Plan], **metadata: Any) -> WindowPlan:
    """Build and validate the window plan of ``plans`` routing ``sources`` by ``assignment``."""
    return WindowPlan(
        sources=tuple(BatchRef.of(b) for b in sources),
        source_lengths=tuple(tuple(b.lengths) for b in sources),
        assignment=tuple(tuple(int(i) for i in ids) for ids in assignment),
        plans=tuple(plans),
        metadata=fields.metadata(metadata),
    )
