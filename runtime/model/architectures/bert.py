"""bert (BERT-family embedding models: all-MiniLM, bge, e5, gte, ...; llama.cpp's LLM_ARCH_BERT): an encoder.

    h = token_embd[ids] + token_types[0] + position_embd[pos]          # learned positions, no rope
    h = layer_norm(h, token_embd_norm)
    per layer: h = layer_norm(h + attention(h), attn_output_norm)      # bidirectional, q/k/v/o with biases
               h = layer_norm(h + ffn(h), layer_output_norm)           # ffn = gelu(h @ up + b) @ down + b
    embeddings = pool(h)                                               # {arch}.pooling_type: mean or cls

That is spec.py's block with layer_norm, post_norm and bidirectional set: a post-norm layer's output norm is the
next layer's input norm (attn_norm: each norm's output becomes the residual stream), so attn_norm of layer 0 is
token_embd_norm, that of layer i the layer_output_norm of layer i - 1, ffn_norm the layer's attn_output_norm and
output_norm the last layer's layer_output_norm. GELU is the tanh approximation, as llama.cpp computes BERT's
(ggml_gelu). There is no LM head: the model gives hidden states (embeddings) only, and generating is refused.

encoder_spec is shared with nomic_bert.py. Not supported (refused by name): classifier heads (cls / cls.output:
rerankers), fused QKV with a bias, q/k norms (jina-bert), causal attention.
"""

from __future__ import annotations

import math

from .spec import LayerSpec, MetadataView, ModelSpec, RopeSpec, refuse_unused, rows_ref

ARCH = "bert"


def spec(f) -> ModelSpec:
    return encoder_spec(MetadataView(f, ARCH), rope=False, gated=False)


def encoder_spec(m: MetadataView, *, rope: bool, gated: bool) -> ModelSpec:
    """rope: NeoX rope on every layer (nomic-bert) instead of learned positions (position_embd.weight); gated:
    a SwiGLU feed-forward (ffn_gate, ffn_up, ffn_down) instead of GELU over ffn_up."""
    if m.raw("attention.causal") is True:
        raise m.fail(m.key("attention.causal"), f"causal attention is not supported by {m.arch} (an encoder)")
    n_layers = m.positive_int("block_count")
    d_model = m.positive_int("embedding_length")
    n_ff = m.positive_int("feed_forward_length")
    n_head = m.positive_int("attention.head_count")
    n_kv_head = m.positive_int("attention.head_count_kv", n_head)
    if n_head % n_kv_head:
        raise m.fail(m.key("attention.head_count_kv"), f"{n_kv_head} does not divide head_count {n_head}")
    if d_model % n_head:
        raise m.fail(m.key("attention.head_count"), f"{n_head} does not divide embedding_length {d_model}")
    head_dim = d_model // n_head
    context_length = m.positive_int("context_length")
    eps = m.number("attention.layer_norm_epsilon")
    if not 0 < eps < 1:
        raise m.fail(m.key("attention.layer_norm_epsilon"), f"out of range: {eps}")
    for suffix in ("expert_count", "moe_every_n_layers"):
        if m.raw(suffix):
            raise m.fail(m.key(suffix), f"mixture-of-experts layers are not supported by {m.arch}")

    t_embd = m.f.tensors.get("token_embd.weight")
    if t_embd is None or len(t_embd.dims) != 2:
        raise m.fail("token_embd.weight", "tensor missing" if t_embd is None else f"expected 2 dims, got {t_embd.dims}")
    n_vocab = t_embd.dims[1]
    m.tensor("token_embd.weight", (d_model, n_vocab))
    token_types = None
    if "token_types.weight" in m.f.tensors:
        t = m.f.tensors["token_types.weight"]
        token_types = m.tensor("token_types.weight", (d_model, t.dims[1] if len(t.dims) == 2 else 0))
    position_embd = None if rope else m.tensor("position_embd.weight", (d_model, context_length))

    n_rot, freq_base, neox = head_dim, 10000.0, True
    if rope:
        n_rot = m.positive_int("rope.dimension_count", head_dim)
        if n_rot > head_dim or n_rot % 2:
            raise m.fail(m.key("rope.dimension_count"), f"{n_rot} must be even and at most the head's {head_dim} dims")
        freq_base = m.number("rope.freq_base", 10000.0)
        if freq_base <= 0:
            raise m.fail(m.key("rope.freq_base"), f"must be positive, got {freq_base}")
        if m.string("rope.scaling.type", "none") != "none":
            raise m.fail(m.key("rope.scaling.type"), f"rope scaling is not supported by {m.arch}")

    q_dim, kv_dim = n_head * head_dim, n_kv_head * head_dim

    def norm(name: str) -> tuple[str, str]:
        return m.tensor(name + ".weight", (d_model,)), m.tensor(name + ".bias", (d_model,))

    layers = []
    prev = norm("token_embd_norm")  # the input norm of layer 0; then each layer's layer_output_norm
    for i in range(n_layers):
        b = f"blk.{i}."
        if b + "attn_qkv.bias" in m.f.tensors:
            raise m.fail(b + "attn_qkv.bias", "a fused QKV bias is not supported")
        if b + "attn_qkv.weight" in m.f.tensors:
            qkv = m.tensor(b + "attn_qkv.weight", (d_model, q_dim + 2 * kv_dim))
            attn = {
                "attn_q": rows_ref(qkv, 0, q_dim),
                "attn_k": rows_ref(qkv, q_dim, q_dim + kv_dim),
                "attn_v": rows_ref(qkv, q_dim + kv_dim, q_dim + 2 * kv_dim),
            }
        else:
            attn = {
                "attn_q": m.tensor(b + "attn_q.weight", (d_model, q_dim)),
                "attn_k": m.tensor(b + "attn_k.weight", (d_model, kv_dim)),
                "attn_v": m.tensor(b + "attn_v.weight", (d_model, kv_dim)),
            }
        attn |= {
            "attn_q_bias": m.tensor(b + "attn_q.bias", (q_dim,), False),
            "attn_k_bias": m.tensor(b + "attn_k.bias", (kv_dim,), False),
            "attn_v_bias": m.tensor(b + "attn_v.bias", (kv_dim,), False),
            "attn_output_bias": m.tensor(b + "attn_output.bias", (d_model,), False),
        }
        mid = norm(b + "attn_output_norm")
        layers.append(
            LayerSpec(
                sliding=False,
                rope_base=freq_base,
                rope_scale=1.0 if rope else 0.0,  # 0: no rope (spec.py's NoPE layers)
                attn_norm=prev[0],
                attn_output=m.tensor(b + "attn_output.weight", (q_dim, d_model)),
                ffn_norm=mid[0],
                ffn_gate=m.tensor(b + "ffn_gate.weight", (d_model, n_ff)) if gated else None,
                ffn_up=m.tensor(b + "ffn_up.weight", (d_model, n_ff)),
                ffn_down=m.tensor(b + "ffn_down.weight", (n_ff, d_model)),
                attn_norm_bias=prev[1],
                ffn_norm_bias=mid[1],
                ffn_up_bias=m.tensor(b + "ffn_up.bias", (n_ff,), False),
                ffn_down_bias=m.tensor(b + "ffn_down.bias", (d_model,), False),
                **attn,
            )
        )
        prev = norm(b + "layer_output_norm")

    def all_or_none(keys: tuple[str, ...]) -> bool:
        present = [getattr(layer, k) is not None for layer in layers for k in keys]
        if any(present) and not all(present):
            raise m.fail(f"blk.0.{keys[0]}", f"biases {', '.join(keys)} must be on every layer or on none")
        return present[0]

    qkv_bias = all_or_none(("attn_q_bias", "attn_k_bias", "attn_v_bias"))
    out_bias = all_or_none(("attn_output_bias",))
    all_or_none(("ffn_up_bias",))
    all_or_none(("ffn_down_bias",))

    s = ModelSpec(
        arch=m.arch,
        n_vocab=n_vocab,
        d_model=d_model,
        n_layers=n_layers,
        n_head=n_head,
        n_kv_head=n_kv_head,
        head_dim=head_dim,
        n_ff=n_ff,
        context_length=context_length,
        rms_eps=eps,
        rope=RopeSpec(
            n_rot=n_rot,
            neox=neox,
            freq_base=freq_base,
            scaling="none",
            freq_scale=1.0,
            orig_context_length=0,
            yarn_orig_ctx=context_length,
        ),
        attn_scale=1.0 / math.sqrt(head_dim),
        ffn_act="silu" if gated else "gelu",
        embed_scale=1.0,
        sliding_window=0,
        attn_softcap=0.0,
        final_softcap=0.0,
        qkv_bias=qkv_bias,
        attn_output_bias=out_bias,
        qk_norm=False,
        post_attn_norm=False,
        post_ffn_norm=False,
        token_embd="token_embd.weight",
        output_norm=prev[0],
        output="token_embd.weight",  # no LM head: never used (an encoder gives hidden states only)
        layers=tuple(layers),
        layer_norm=True,
        post_norm=True,
        bidirectional=True,
        output_norm_bias=prev[1],
        position_embd=position_embd,
        token_types=token_types,
    )
    refuse_unused(m, s, "encoder", examples="classifier heads, q/k norms")
    return s
