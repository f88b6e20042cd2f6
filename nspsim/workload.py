"""Resolved run configuration: a small tree of names and numbers, and the objects it builds.

:class:`WorkloadConfig` is what the CLI resolves from its flags and what every result file is written
next to (``to_dict``); :func:`build_workload` turns it into specs, the cost model, the memory model and
the batch sampler. Defaults are the NSP paper's main setting: Qwen3-30B-A3B on 64 H100-class GPUs,
2M tokens per batch, 192K max context, the ``wikipedia`` trace.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from nspsim.cost.analytic import AnalyticCostModel
from nspsim.cost.backends import backend_cost
from nspsim.cost.profile import Profile, load_profile
from nspsim.plan.refs import ProfileRef
from nspsim.sp_tree import SPTree, largest_spmax, tiles_hosts
from nspsim.specs.backend import BACKENDS, SPBackend
from nspsim.specs.cluster import ClusterSpec
from nspsim.specs.clusters import CLUSTER_PRESETS, get_cluster, is_cluster_file
from nspsim.specs.hf import HF_CONFIGS, resolve_model
from nspsim.specs.kernels import attention_curves
from nspsim.specs.memory import MemoryModel, memory_model
from nspsim.specs.model import MODEL_PRESETS, ModelSpec
from nspsim.specs.training import (
    DEFAULT_TRAINING,
    TRAINING_FIELDS,
    AttentionKernel,
    Checkpointing,
    TrainingSpec,
    training_preset,
)
from nspsim.trace import BUILTIN_TRACES, load_trace
from nspsim.trace.batching import BatchSampler

DEFAULT_TOKENS_PER_BATCH = 2 * 1024**2
DEFAULT_MAX_CONTEXT = 192 * 1024


_INT_FIELDS = (
    "gpus",
    "tokens_per_batch",
    "max_context",
    "seed",
    "token_budget",
    "spmax",
    "expert_parallel",
    "fsdp_prefetch_layers",
)
_OPTIONAL_INT_FIELDS = ("token_budget", "spmax", "expert_parallel", "fsdp_prefetch_layers")


@dataclass(frozen=True, kw_only=True)
class WorkloadConfig:
    """Everything that identifies a workload; all fields are plain values (JSON-friendly; ``backend``
    is a string enum, written as its value)."""

    trace: str = "wikipedia"
    model: str = "qwen3-30b-a3b"
    cluster: str = "h100"
    gpus: int = 64
    tokens_per_batch: int = DEFAULT_TOKENS_PER_BATCH
    max_context: int = DEFAULT_MAX_CONTEXT
    seed: int = 0
    backend: SPBackend = SPBackend.ULYSSES
    profile: str | None = None
    token_budget: int | None = None
    spmax: int | None = None
    training: str = DEFAULT_TRAINING
    checkpointing: Checkpointing | None = None
    attention_kernel: AttentionKernel | None = None
    fused_elementwise: bool | None = None
    expert_parallel: int | None = None
    optimizer_offload: bool | None = None
    fsdp_prefetch_layers: int | None = None

    def __post_init__(self) -> None:
        for name in _INT_FIELDS:  # the CLI and sweep specs parse these; Python callers get the same rule
            value = getattr(self, name)
            optional = name in _OPTIONAL_INT_FIELDS and value is None
            if not optional and (isinstance(value, bool) or not isinstance(value, int)):
                raise ValueError(f"workload {name} must be an integer, got {value!r}")
        if self.gpus < 1:
            raise ValueError(f"workload gpus must be at least 1, got {self.gpus}")
        if self.backend not in BACKENDS:
            raise ValueError(f"unknown SP backend {self.backend!r} (known: {', '.join(BACKENDS)})")
        object.__setattr__(self, "backend", SPBackend(self.backend))  # a plain "ring" becomes the member
        spec = self.training_spec()  # an unknown preset or a bad setting fails here, before anything runs
        for name in ("checkpointing", "attention_kernel"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, getattr(spec, name))  # plain strings become members
        if isinstance(self.gpus, int) and spec.expert_parallel > self.gpus:
            raise ValueError(
                f"expert_parallel {spec.expert_parallel} exceeds the {self.gpus} GPUs (an expert-parallel group "
                "is a set of GPUs; use at most --gpus)"
            )
        family = preset_family(self.cluster)
        if family and spec.attention_kernel is not AttentionKernel.SPEC:
            attention_curves(family, spec.attention_kernel, 128)  # a kernel never measured there fails here

    def training_spec(self, **extra: Any) -> TrainingSpec:
        """The training preset ``training`` with this config's settings (``None``: the preset's) and
        ``extra`` overrides applied."""
        settings = {name: getattr(self, name) for name in TRAINING_FIELDS}
        return training_preset(
            self.training,
            backend=self.backend,
            token_budget=self.token_budget,
            **settings,
            **extra,
        )

    def to_dict(self) -> dict[str, Any]:
        """Plain dict for JSON output."""
        return asdict(self)


@dataclass(frozen=True, kw_only=True)
class Workload:
    """The objects a :class:`WorkloadConfig` resolves to."""

    config: WorkloadConfig
    model: ModelSpec
    cluster: ClusterSpec
    training: TrainingSpec
    cost: AnalyticCostModel
    memory: MemoryModel
    sampler: BatchSampler
    tree: SPTree

    @property
    def token_budget(self) -> int:
        """B_tok, the per-GPU sharded-token budget."""
        return self.memory.token_budget

    @property
    def cluster_file(self) -> str | None:
        """The cluster file (``--cluster``) the cluster was read from, as an absolute path (a plan read
        from another folder finds it); ``None`` for a preset."""
        return str(Path(self.config.cluster).resolve()) if is_cluster_file(self.config.cluster) else None

    @property
    def profile_ref(self) -> ProfileRef | None:
        """The cost profile's reference that plans record (``None`` with analytic costs)."""
        source = self.config.profile
        return ProfileRef.of(self.cost.profile, source) if source else None


def input_digests(config: WorkloadConfig) -> dict[str, list[str]]:
    """For each input of ``config`` that is a file (not a built-in name): ``[the path as given, its
    digest]``, the SHA-256 of its bytes (a cluster file: its resolved fingerprint, which covers what it
    extends). Written configs record them, so that a re-run from one (``--config``) refuses files that
    changed or that a relative path now finds elsewhere (:func:`check_input_digests`), and sweep cache
    keys hash them. A file that cannot be read gets no entry: building the workload then says why."""
    out: dict[str, list[str]] = {}
    builtin = {"trace": BUILTIN_TRACES, "model": {*MODEL_PRESETS, *HF_CONFIGS}, "profile": (), "cluster": ()}
    for key, names in builtin.items():
        value = getattr(config, key)
        if not value or value in names:
            continue
        try:
            if key == "cluster":
                if is_cluster_file(value):
                    out[key] = [value, get_cluster(value, config.gpus).fingerprint()]
            elif Path(value).is_file():
                out[key] = [value, hashlib.sha256(Path(value).read_bytes()).hexdigest()[:16]]
        except (OSError, ValueError):
            continue
    return out


def check_input_digests(recorded: dict[str, list[str]], config: WorkloadConfig) -> None:
    """``ValueError`` (one line) when an input that ``config`` still names by the recorded path is not
    the file the recorded run read (changed, deleted, or found elsewhere from another folder)."""
    now = input_digests(config)
    for key, (path, digest) in recorded.items():
        if getattr(config, key) != path:
            continue  # a flag replaced it: the user's choice
        if key not in now:
            raise ValueError(
                f"the {key} file {path} of the recorded run is not there (paths are as that run gave them)"
            )
        if now[key][1] != digest:
            raise ValueError(
                f"the {key} file {path} is not the one the recorded run read (digest {digest} then, {now[key][1]} "
                "now: edited, or a relative path found another file from this folder); the result would differ"
            )


def resolve_spmax(model: ModelSpec, cluster: ClusterSpec, backend: str, requested: int | None) -> int:
    """Largest admissible SP degree: a tree of the cluster's forest (:func:`largest_spmax`: a power of two
    dividing the GPU count and tiling its hosts), and what the backend admits
    (:meth:`BackendCost.max_degree`: <= attention heads for Ulysses)."""
    forest = largest_spmax(cluster.num_gpus, cluster.gpus_per_node)
    limit = min(backend_cost(backend).max_degree(model, cluster.num_gpus), forest)
    limit = 1 << (limit.bit_length() - 1)  # a power of two
    if requested is None:
        return limit
    if requested > limit or requested & (requested - 1) or requested <= 0:
        trees = "" if forest == cluster.num_gpus else f"; {cluster.num_gpus} GPUs form trees of at most {forest}"
        raise ValueError(
            f"spmax {requested} is not admissible: it must be a power of two <= {limit} "
            f"({model.name} has {model.num_heads} heads, the cluster {cluster.num_gpus} GPUs{trees})"
        )
    return requested


def preset_family(cluster: str) -> str | None:
    """The attention-kernel family of a cluster preset's GPU (``None`` for a cluster file, which
    :func:`build_workload` checks once it is read, and for a name that is no preset)."""
    return get_cluster(cluster, 8).gpu.family if cluster in CLUSTER_PRESETS else None


def check_training(model: ModelSpec, training: TrainingSpec) -> None:
    """Settings that cannot apply to ``model``: expert parallelism on a dense model or over more groups
    than it has experts, FSDP prefetch beyond its layers; ``ValueError`` with the fix."""
    ep = training.expert_parallel
    if ep > 1 and model.moe is None:
        raise ValueError(f"expert_parallel {ep} needs an MoE model; {model.name} is dense (use 1)")
    if model.moe is not None and ep > model.moe.num_experts:
        raise ValueError(f"expert_parallel {ep} exceeds {model.name}'s {model.moe.num_experts} experts")
    if training.fsdp_prefetch_layers > model.num_layers:
        raise ValueError(
            f"fsdp_prefetch_layers {training.fsdp_prefetch_layers} exceeds {model.name}'s {model.num_layers} layers"
        )


def check_expert_groups(expert_parallel: int, cluster: ClusterSpec) -> None:
    """Expert-parallel groups of consecutive GPUs must tile the cluster and its hosts (as SP trees do,
    :func:`~nspsim.sp_tree.tiles_hosts`); ``ValueError`` with the fix otherwise."""
    p, gpn = cluster.num_gpus, cluster.gpus_per_node
    if p % expert_parallel or not tiles_hosts(expert_parallel, gpn):
        raise ValueError(
            f"expert_parallel {expert_parallel} does not tile {cluster.label} ({p} GPUs in hosts of {gpn}): "
            f"use a power of two that divides the GPU count and a host, or is a multiple of a host "
            f"(at most {largest_spmax(p, gpn)})"
        )


def build_workload(config: WorkloadConfig) -> Workload:
    """Resolve presets, profile, memory model and sampler; ``ValueError`` for any bad setting."""
    model = resolve_model(config.model)  # a preset, a named transformers config or a config.json path
    cluster = get_cluster(config.cluster, config.gpus)
    profile = load_profile(config.profile) if config.profile is not None else Profile()  # '' is an error
    profile.check_applies(
        cluster=cluster.name, model=model.name, gpus=cluster.num_gpus, origin=f"profile {config.profile}"
    )
    overrides: dict[str, Any] = {}
    if profile.element_bytes is not None:  # the measured runtime's precision (fp32 on the CPU runtime)
        overrides |= dict.fromkeys(("act_bytes", "param_bytes", "grad_bytes"), profile.element_bytes)
    training = config.training_spec(**overrides)
    check_training(model, training)
    check_expert_groups(training.expert_parallel, cluster)
    if is_cluster_file(config.cluster) and cluster.gpu.family and training.attention_kernel is not AttentionKernel.SPEC:
        attention_curves(cluster.gpu.family, training.attention_kernel, 128)  # a preset's GPU: checked by the config
    if profile.nonattn_fwd_s_by_tokens is not None and (
        config.checkpointing is not None or config.fused_elementwise is not None
    ):
        raise ValueError(
            f"profile {config.profile} measured non-attention time with the runtime's own setup, so "
            "--checkpointing and --fused-elementwise cannot change it; drop them or the profile"
        )
    memory = memory_model(model, cluster, training)
    spmax = resolve_spmax(model, cluster, config.backend, config.spmax)
    sampler = BatchSampler(
        load_trace(config.trace),
        tokens_per_batch=config.tokens_per_batch,
        max_context=config.max_context,
        seed=config.seed,
    )
    return Workload(
        config=config,
        model=model,
        cluster=cluster,
        training=training,
        cost=AnalyticCostModel(model=model, cluster=cluster, training=training, profile=profile),
        memory=memory,
        sampler=sampler,
        tree=SPTree(num_gpus=cluster.num_gpus, spmax=spmax, gpus_per_node=cluster.gpus_per_node),
    )
