"""smollm3 (SmolLM3): llama (SwiGLU, normal rope, GQA) with no rope at all on every fourth layer (NoPE: layer i
when (i + 1) % 4 == 0, llama.cpp's n_no_rope_layer_step, which the file does not carry). A NoPE layer is a layer
whose rope_scale is 0: every rotation angle is 0, so rope multiplies by cos 0 = 1 and adds sin 0 * x = 0, exactly
the identity. Following llama.cpp (models/smollm3.cpp).
"""

from __future__ import annotations

from dataclasses import replace

from .spec import MetadataView, ModelSpec, decoder_spec

ARCH = "smollm3"
NO_ROPE_LAYER_STEP = 4


def spec(f) -> ModelSpec:
    m = MetadataView(f, ARCH)
    s = decoder_spec(m, neox=False, ffn_act="silu", attn_bias="optional", qk_norm=False, sandwich_norms=False)
    layers = tuple(
        replace(layer, rope_scale=0.0) if (i + 1) % NO_ROPE_LAYER_STEP == 0 else layer
        for i, layer in enumerate(s.layers)
    )
    return replace(s, layers=layers)
