"""phi3 (Phi-3 and Phi-3.5 mini, Phi-4 mini with its partial rotary: rope.dimension_count < head_dim): llama's block with Q, K and V as the rows of
one fused attn_qkv.weight (Q, then K, then V) and gate and up as the halves of one fused ffn_up.weight (gate
first), NeoX rope, SwiGLU, no biases. The fused tensors are read in place: each product gets its rows
(spec.py's rows_ref). Following llama.cpp (models/phi3.cpp): Q is scaled by 1/sqrt(head_dim) before attention,
which is attn_scale here; the file's sliding window is ignored as llama.cpp ignores it.

Not yet: LongRoPE (rope_factors_long / rope_factors_short: the 128k-context variants, whose factors switch with
the context length and come with a magnitude scaling), refused by name.
"""

from __future__ import annotations

from .spec import MetadataView, ModelSpec, decoder_spec

ARCH = "phi3"


def spec(f) -> ModelSpec:
    m = MetadataView(f, ARCH)
    for name in ("rope_factors_long.weight", "rope_factors_short.weight"):
        if name in f.tensors:
            raise m.fail(name, "LongRoPE (the 128k-context Phi-3 variants) is not supported yet")
    return decoder_spec(m, neox=True, ffn_act="silu", attn_bias="none", qk_norm=False, sandwich_norms=False, fused=True)
