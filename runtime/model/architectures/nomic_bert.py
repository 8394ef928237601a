"""nomic-bert (nomic-embed-text v1 / v1.5; llama.cpp's LLM_ARCH_NOMIC_BERT): bert.py's encoder with NeoX rope
instead of learned positions, Q, K and V as the rows of one fused attn_qkv.weight, and a SwiGLU feed-forward
(silu(h @ ffn_gate) * (h @ ffn_up)) @ ffn_down, no biases; post-norm LayerNorms and token_types row 0 as BERT's.
Pooling from nomic-bert.pooling_type (mean in the released files).
"""

from __future__ import annotations

from .bert import encoder_spec
from .spec import MetadataView, ModelSpec

ARCH = "nomic-bert"


def spec(f) -> ModelSpec:
    return encoder_spec(MetadataView(f, ARCH), rope=True, gated=True)
