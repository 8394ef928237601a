"""llama (llama 1-3, SmolLM, TinyLlama, Mistral-style dense models): RMSNorm, SwiGLU, normal rope.

llama.cpp's converter permutes the Q and K rows so that normal rope (pairs (2i, 2i+1)) applies; the
optional q/k/v/output biases and llama 3's rope_freqs.weight are taken when the file has them.
"""

from __future__ import annotations

from .spec import MetadataView, ModelSpec, decoder_spec

ARCH = "llama"


def spec(f) -> ModelSpec:
    m = MetadataView(f, ARCH)
    return decoder_spec(m, neox=False, ffn_act="silu", attn_bias="optional", qk_norm=False, sandwich_norms=False)
