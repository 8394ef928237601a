"""qwen2 (Qwen2, Qwen2.5, Qwen2.5-Coder): llama with q/k/v biases and NeoX rope.

NeoX rope rotates pairs (i, i + head_dim/2). The output projection has no bias; output.weight is
present in most files, token_embd.weight is reused when it is not.
"""

from __future__ import annotations

from .spec import MetadataView, ModelSpec, decoder_spec

ARCH = "qwen2"


def spec(f) -> ModelSpec:
    m = MetadataView(f, ARCH)
    return decoder_spec(m, neox=True, ffn_act="silu", attn_bias="required", qk_norm=False, sandwich_norms=False)
