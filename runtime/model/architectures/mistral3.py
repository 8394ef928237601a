"""mistral3 (Ministral 3 and Mistral Small 3.x text models): llama's block (normal rope on the converter's permuted Q
and K, SwiGLU, optional output bias) with YaRN rope scaling and, where the file gives
`mistral3.attention.temperature_scale`, Llama 4's attention temperature: each query row is multiplied by
1 + temperature_scale * ln(floor(pos / orig_ctx) + 1), orig_ctx YaRN's original context (the model's context when
the file gives none), so rows within it are unchanged. Following llama.cpp (models/mistral3.cpp): its YaRN reads the
file's beta and log-multiplier keys.
"""

from __future__ import annotations

import dataclasses

from .spec import MetadataView, ModelSpec, decoder_spec

ARCH = "mistral3"


def spec(f) -> ModelSpec:
    m = MetadataView(f, ARCH)
    s = decoder_spec(
        m, neox=False, ffn_act="silu", attn_bias="optional", qk_norm=False, sandwich_norms=False, yarn_keys=True
    )
    temp = m.number("attention.temperature_scale", 0.0)
    return dataclasses.replace(s, attn_temp_scale=temp, attn_temp_floor=s.rope.yarn_orig_ctx if temp else 0)
