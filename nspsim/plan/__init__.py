"""The Plan: the contract between planners, the simulator and the runtime (docs/DESIGN.md).

A plan records, for one batch on one cluster and model, each sample's SP-tree node and micro-batch,
the issue order of the active nodes of every micro-batch (identical on every rank) and, optionally,
per-sample save/recompute marks for tree-level recomputation (``None``: the executor decides, i.e.
full attention recomputation when memory forces checkpointing). Static SP, FlexSP, BASP, NSP-2L and
NSP all emit this type; a disjoint plan's nodes form an antichain in every micro-batch.

Plans validate themselves on construction (every sample placed once on an existing node, micro-batch
ids contiguous, issue orders are permutations of the active nodes, Tok_p <= B_tok on every GPU)
and carry a stable content hash (SHA-256 of the canonical JSON without metadata) so all ranks can
check they run the same plan. Plans hold names and integers, never process groups.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from nspsim.jsonfile import dumps_json, parse_json, read_text
from nspsim.plan import fields
from nspsim.plan.estimates import Estimates
from nspsim.plan.order import default_issue_order, roots_first
from nspsim.plan.refs import (
    BatchRef,
    ClusterRef,
    ModelRef,
    ProfileRef,
    model_fingerprint,
    ref_identity,
    ref_record,
    spec_differences,
)
from nspsim.sp_tree import Node, SPTree
from nspsim.specs.backend import BACKENDS, SPBackend
from nspsim.specs.cluster import ClusterSpec
from nspsim.specs.model import ModelSpec

if TYPE_CHECKING:
    from nspsim.trace.batching import Batch

SCHEMA = "nspsim-plan"
SCHEMA_VERSION = 1
WINDOW_SCHEMA = "nspsim-window"  # a gradient-accumulation window of plans (nspsim.plan.window)
_BUDGET_SLACK = 1e-9


@dataclass(frozen=True, kw_only=True)
class Plan:
    """A validated routing and execution plan for one batch. See the module docstring."""

    planner: str
    cluster: ClusterRef
    model: ModelRef
    batch: BatchRef
    spmax: int
    gpus_per_node: int
    token_budget: int
    backend: SPBackend = SPBackend.ULYSSES
    profile: ProfileRef | None = None  # the cost profile it was made with; None: analytic costs
    lengths: tuple[int, ...]
    nodes: tuple[Node, ...]
    micro_batches: tuple[int, ...]
    issue_order: tuple[tuple[Node, ...], ...]
    recompute: tuple[bool, ...] | None = None
    metadata: Mapping[str, float | int | str] = field(default_factory=dict)
    schema_version: int = SCHEMA_VERSION

    def __post_init__(self) -> None:
        if self.schema_version != SCHEMA_VERSION:
            raise ValueError(f"plan schema version {self.schema_version} is not supported (expected {SCHEMA_VERSION})")
        if self.backend not in BACKENDS:
            raise ValueError(f"plan backend {self.backend!r} unknown (known: {', '.join(BACKENDS)})")
        object.__setattr__(self, "backend", SPBackend(self.backend))  # a plain "ring" becomes the member
        if self.token_budget <= 0:
            raise ValueError(f"plan token budget must be positive, got {self.token_budget}")
        self._check_samples()
        self._check_issue_order()
        self._check_budget()

    # ---- validation ----------------------------------------------------------------------------
    def _check_samples(self) -> None:
        n = len(self.lengths)
        if n == 0:
            raise ValueError("a plan needs at least one sample")
        sizes = {"nodes": len(self.nodes), "micro_batches": len(self.micro_batches)}
        if self.recompute is not None:
            sizes["recompute"] = len(self.recompute)
        for name, size in sizes.items():
            if size != n:
                raise ValueError(f"plan has {n} samples but {size} entries in {name}")
        if min(self.lengths) <= 0:
            raise ValueError(f"sample {int(np.argmin(self.lengths))} has non-positive length {min(self.lengths)}")
        if max(self.lengths) > self.batch.max_context:
            j = int(np.argmax(self.lengths))
            raise ValueError(
                f"sample {j} has length {self.lengths[j]}, above the batch's max context {self.batch.max_context}"
            )
        _, degrees, firsts, _ = self.arrays
        bad = ~_valid_nodes(degrees, firsts, self.spmax, self.cluster.num_gpus)
        if bad.any():
            j = int(np.argmax(bad))
            try:
                self.tree.check_node(self.nodes[j])
            except ValueError as exc:
                raise ValueError(f"sample {j}: {exc}") from None
        ids = sorted(set(self.micro_batches))
        if ids != list(range(len(ids))):
            raise ValueError(f"micro-batch ids must be 0..m-1 without gaps, got {ids[:8]}")

    def _check_issue_order(self) -> None:
        if len(self.issue_order) != self.num_micro_batches:
            raise ValueError(
                f"plan has {self.num_micro_batches} micro-batches but {len(self.issue_order)} issue orders"
            )
        for mb, order in enumerate(self.issue_order):
            active = set(self.active_nodes(mb))
            if len(order) != len(set(order)) or set(order) != active:
                raise ValueError(
                    f"issue order of micro-batch {mb} must list each of its {len(active)} active nodes exactly once"
                )

    def _check_budget(self) -> None:
        for mb in range(self.num_micro_batches):
            tok = self.tokens_per_gpu(mb)
            worst = int(np.argmax(tok))
            if tok[worst] > self.token_budget * (1 + _BUDGET_SLACK):
                raise ValueError(
                    f"micro-batch {mb}: GPU {worst} holds {tok[worst]:.0f} sharded tokens, over the token budget "
                    f"B_tok={self.token_budget}"
                )

    # ---- derived views -------------------------------------------------------------------------
    @cached_property
    def tree(self) -> SPTree:
        """The SP forest this plan routes over."""
        return SPTree(num_gpus=self.cluster.num_gpus, spmax=self.spmax, gpus_per_node=self.gpus_per_node)

    def with_metadata(self, entries: Mapping[str, float | int | str]) -> Plan:
        """This plan with ``entries`` added to its metadata. Metadata is outside the content hash and
        every check, so the copy is not validated again (a large plan's checks take 0.1 s)."""
        other = copy.copy(self)
        object.__setattr__(other, "metadata", {**self.metadata, **fields.metadata(dict(entries))})
        return other

    @property
    def estimates(self) -> Estimates | None:
        """What the planner estimated for this plan (:mod:`nspsim.plan.estimates`); ``None`` for a plan
        whose metadata has no record."""
        return Estimates.of(self.metadata)

    @property
    def num_samples(self) -> int:
        """Number of samples routed."""
        return len(self.lengths)

    @cached_property
    def num_micro_batches(self) -> int:
        """Number of micro-batches (1 for NSP)."""
        return max(self.micro_batches) + 1

    @cached_property
    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(lengths, degrees, first ranks, micro-batch ids) as int64 arrays."""
        n = len(self.nodes)
        degrees = np.fromiter((node.degree for node in self.nodes), dtype=np.int64, count=n)
        firsts = degrees * np.fromiter((node.index for node in self.nodes), dtype=np.int64, count=n)
        return (
            np.asarray(self.lengths, dtype=np.int64),
            degrees,
            firsts,
            np.asarray(self.micro_batches, dtype=np.int64),
        )

    def sample_mask(self, micro_batch: int) -> np.ndarray:
        """Boolean mask of the samples in ``micro_batch``."""
        mask: np.ndarray = self.arrays[3] == micro_batch
        return mask

    def active_nodes(self, micro_batch: int) -> tuple[Node, ...]:
        """Distinct nodes used in ``micro_batch``, sorted (roots first, then by rank)."""
        _, degrees, firsts, _ = self.arrays
        mask = self.sample_mask(micro_batch)
        return roots_first(degrees[mask], firsts[mask], self.cluster.num_gpus)

    def tokens_per_gpu(self, micro_batch: int = 0) -> np.ndarray:
        """Tok_p of every GPU in ``micro_batch``: the sharded tokens of every node on its chain."""
        lengths, degrees, firsts, _ = self.arrays
        mask = self.sample_mask(micro_batch)
        tokens: np.ndarray = self.tree.per_gpu_sum(lengths[mask] / degrees[mask], degrees[mask], firsts[mask])
        return tokens

    def samples_per_degree(self) -> dict[int, int]:
        """How many samples each SP degree received (largest first)."""
        counts = Counter(node.degree for node in self.nodes)
        return dict(sorted(counts.items(), reverse=True))

    def is_disjoint(self) -> bool:
        """Whether every micro-batch's active nodes form an antichain (a disjoint-group plan)."""
        return all(self.tree.is_antichain(self.active_nodes(mb)) for mb in range(self.num_micro_batches))

    # ---- identity --------------------------------------------------------------------------------
    def __hash__(self) -> int:
        return hash(self.content_hash)

    @cached_property
    def content_hash(self) -> str:
        """Stable hash of everything except metadata: equal plans hash equal on every rank.

        SHA-256 over the canonical JSON of the header and the little-endian bytes of the per-sample
        columns (hashing 30K samples as JSON text would cost ~100 ms).
        """
        digest = hashlib.sha256(json.dumps(self._header(), sort_keys=True, separators=(",", ":")).encode())
        for column in self._columns().values():
            digest.update(np.ascontiguousarray(column, dtype="<i8").tobytes())
        return digest.hexdigest()[:16]

    def check_compatible(self, cluster: ClusterSpec, model: ModelSpec | None = None) -> None:
        """Raise ``ValueError`` if this plan was made for another cluster (or model), saying what differs."""
        here = ClusterRef.of(cluster)
        if here.label != self.cluster.label:
            raise ValueError(f"plan was made for cluster {self.cluster.label}, not {here.label}")
        same_values = self.cluster.spec is not None and dict(self.cluster.spec) == asdict(cluster)
        if here != self.cluster and not same_values:  # equal values: a byte count once written as a float
            raise ValueError(
                f"plan was made for another spec of cluster {here.label} (fingerprint {self.cluster.fingerprint}, "
                f"now {here.fingerprint}): {spec_differences(self.cluster.spec, asdict(cluster))}; re-plan it"
            )
        if self.gpus_per_node != cluster.gpus_per_node:
            raise ValueError(
                f"plan assumes {self.gpus_per_node} GPUs per node but {here.label} has {cluster.gpus_per_node}"
            )
        if model is None:
            return
        if model.name != self.model.name:
            raise ValueError(f"plan was made for model {self.model.name}, not {model.name}")
        if model_fingerprint(model) != self.model.fingerprint:
            raise ValueError(
                f"plan was made for another spec of model {model.name} (fingerprint {self.model.fingerprint}, "
                f"now {model_fingerprint(model)}): {spec_differences(self.model.spec, model.record())}; re-plan it"
            )

    # ---- JSON ------------------------------------------------------------------------------------
    def _header(self) -> dict[str, Any]:
        """Everything but the per-sample columns and the metadata."""
        return {
            "schema": SCHEMA,
            "schema_version": self.schema_version,
            "planner": self.planner,
            "cluster": ref_identity(self.cluster),
            "model": ref_identity(self.model),
            "batch": ref_identity(self.batch),
            "spmax": self.spmax,
            "gpus_per_node": self.gpus_per_node,
            "token_budget": self.token_budget,
            "backend": self.backend,
            "marked": self.recompute is not None,
            "issue_order": [[n.to_str() for n in order] for order in self.issue_order],
        } | ({} if self.profile is None else {"profile": ref_record(self.profile)})  # older plans hash as before

    def _columns(self) -> dict[str, np.ndarray]:
        """Per-sample columns as integer arrays (recompute marks as 0/1, empty when unmarked)."""
        lengths, degrees, firsts, mbs = self.arrays
        marks = np.asarray(self.recompute if self.recompute is not None else (), dtype=np.int64)
        return {
            "length": lengths,
            "degree": degrees,
            "index": firsts // degrees,
            "micro_batch": mbs,
            "recompute": marks,
        }

    def _body(self) -> dict[str, Any]:
        body = self._header()
        del body["marked"]
        body.update(cluster=ref_record(self.cluster), model=ref_record(self.model), batch=ref_record(self.batch))
        columns = {k: v.tolist() for k, v in self._columns().items()}
        if self.recompute is None:
            columns["recompute"] = None
        return {**body, "samples": columns, "metadata": dict(self.metadata)}

    def to_json(self, indent: int | None = None) -> str:
        """Canonical JSON text including the content hash."""
        body = self._body()
        body["content_hash"] = self.content_hash
        return dumps_json(body, what="plan", indent=indent, sort_keys=True)

    @staticmethod
    def from_json(text: str, origin: str = "plan") -> Plan:
        """Parse and validate; a corrupt or foreign document raises a one-line ``ValueError``."""
        return plan_from_data(parse_json(text, where=origin, what="plan"), origin)

    def check_batch(self) -> None:
        """Raise ``ValueError`` unless the lengths are the batch the batch reference fingerprints (plans
        built by :func:`make_plan` are; the JSON reader checks every file, see :meth:`BatchRef.check_lengths`)."""
        self.batch.check_lengths(self.lengths)

    def save(self, path: str | Path) -> None:
        """Write the plan as JSON (callers decide where; library code never writes on its own)."""
        Path(path).write_text(self.to_json(indent=1))

    @staticmethod
    def load(path: str | Path, cluster: ClusterSpec | None = None, model: ModelSpec | None = None) -> Plan:
        """Read a plan file, optionally checking that it matches ``cluster`` and ``model``."""
        plan = plan_from_data(parse_json(read_text(path, "plan"), where=str(path), what="plan"), str(path))
        if cluster is not None:
            plan.check_compatible(cluster, model)
        return plan


"""A plan file with this suffix is a plan log: one plan per line (``nspsim_runtime.train``'s
``<records>.plans.jsonl``)."""


def _valid_nodes(degrees: np.ndarray, firsts: np.ndarray, spmax: int, num_gpus: int) -> np.ndarray:
    """Per sample: is (degree, first rank) an aligned power-of-two block <= spmax inside the cluster?"""
    pow2 = (degrees > 0) & ((degrees & (degrees - 1)) == 0)
    valid: np.ndarray = pow2 & (degrees <= spmax) & (firsts >= 0) & (firsts + degrees <= num_gpus)
    return valid


def make_plan(
    *,
    planner: str,
    cluster: ClusterSpec,
    model: ModelSpec,
    batch: Batch,
    spmax: int,
    token_budget: int,
    nodes: Sequence[Node],
    micro_batches: Sequence[int] | None = None,
    backend: SPBackend = SPBackend.ULYSSES,
    issue_order: Sequence[Sequence[Node]] | None = None,
    recompute: Sequence[bool] | None = None,
    metadata: Mapping[str, float | int | str] | None = None,
    profile: ProfileRef | None = None,
    cluster_file: str | None = None,
) -> Plan:
    """Build and validate a plan from specs and a batch (the usual way planners create plans);
    ``cluster_file`` is the cluster file ``cluster`` was read from (``None``: a preset)."""
    mbs = tuple(micro_batches) if micro_batches is not None else (0,) * len(nodes)
    order = default_issue_order(nodes, mbs) if issue_order is None else tuple(tuple(o) for o in issue_order)
    return Plan(
        planner=planner,
        cluster=ClusterRef.of(cluster, cluster_file),
        model=ModelRef.of(model),
        batch=BatchRef.of(batch),
        spmax=spmax,
        gpus_per_node=cluster.gpus_per_node,
        token_budget=token_budget,
        backend=backend,
        profile=profile,
        lengths=tuple(batch.lengths),
        nodes=tuple(nodes),
        micro_batches=mbs,
        issue_order=order,
        recompute=None if recompute is None else tuple(bool(r) for r in recompute),
        metadata=dict(metadata or {}),
    )


def plan_from_data(data: Any, origin: str) -> Plan:
    if isinstance(data, dict) and data.get("schema") == WINDOW_SCHEMA:
        raise ValueError(
            f"{origin} is a window plan (a gradient-accumulation window, --accumulate W > 1), not a plan: "
            'each entry of its "plans" is one pass\'s plan'
        )
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise ValueError(f'{origin} is not an nspsim plan (missing "schema": "{SCHEMA}")')
    if data.get("schema_version") != SCHEMA_VERSION:
        raise ValueError(
            f"{origin}: plan schema version {data.get('schema_version')} is not supported (expected {SCHEMA_VERSION})"
        )
    try:
        plan = _build_from_dict(data)
        plan.check_batch()
    except (KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"{origin} is corrupt: missing or malformed field {exc}") from None
    except OverflowError as exc:  # a number out of the int64 range (2**70)
        raise ValueError(f"{origin} is invalid: a number is out of range ({exc})") from None
    except ValueError as exc:
        raise ValueError(f"{origin} is invalid: {exc}") from None
    if data.get("content_hash") != plan.content_hash:
        raise ValueError(f"{origin} is corrupt: content hash {data.get('content_hash')} does not match its content")
    return plan


def _build_from_dict(data: dict[str, Any]) -> Plan:
    """The plan a decoded file describes. Every value must have its exact JSON type: an integer field
    holds a JSON integer (not ``223.7``, ``223.0``, ``"223"`` or ``true``), a mark is ``true``/``false``
    or ``0``/``1``, a node name is canonical (``sp8#3``), so nothing is coerced into a plan whose
    content hash then matches a file that says something else."""
    s = fields.dict_field(data["samples"], "samples")
    degrees = fields.ints(s["degree"], "samples.degree")
    indices = fields.ints(s["index"], "samples.index")
    if len(degrees) != len(indices):
        raise ValueError(f"samples.degree has {len(degrees)} entries but samples.index {len(indices)}")
    profile = data.get("profile")
    return Plan(
        planner=fields.str_field(data["planner"], "planner"),
        cluster=ClusterRef(**fields.dict_field(data["cluster"], "cluster")),
        model=ModelRef(**fields.dict_field(data["model"], "model")),
        batch=BatchRef(**fields.dict_field(data["batch"], "batch")),
        spmax=fields.int_field(data["spmax"], "spmax"),
        gpus_per_node=fields.int_field(data["gpus_per_node"], "gpus_per_node"),
        token_budget=fields.int_field(data["token_budget"], "token_budget"),
        backend=cast(SPBackend, fields.str_field(data["backend"], "backend")),  # checked by Plan
        profile=None if profile is None else ProfileRef(**fields.dict_field(profile, "profile")),
        lengths=fields.ints(s["length"], "samples.length"),
        nodes=tuple(Node(d, i) for d, i in zip(degrees, indices)),
        micro_batches=fields.ints(s["micro_batch"], "samples.micro_batch"),
        issue_order=tuple(
            fields.nodes(order, f"issue_order[{k}]")
            for k, order in enumerate(fields.list_field(data["issue_order"], "issue_order"))
        ),
        recompute=fields.marks(s["recompute"]),
        metadata=fields.metadata(data.get("metadata", {})),
    )
