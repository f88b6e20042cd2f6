"""Memory-bound element-wise work of a decoder layer and of the loss, as HBM traffic.

Norms, residual adds, rotary embeddings, QK-norm, the gated activation, MoE token permutation and the
cross-entropy loss do a few FLOPs per element: their time is the bytes they read and write at the
GPU's achieved HBM bandwidth. The traffic is counted op by op from what each kernel reads and
writes, in *elements* of the activation dtype (an fp32 intermediate counts as two), per token:

==========================  ===========================  =================================
op (forward, per layer)     fused kernels                op by op (eager PyTorch)
==========================  ===========================  =================================
residual add + RMSNorm, x2  read x, r; write x+r, norm   add: 3h; norm in fp32: 18h
                            = 4h each                    (cast, pow, mean, scale, cast back,
                                                         weight: 9 passes of h, fp32 = 2)
RoPE on Q and K             read + write: 2(q + kv)      complex view, multiply, cast: 8(q + kv)
QK-norm (Qwen3)             fused into RoPE: 0           18 per element of q + kv, as RMSNorm
SwiGLU (gate, up -> act)    read 2f, write f = 3f        silu 2f + multiply 3f = 5f
GELU (a plain MLP)          read f, write f = 2f         2f
MoE permute, combine        permute reads h, writes k*h;  the same (index copies either way)
                            combine the reverse: 2(h+kh)
==========================  ===========================  =================================

with h the hidden size, q and kv the query and key/value widths, f the FFN width a token uses (the
dense FFN, or top-k x expert FFN plus a shared expert) and k the MoE top-k. Backward moves twice the
forward traffic (each op reads the incoming gradient and its saved input and writes the outgoing
gradient). The loss runs once per token per step over the vocabulary V: fused (a chunked or
compiled cross-entropy) reads the bf16 logits once forward and reads them and writes their gradient
backward (V, 2V); eager PyTorch casts the logits to fp32, takes log-softmax and its gradient in fp32
and casts back (7V each way).

Trade-off: counting bytes per op is exact for bandwidth-bound kernels and needs no per-op profile;
it ignores caches (a fused add + norm of a small hidden size may stay in L2) and launch gaps, which
a GPU hides behind queued kernels. The achieved bandwidth is the GPU spec's ``hbm_bw`` times its
measured ``hbm_stream_efficiency`` (BabelStream triad, :mod:`nspsim.specs.cluster`).
"""

from __future__ import annotations

from dataclasses import dataclass

from nspsim.specs.model import ModelSpec

EAGER_NORM_PASSES = 18.0
"""Element reads + writes per hidden element of an eager fp32 RMSNorm (module table)."""
EAGER_ROPE_PASSES = 8.0
FUSED_ROPE_PASSES = 2.0
EAGER_ADD_PASSES = 3.0
FUSED_ADD_NORM_PASSES = 4.0
EAGER_SWIGLU_PASSES = 5.0
FUSED_SWIGLU_PASSES = 3.0
BACKWARD_TRAFFIC_RATIO = 2.0
FUSED_LOSS = (1.0, 2.0)
EAGER_LOSS = (7.0, 7.0)


@dataclass(frozen=True)
class ElementwiseTraffic:
    """Elements moved per token: ``fwd`` and ``bwd`` of one decoder layer, ``ffn_fwd`` the part of the
    forward inside the FFN block (what selective checkpointing recomputes), ``loss`` (fwd, bwd) of the
    cross-entropy once per step."""

    fwd: float
    bwd: float
    ffn_fwd: float
    loss: tuple[float, float]


def ffn_width_per_token(model: ModelSpec) -> float:
    """FFN activations one token produces: the dense FFN, or top-k routed experts plus a shared one."""
    if model.moe is None:
        return float(model.dense_ffn)
    return float(model.moe.top_k * model.moe.expert_ffn + model.moe.shared_expert_ffn)


def elementwise_traffic(model: ModelSpec, fused: bool) -> ElementwiseTraffic:
    """The module table's counts for ``model``, fused or op by op."""
    h, q, kv, f = float(model.hidden), float(model.q_width), float(model.kv_width), ffn_width_per_token(model)
    if fused:
        add_norm = FUSED_ADD_NORM_PASSES * h
        rope = FUSED_ROPE_PASSES * (q + kv)
        swiglu = (FUSED_SWIGLU_PASSES if model.ffn_gated else 2.0) * f
        loss = FUSED_LOSS
    else:
        add_norm = (EAGER_ADD_PASSES + EAGER_NORM_PASSES) * h
        rope = EAGER_ROPE_PASSES * (q + kv) + (EAGER_NORM_PASSES * (q + kv) if model.qk_norm else 0.0)
        swiglu = (EAGER_SWIGLU_PASSES if model.ffn_gated else 2.0) * f
        loss = EAGER_LOSS
    moe = 0.0 if model.moe is None else 2.0 * (h + model.moe.top_k * h)  # permute h -> k h, combine k h -> h
    ffn = add_norm + swiglu + moe
    fwd = add_norm + rope + ffn
    return ElementwiseTraffic(
        fwd=fwd, bwd=BACKWARD_TRAFFIC_RATIO * fwd, ffn_fwd=ffn, loss=(loss[0] * model.vocab, loss[1] * model.vocab)
    )
