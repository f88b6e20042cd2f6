"""Model architecture specs and named presets (docs/validation.md).

A :class:`ModelSpec` describes a decoder-only transformer exactly enough to derive parameter counts,
FLOPs per token and activation bytes. Presets are plain functions registered in ``MODEL_PRESETS``.
Parameter counts are derived from the architecture, never typed in, so a preset checks itself
against the published totals (tests hold Qwen3 within 3%).

Attention is causal, optionally within a sliding window W on some or all layers (Mistral: 4096 on
every layer; Qwen2 with ``max_window_layers``: the layers from that index on). A causal window of W
over a sample of L tokens attends :func:`causal_pairs` = sum_{i<L} min(i+1, W) query-key pairs
(position i sees itself and the W-1 before it, transformers' ``kv_idx > q_idx - W``): L(L+1)/2 when
W >= L, about L*W when W << L. That pair count is the one home of windowed attention work: attention
FLOPs are the full causal FLOPs times the share of pairs a window keeps
(:meth:`ModelSpec.attention_sq_lengths`), averaged over the layers. Trade-off: a model mixing
windowed and full layers is priced as its mean layer (exact for the step's summed compute; the
per-layer overlap with FSDP collectives sees the average), and a spec without a window records no
window fields, so its fingerprint, plan hashes and results are what they were before windows
existed (:meth:`ModelSpec.record`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from nspsim.sp_tree import is_power_of_two


@dataclass(frozen=True, kw_only=True)
class MoESpec:
    """A mixture-of-experts FFN: ``num_experts`` SwiGLU experts, ``top_k`` routed per token."""

    num_experts: int
    top_k: int
    expert_ffn: int
    shared_expert_ffn: int = 0

    def __post_init__(self) -> None:
        if min(self.num_experts, self.top_k, self.expert_ffn) <= 0 or self.shared_expert_ffn < 0:
            raise ValueError("MoE sizes must be positive (num_experts, top_k, expert_ffn)")
        _check_size("num_experts", self.num_experts)
        _check_size("expert_ffn", self.expert_ffn)
        _check_size("shared_expert_ffn", self.shared_expert_ffn)
        if self.top_k > self.num_experts:
            raise ValueError(f"MoE top_k ({self.top_k}) exceeds num_experts ({self.num_experts})")


MAX_SIZE = 2**24
"""The largest size a model dimension may have (16,777,216): 100x beyond any published model's largest
(vocabularies of ~260K, FFNs of ~50K, 128 layers), so a typo or a unit slip (``10**400``) is refused
rather than overflowing a float in the cost model."""


MAX_WINDOW = 2**36
"""The largest sliding window: the longest sample a trace may hold (``nspsim.trace.base``); a larger
window is full attention for every sample, so a larger number is a slip."""


def _check_size(key: str, value: int) -> None:
    if value > MAX_SIZE:
        shown = f"{value:,}" if value < 10**30 else f"a {len(str(value))}-digit number"
        raise ValueError(f"{key} is {shown}; a model dimension is at most {MAX_SIZE:,}")


def ulysses_admits(num_heads: int, num_kv_heads: int, degree: int) -> bool:
    """Whether Ulysses SP at ``degree`` can split the heads as the runtime splits them (the runtime's
    backend asks this too): a power of two dividing the attention heads, and the KV heads too unless
    there are fewer of them than ``degree`` (each rank then holds a replica of one). Ring attention
    splits the sequence, not the heads, and admits any degree."""
    if not is_power_of_two(degree) or num_heads % degree:
        return False
    return num_kv_heads < degree or num_kv_heads % degree == 0


def causal_attention_flops(sum_sq_lengths: float, q_width: int) -> float:
    """Forward causal attention-core FLOPs for samples with sum of L_j^2 given, over ``q_width``
    (query heads x head dim) columns.

    QK^T and PV each cost 2*L^2*q_width FLOPs unmasked; the causal mask halves that, so a sample of
    length L costs 2 * L^2 * q_width. Varlen: the sum runs over samples, never (sum L)^2.
    """
    return 2.0 * sum_sq_lengths * q_width


def causal_pairs(lengths: Any, window: int | None) -> np.ndarray:
    """Query-key pairs causal attention within a sliding ``window`` W attends over samples of
    ``lengths`` L (float64, element-wise): sum_{i<L} min(i+1, W) = m(m+1)/2 + (L-m)m with m = min(L, W),
    so L(L+1)/2 for ``None`` or W >= L. L = 5, W = 2: 1+2+2+2+2 = 9."""
    full = np.asarray(lengths, dtype=np.float64)
    m = full if window is None else np.minimum(full, float(window))
    return m * (m + 1.0) / 2.0 + (full - m) * m


def window_share(lengths: Any, window: int | None) -> np.ndarray:
    """The share of a sample's causal query-key pairs a ``window`` keeps (:func:`causal_pairs` over the
    full count): exactly 1.0 where W >= L or there is no window, 9/15 for L = 5, W = 2."""
    full = causal_pairs(lengths, None)
    return np.where(full > 0, causal_pairs(lengths, window) / np.maximum(full, 1.0), 1.0)


@dataclass(frozen=True, kw_only=True)
class ModelSpec:
    """Decoder architecture: GQA attention with per-head QK-norm, SwiGLU dense FFN or MoE.

    ``ffn_gated`` = False describes a dense two-matrix MLP (GPT/MPT: up, GELU, down) instead of the
    three-matrix gated one; MoE experts are always gated. ``sliding_window`` W > 0 restricts causal
    attention to each token and the W-1 before it on the layers ``window_layers`` names (``None``: on
    every layer; the module doc); ``None`` is full causal attention.
    """

    name: str
    num_layers: int
    hidden: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    vocab: int
    dense_ffn: int = 0
    moe: MoESpec | None = None
    tie_embeddings: bool = False
    qk_norm: bool = True
    ffn_gated: bool = True
    sliding_window: int | None = None
    window_layers: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        sizes = (self.num_layers, self.hidden, self.num_heads, self.num_kv_heads, self.head_dim, self.vocab)
        if min(sizes) <= 0:
            raise ValueError(f"model {self.name!r}: layer/hidden/head/vocab sizes must be positive")
        named = {"num_layers": self.num_layers, "hidden": self.hidden, "num_heads": self.num_heads}
        named |= {"head_dim": self.head_dim, "vocab": self.vocab, "dense_ffn": self.dense_ffn}
        for key, value in named.items():
            try:
                _check_size(key, value)
            except ValueError as exc:
                raise ValueError(f"model {self.name!r}: {exc}") from None
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"model {self.name!r}: num_heads ({self.num_heads}) must be a multiple of "
                f"num_kv_heads ({self.num_kv_heads})"
            )
        if (self.moe is None) == (self.dense_ffn <= 0):
            raise ValueError(f"model {self.name!r}: give exactly one of dense_ffn > 0 or moe")
        if not isinstance(self.ffn_gated, bool) or (self.moe is not None and not self.ffn_gated):
            raise ValueError(f"model {self.name!r}: ffn_gated is true or false, and MoE experts are gated")
        self._check_window()

    def _check_window(self) -> None:
        """``sliding_window`` a positive integer or ``None``; ``window_layers`` distinct layer indices in
        ascending order (a tuple or list, held as a tuple), only with a window; every layer listed is
        stored as ``None`` (one spelling of "every layer", so equal models fingerprint alike)."""
        window, layers = self.sliding_window, self.window_layers
        if window is not None and (
            isinstance(window, bool) or not isinstance(window, int) or not 0 < window <= MAX_WINDOW
        ):
            shown = repr(window) if len(repr(window)) < 40 else f"a {len(repr(window))}-character value"
            raise ValueError(
                f"model {self.name!r}: sliding_window must be a token count from 1 to {MAX_WINDOW:,} (2**36), "
                f"got {shown}"
            )
        if layers is None:
            return
        if window is None:
            raise ValueError(f"model {self.name!r}: window_layers needs a sliding_window")
        if not isinstance(layers, (tuple, list)) or not all(type(i) is int for i in layers):
            shown = repr(layers)[:200]
            raise ValueError(f"model {self.name!r}: window_layers must be a list of layer indices, got {shown}")
        layers = tuple(layers)
        object.__setattr__(self, "window_layers", layers)  # a list (as a plan records it) is held as a tuple
        if not layers or list(layers) != sorted(set(layers)) or layers[0] < 0 or layers[-1] >= self.num_layers:
            raise ValueError(
                f"model {self.name!r}: window_layers must be distinct ascending indices of its "
                f"{self.num_layers} layers, got {layers!r}"[:300]
            )
        if len(layers) == self.num_layers:
            object.__setattr__(self, "window_layers", None)

    def record(self) -> dict[str, Any]:
        """Every field as plain values (what a plan records and the fingerprint hashes), the window
        fields only when set: a model without a window records what it did before they existed."""
        out = asdict(self)
        for key in ("sliding_window", "window_layers"):
            if out[key] is None:
                del out[key]
        if "window_layers" in out:
            out["window_layers"] = list(out["window_layers"])
        return out

    @property
    def windowed_layers(self) -> int:
        """How many layers attend within the sliding window (0 without one)."""
        if self.sliding_window is None:
            return 0
        return self.num_layers if self.window_layers is None else len(self.window_layers)

    def attention_sq_lengths(self, lengths: np.ndarray) -> np.ndarray:
        """Per sample, the L^2 that :meth:`attention_flops` takes for one layer: L^2 (float64) for full
        causal attention, times the share of pairs the window keeps (:func:`window_share`) on the
        windowed layers, averaged over the layers (the module doc)."""
        squared: np.ndarray = np.asarray(lengths).astype(np.float64) ** 2
        if self.sliding_window is None:
            return squared
        share = window_share(lengths, self.sliding_window)
        n, total = self.windowed_layers, self.num_layers
        scaled: np.ndarray = squared * (share if n == total else (n * share + (total - n)) / total)
        return scaled

    # ---- parameter counts -------------------------------------------------------------------
    @property
    def q_width(self) -> int:
        """Width of the query projection output (num_heads * head_dim)."""
        return self.num_heads * self.head_dim

    @property
    def kv_width(self) -> int:
        """Width of the key (or value) projection output (num_kv_heads * head_dim)."""
        return self.num_kv_heads * self.head_dim

    @property
    def attention_params_per_layer(self) -> int:
        """Q, K, V, O projections plus QK-norm weights."""
        proj = self.hidden * (self.q_width + 2 * self.kv_width) + self.q_width * self.hidden
        return proj + (2 * self.head_dim if self.qk_norm else 0)

    @property
    def ffn_matrices(self) -> int:
        """Weight matrices of the dense FFN: 3 gated (gate, up, down), 2 plain (up, down)."""
        return 3 if self.ffn_gated else 2

    @property
    def ffn_params_per_layer(self) -> int:
        """All FFN parameters of one layer (every expert and the router for MoE)."""
        if self.moe is None:
            return self.ffn_matrices * self.hidden * self.dense_ffn
        moe = self.moe
        experts = moe.num_experts * 3 * self.hidden * moe.expert_ffn
        return experts + self.hidden * moe.num_experts + 3 * self.hidden * moe.shared_expert_ffn

    @property
    def active_ffn_params_per_layer(self) -> int:
        """FFN parameters one token touches (top-k experts, router, shared expert)."""
        if self.moe is None:
            return self.ffn_params_per_layer
        moe = self.moe
        routed = moe.top_k * 3 * self.hidden * moe.expert_ffn
        return routed + self.hidden * moe.num_experts + 3 * self.hidden * moe.shared_expert_ffn

    @property
    def expert_params_per_layer(self) -> int:
        """Routed-expert parameters of one layer (sharded over the expert-parallel group)."""
        if self.moe is None:
            return 0
        return self.moe.num_experts * 3 * self.hidden * self.moe.expert_ffn

    @property
    def params_per_layer(self) -> int:
        """All parameters of one decoder layer (including its two RMSNorms)."""
        return self.attention_params_per_layer + self.ffn_params_per_layer + 2 * self.hidden

    @property
    def embedding_params(self) -> int:
        """Input embedding, output head (unless tied) and the final norm."""
        heads = 1 if self.tie_embeddings else 2
        return heads * self.vocab * self.hidden + self.hidden

    @property
    def total_params(self) -> int:
        """Total parameter count."""
        return self.num_layers * self.params_per_layer + self.embedding_params

    @property
    def active_params(self) -> int:
        """Parameters touched by one token (the published "activated" count includes embeddings)."""
        per_layer = self.attention_params_per_layer + self.active_ffn_params_per_layer + 2 * self.hidden
        return self.num_layers * per_layer + self.embedding_params

    def forward_matmuls(self) -> tuple[tuple[float, float], ...]:
        """(FLOPs, output elements) per token of each forward matmul of one layer, in execution order:
        Q, K, V, the attention output projection, then the FFN: gate, up, down (up, down for a plain
        MLP); for MoE the router, then the routed experts' gate, up and down (top-k of each, one grouped
        GEMM each) and a shared expert's. What op-level checkpointing counts (every second matmul is
        recomputed, :class:`~nspsim.specs.training.Checkpointing`); the FLOPs sum to
        :attr:`dense_flops_per_token_layer` (QK-norm weights aside)."""
        h, q, kv = float(self.hidden), float(self.q_width), float(self.kv_width)
        attn = ((2 * h * q, q), (2 * h * kv, kv), (2 * h * kv, kv), (2 * q * h, h))
        if self.moe is None:
            f = float(self.dense_ffn)
            gate = ((2 * h * f, f),) if self.ffn_gated else ()
            return attn + gate + ((2 * h * f, f), (2 * f * h, h))
        moe, k = self.moe, float(self.moe.top_k)
        fe = k * moe.expert_ffn
        routed = ((2 * h * fe, fe), (2 * h * fe, fe), (2 * fe * h, k * h))
        shared: tuple[tuple[float, float], ...] = ()
        if moe.shared_expert_ffn:
            sh = float(moe.shared_expert_ffn)
            shared = ((2 * h * sh, sh), (2 * h * sh, sh), (2 * sh * h, h))
        return attn + ((2 * h * moe.num_experts, float(moe.num_experts)),) + routed + shared

    # ---- FLOPs --------------------------------------------------------------------------------
    @property
    def dense_flops_per_token_layer(self) -> float:
        """Forward matmul FLOPs per token per layer outside the attention core (2 per MAC)."""
        return 2.0 * (self.attention_params_per_layer + self.active_ffn_params_per_layer)

    @property
    def head_flops_per_token(self) -> float:
        """Forward FLOPs per token of the output head (logits), once per step."""
        return 2.0 * self.vocab * self.hidden

    def attention_flops(self, sum_sq_lengths: float) -> float:
        """Forward causal attention-core FLOPs of one layer for samples with sum of L_j^2 given
        (:func:`causal_attention_flops` with this model's query width)."""
        return causal_attention_flops(sum_sq_lengths, self.q_width)

    @property
    def max_ulysses_degree(self) -> int:
        """The largest admissible Ulysses SP degree: the largest power of two such that it and every
        smaller one are admissible (:meth:`admissible_degree`), since an SP tree holds every power
        of two up to its spmax. 28 heads: 4; 6 heads: 2."""
        deg = 1
        while self.admissible_degree(deg * 2):
            deg *= 2
        return deg

    def admissible_degree(self, degree: int) -> bool:
        """Whether Ulysses SP at ``degree`` can split this model's heads (:func:`ulysses_admits`)."""
        return ulysses_admits(self.num_heads, self.num_kv_heads, degree)

    def kv_heads_at(self, degree: int) -> int:
        """KV heads per rank after the Ulysses all-to-all; replicated when degree > num_kv_heads."""
        return max(self.num_kv_heads, degree) // degree


def qwen3_30b_a3b() -> ModelSpec:
    """Qwen3-30B-A3B (published: 30.5B total, 3.3B activated; 48 layers, 128 experts, top-8)."""
    return ModelSpec(
        name="qwen3-30b-a3b",
        num_layers=48,
        hidden=2048,
        num_heads=32,
        num_kv_heads=4,
        head_dim=128,
        vocab=151_936,
        moe=MoESpec(num_experts=128, top_k=8, expert_ffn=768),
    )


def qwen3_235b_a22b() -> ModelSpec:
    """Qwen3-235B-A22B (published: 235B total, 22B activated; 94 layers, 128 experts, top-8)."""
    return ModelSpec(
        name="qwen3-235b-a22b",
        num_layers=94,
        hidden=4096,
        num_heads=64,
        num_kv_heads=4,
        head_dim=128,
        vocab=151_936,
        moe=MoESpec(num_experts=128, top_k=8, expert_ffn=1536),
    )


def tiny() -> ModelSpec:
    """A 2-layer dense model small enough for CPU multi-rank runtime tests."""
    return ModelSpec(
        name="tiny",
        num_layers=2,
        hidden=64,
        num_heads=8,
        num_kv_heads=2,
        head_dim=8,
        vocab=256,
        dense_ffn=128,
        tie_embeddings=True,
    )


def tiny_moe() -> ModelSpec:
    """A 2-layer MoE model (4 experts, top-2) for CPU runtime tests of the MoE path."""
    return ModelSpec(
        name="tiny-moe",
        num_layers=2,
        hidden=64,
        num_heads=8,
        num_kv_heads=2,
        head_dim=8,
        vocab=256,
        moe=MoESpec(num_experts=4, top_k=2, expert_ffn=32),
        tie_embeddings=True,
    )


MODEL_PRESETS: Mapping[str, Callable[[], ModelSpec]] = {
    "qwen3-30b-a3b": qwen3_30b_a3b,
    "qwen3-235b-a22b": qwen3_235b_a22b,
    "tiny": tiny,
    "tiny-moe": tiny_moe,
}


def get_model(name: str) -> ModelSpec:
    """Model preset by name; ``ValueError`` listing the known names otherwise."""
    try:
        return MODEL_PRESETS[name]()
    except KeyError:
        raise ValueError(f"unknown model preset {name!r} (known: {', '.join(MODEL_PRESETS)})") from None
