"""phi3 (Phi-3 and Phi-3.5 mini, Phi-4 mini with its partial rotary: rope.dimension_count < head_dim): llama's block with Q, K and V as the rows of
one fused attn_qkv.weight (Q, then K, then V) and gate and up as the halves of one fused ffn_up.weight (gate
first), NeoX rope, SwiGLU, no biases. The fused tensors are read in place: each product gets its rows
(spec.py's rows_ref). Following llama.cpp (models/phi3.cpp): Q is scaled by 1/sqrt(head_dim) before attention,
which is attn_scale here; the file's sliding window is ignored as llama.cpp ignores it.

LongRoPE (the 128k-context variants): rope_factors_short.weight divides each frequency, or rope_factors_long.weight
when a sequence's context exceeds rope.scaling.original_context_length (ModelSpec.for_context, llama.cpp's
get_rope_factors), and rope.scaling.attn_factor multiplies cos and sin (RopeSpec.mscale) either way.
"""

from __future__ import annotations

import dataclasses

from .spec import MetadataView, ModelSpec, decoder_spec

ARCH = "phi3"


def spec(f) -> ModelSpec:
    m = MetadataView(f, ARCH)
    factors = ("rope_factors_long.weight", "rope_factors_short.weight")
    s = decoder_spec(
        m,
        neox=True,
        ffn_act="silu",
        attn_bias="none",
        qk_norm=False,
        sandwich_norms=False,
        fused=True,
        own_tensors=factors,
    )
    has = [name in f.tensors for name in factors]
    if not any(has) or s.rope.freq_factors:  # llama.cpp prefers rope_freqs.weight where a file has both
        return s
    if not all(has):
        missing = "rope_factors_short.weight" if has[0] else "rope_factors_long.weight"
        raise m.fail(missing, "LongRoPE needs both the long and the short factors; this one is missing")
    short = m.tensor("rope_factors_short.weight", (s.rope.n_rot // 2,))
    long = m.tensor("rope_factors_long.weight", (s.rope.n_rot // 2,))
    orig = m.positive_int("rope.scaling.original_context_length", s.context_length)
    rope = dataclasses.replace(s.rope, freq_factors=short, freq_factors_long=long, long_context=orig)
    return dataclasses.replace(s, rope=rope)
