"""qwen3 (Qwen3 dense models): qwen2 without the q/k/v biases and with a per-head RMSNorm of Q and K before rope
(attn_q_norm / attn_k_norm, as gemma3's), NeoX rope, SwiGLU; head_dim from attention.key_length (it differs from
d_model / n_head in the small models); the output tied to token_embd.weight when the file has no output.weight.
Following llama.cpp (models/qwen3.cpp).
"""

from __future__ import annotations

from .spec import MetadataView, ModelSpec, decoder_spec

ARCH = "qwen3"


def spec(f) -> ModelSpec:
    m = MetadataView(f, ARCH)
    return decoder_spec(m, neox=True, ffn_act="silu", attn_bias="none", qk_norm=True, sandwich_norms=False)
