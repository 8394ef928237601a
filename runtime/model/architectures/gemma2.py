"""gemma2 (Gemma 2): GeGLU, NeoX rope, sandwich norms, soft-capped attention and output logits, and sliding windows
on every other layer. Following llama.cpp (llama-model.cpp, models/gemma2-iswa.cpp):
- embeddings are scaled by sqrt(d_model); the output is tied to token_embd.weight.
- every norm weight already includes gemma's +1 (the converter's).
- attn_logit_softcapping / final_logit_softcapping: s = cap * tanh(s / cap) (decoder_spec reads both).
- with `gemma2.attention.sliding_window` > 0, layer i is sliding when i is even (llama.cpp's swa pattern 2); every
  layer uses rope.freq_base.
- attn_scale is 1/sqrt(head_dim), except for the 46-layer 27B: 1/sqrt(d_model / n_head).
"""

from __future__ import annotations

from .gemma3 import gemma_windows
from .spec import MetadataView, ModelSpec, decoder_spec

ARCH = "gemma2"
SWA_PERIOD = 2
N_LAYERS_27B = 46


def spec(f) -> ModelSpec:
    m = MetadataView(f, ARCH)
    s = decoder_spec(m, neox=True, ffn_act="gelu_tanh", attn_bias="none", qk_norm=False, sandwich_norms=True)
    return gemma_windows(m, s, [i % SWA_PERIOD == 0 for i in range(s.n_layers)], N_LAYERS_27B)
