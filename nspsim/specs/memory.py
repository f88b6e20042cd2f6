"""Per-GPU memory model and the token budget B_tok (docs/DESIGN.md, docs/simulator.md).

HBM holds (1) FSDP-sharded model states, (2) gathered parameter/gradient buffers for the layers in
flight, and (3) activations, which scale with the GPU's sharded token count Tok_p. Activations per
sharded token, per decoder layer, are split into

* ``keep``: what activation checkpointing stores per layer (:func:`kept_elements_per_token_layer`:
  under the default, selective, the layer input and FFN input, hidden-sized each, with the FFN/MoE
  internals recomputed in backward, so they only count in the one-layer ``working`` set);
* ``attention``: what the attention core keeps for its backward, for saved nodes only (recompute-marked
  nodes keep none of it and rerun their attention, compute and SP communication, in backward). It is
  stated as the runtime keeps it (``nspsim_runtime/backends``; measured in
  ``tests/runtime/test_saved_attention_bytes.py``): every node keeps its output O (activation dtype)
  and the log-sum-exp (fp32, one per query head); a Ulysses node also keeps Q, K and V in head
  layout, where K and V arrive replicated once the degree exceeds the KV heads (each rank then holds
  one whole-sequence KV head, so K and V grow with the degree). Ring and leaf nodes read their
  sequence-layout Q, K, V, the node's inputs, and replicate nothing.

The node's inputs (sequence-layout Q, K, V) and the o_proj input are counted in neither: the model
assumes selective checkpointing from the layer and FFN inputs, which recomputes them with the other
per-token intermediates, whereas the runtime (no checkpointing) holds them for every node whatever
its marks.

B_tok is the token capacity with all attention recomputed (the least memory a plan can use), so a
plan within B_tok is executable; whether attention can be kept too is the executor's decision
(tree-level recomputation). Trade-off: a per-token linear model is exact for token-proportional
tensors and ignores allocator fragmentation, which ``reserved_bytes`` absorbs.
"""

from __future__ import annotations

from dataclasses import dataclass

from nspsim.specs.backend import backend_layout
from nspsim.specs.cluster import ClusterSpec
from nspsim.specs.clusters import CLUSTER_PRESETS, get_cluster
from nspsim.specs.model import ModelSpec
from nspsim.specs.training import Checkpointing, TrainingSpec
from nspsim.units import format_bytes

GIB = 1024**3


@dataclass(frozen=True, kw_only=True)
class MemoryModel:
    """Byte coefficients of one GPU's memory for a (model, cluster, training) triple.

    Attention coefficients are bytes per sharded token per layer of a saved node:
    ``attn_bytes_per_token_layer`` for an SP node (degree >= 2) up to ``num_kv_heads``,
    ``attn_kv_bytes_per_head_token`` for each KV head replicated past them (0 where the backend does
    not replicate) and ``attn_leaf_bytes_per_token_layer`` for a degree-1 node (``None``: the SP
    figure, for hand-built models that do not tell them apart).
    """

    usable_bytes: float
    state_bytes: float
    buffer_bytes: float
    keep_bytes_per_token: float
    working_bytes_per_token: float
    attn_bytes_per_token_layer: float
    attn_kv_bytes_per_head_token: float
    num_layers: int
    num_kv_heads: int
    token_budget: int
    attn_leaf_bytes_per_token_layer: float | None = None
    keeps_attention: bool = True

    def __post_init__(self) -> None:
        coefficients = {
            "attn_bytes_per_token_layer": self.attn_bytes_per_token_layer,
            "attn_kv_bytes_per_head_token": self.attn_kv_bytes_per_head_token,
            "attn_leaf_bytes_per_token_layer": self.attn_leaf_bytes_per_token_layer or 0.0,
        }
        for name, value in coefficients.items():
            if not value >= 0:
                raise ValueError(f"memory model: {name} must be a byte count >= 0, got {value!r}")
        if self.num_layers < 1 or self.num_kv_heads < 1:
            raise ValueError(
                f"memory model: num_layers and num_kv_heads must be >= 1, got {self.num_layers} and {self.num_kv_heads}"
            )

    @property
    def activation_capacity(self) -> float:
        """Bytes left for activations after states and buffers."""
        return self.usable_bytes - self.state_bytes - self.buffer_bytes

    @property
    def derived_token_budget(self) -> int:
        """The B_tok these coefficients give (``token_budget`` unless a ``--token-budget`` override
        replaced it): the activation capacity over the bytes of one token with attention recomputed."""
        return int(self.activation_capacity // (self.keep_bytes_per_token + self.working_bytes_per_token))

    def attention_bytes_per_token(self, degree: int) -> float:
        """Attention bytes a saved node of ``degree`` keeps per sharded token over all layers.

        Degree 1 keeps the leaf figure; larger degrees the SP figure plus, past the KV heads, one
        ``attn_kv_bytes_per_head_token`` per replicated KV head (Ulysses: K and V grow with the degree).
        """
        if degree < 1:
            raise ValueError(f"memory model: an SP degree is >= 1, got {degree}")
        if degree == 1 and self.attn_leaf_bytes_per_token_layer is not None:
            return self.num_layers * self.attn_leaf_bytes_per_token_layer
        extra_kv_heads = max(0, degree - self.num_kv_heads)
        per_layer = self.attn_bytes_per_token_layer + extra_kv_heads * self.attn_kv_bytes_per_head_token
        return self.num_layers * per_layer

    def node_attention_bytes(self, tokens: float, degree: int) -> float:
        """Attention bytes one rank of a node of ``degree`` keeps for ``tokens`` tokens of its saved
        samples (each rank holds 1/degree of the tokens, at :meth:`attention_bytes_per_token` each;
        exact for Ulysses, whose ranks hold whole samples per head, and the mean rank for Ring and
        uneven shards)."""
        return tokens / degree * self.attention_bytes_per_token(degree)

    def base_bytes(self, tokens: float) -> float:
        """Activation bytes of ``tokens`` sharded tokens with every node's attention recomputed."""
        return tokens * (self.keep_bytes_per_token + self.working_bytes_per_token)

    def fits(self, activation_bytes: float) -> bool:
        """Whether ``activation_bytes`` fit beside the model states and buffers."""
        return activation_bytes <= self.activation_capacity


def state_bytes_per_gpu(model: ModelSpec, training: TrainingSpec, num_gpus: int) -> float:
    """FSDP-sharded parameters, gradients and (unless offloaded) optimizer states per GPU."""
    per_param = training.param_bytes + training.grad_bytes
    if not training.optimizer_offload:
        per_param += training.optim_bytes
    return model.total_params * per_param / num_gpus


def gathered_layer_params(model: ModelSpec, training: TrainingSpec) -> float:
    """Parameters one GPU materialises for one layer: experts are split over the EP group."""
    dense = model.params_per_layer - model.expert_params_per_layer
    return dense + model.expert_params_per_layer / training.expert_parallel


def buffer_bytes_per_gpu(model: ModelSpec, training: TrainingSpec) -> float:
    """Unsharded parameter and gradient buffers for the current layer plus the prefetched ones."""
    layers_in_flight = 1 + training.fsdp_prefetch_layers
    per_layer = gathered_layer_params(model, training) * (training.param_bytes + training.grad_bytes)
    return layers_in_flight * per_layer + model.embedding_params * training.param_bytes


def kept_elements_per_token_layer(model: ModelSpec, checkpointing: Checkpointing) -> float:
    """Activation elements per token one layer keeps for backward, outside the attention core's own
    tensors (counted by :func:`saved_attention_bytes`), under ``checkpointing``:

    * ``full``: the layer input (h);
    * ``selective``: the layer input and the FFN input (2h);
    * ``op``: the layer input plus the outputs of the first, third, ... matmul (torchtitan's op-level
      policy keeps those and recomputes the others);
    * ``none``: every intermediate: the two norm inputs and outputs (4h), Q, K, V before and after
      RoPE (2q + 3kv), the matmul outputs of the FFN and the activation output (f) — Korthikanti et al.
      2022's per-layer count without the attention scores, which flash attention never stores.
    """
    h = float(model.hidden)
    if checkpointing is Checkpointing.FULL:
        return h
    if checkpointing is Checkpointing.SELECTIVE:
        return 2 * h
    if checkpointing is Checkpointing.OP:  # the outputs of the 1st, 3rd, ... matmul are kept
        return h + sum(out for _, out in model.forward_matmuls()[0::2])
    f = float(model.moe.top_k * model.moe.expert_ffn if model.moe else model.dense_ffn)
    ffn = sum(out for _, out in model.forward_matmuls()[4:]) + f  # FFN matmul outputs and the activation
    return 4 * h + 2 * model.q_width + 3 * model.kv_width + ffn


def _working_bytes_per_token(model: ModelSpec, training: TrainingSpec) -> float:
    """Transient bytes per token of the one layer being computed (forward and backward live)."""
    ffn = (
        model.moe.top_k * (model.hidden + 3 * model.moe.expert_ffn)
        if model.moe
        else model.ffn_matrices * model.dense_ffn
    )
    widths = 6 * model.hidden + model.q_width + 2 * model.kv_width + ffn
    return 2 * widths * training.act_bytes


def saved_attention_bytes(model: ModelSpec, training: TrainingSpec) -> tuple[float, float, float]:
    """What a saved node keeps per sharded token per layer: ``(SP node up to the KV heads, each
    replicated KV head past them, degree-1 node)``.

    Every node keeps its output (``q_width`` values) and the fp32 log-sum-exp of each query head; the
    backend's :class:`~nspsim.specs.backend.BackendLayout` says what an SP node adds: Ulysses keeps Q,
    K, V in head layout (its backward kernel runs there) and replicates K and V before the all-to-all
    once the degree exceeds the KV heads; Ring and leaf nodes read their sequence-layout inputs and
    replicate nothing.
    """
    out_lse = model.q_width * training.act_bytes + 4 * model.num_heads
    layout = backend_layout(training.backend)
    qkv = (model.q_width + 2 * model.kv_width) * training.act_bytes if layout.saves_head_layout_qkv else 0.0
    replicated = 2 * model.head_dim * training.act_bytes if layout.replicates_kv else 0.0
    return out_lse + qkv, replicated, out_lse


def _more_memory(cluster: ClusterSpec, buffers: float, usable: float, training: TrainingSpec) -> str:
    """What can make room, naming only what helps: more GPUs shard the model states further, but not
    the per-layer buffers every GPU holds whole; a cluster preset whose GPUs have more memory helps
    either way; a smaller model preset always does."""
    larger = [
        name
        for name in CLUSTER_PRESETS
        if get_cluster(name, cluster.gpus_per_node).gpu.hbm_bytes > cluster.gpu.hbm_bytes
    ]
    options = [] if buffers >= usable else ["more GPUs (--gpus, or more ranks under torchrun)"]
    if not training.optimizer_offload and buffers < usable:
        options.append("optimizer states on the host (--optimizer-offload)")
    if larger:
        options.append(f"a cluster preset with more memory per GPU (--cluster {' or '.join(larger)})")
    options.append("a smaller model preset (--model)")
    return "use " + ", ".join(options[:-1]) + (" or " if len(options) > 1 else "") + options[-1]


def memory_model(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec) -> MemoryModel:
    """Derive the memory coefficients and B_tok; ``ValueError`` when nothing fits."""
    usable = cluster.gpu.hbm_bytes * training.hbm_usable_fraction - training.reserved_bytes
    states = state_bytes_per_gpu(model, training, cluster.num_gpus)
    buffers = buffer_bytes_per_gpu(model, training)
    keep = model.num_layers * kept_elements_per_token_layer(model, training.checkpointing) * training.act_bytes
    working = _working_bytes_per_token(model, training)
    attn, attn_kv_head, attn_leaf = saved_attention_bytes(model, training)
    capacity = usable - states - buffers
    if capacity <= 0:
        raise ValueError(
            f"impossible memory budget: {model.name} needs {format_bytes(states + buffers)} per GPU for model "
            f"states and buffers but {cluster.label} has {format_bytes(max(usable, 0.0))} usable "
            f"({training.hbm_usable_fraction:.0%} of {format_bytes(cluster.gpu.hbm_bytes)} HBM less a "
            f"{format_bytes(training.reserved_bytes)} reserve); " + _more_memory(cluster, buffers, usable, training)
        )
    budget = training.token_budget or int(capacity // (keep + working))
    if budget <= 0:
        raise ValueError(f"impossible memory budget: not one token fits on a GPU of {cluster.label}")
    return MemoryModel(
        usable_bytes=usable,
        state_bytes=states,
        buffer_bytes=buffers,
        keep_bytes_per_token=keep,
        working_bytes_per_token=working,
        attn_bytes_per_token_layer=attn,
        attn_kv_bytes_per_head_token=attn_kv_head,
        num_layers=model.num_layers,
        num_kv_heads=model.num_kv_heads,
        token_budget=budget,
        attn_leaf_bytes_per_token_layer=attn_leaf,
        keeps_attention=training.checkpointing is not Checkpointing.FULL,
    )
