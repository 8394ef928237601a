"""gpt-oss (OpenAI's open-weight gpt-oss-20b and -120b; llama.cpp's LLM_ARCH_OPENAI_MOE): a mixture of experts with
- attention: q, k, v and output biases, NeoX rope with YaRN (the files say type yarn, factor 32 over 4,096
  positions), attn_scale 1/sqrt(head_dim), a learned sink logit per head (attn_sinks: the softmax counts it and
  gives its share to no value), and a sliding window on every other layer (even layers, llama.cpp's pattern 2, or
  the file's attention.sliding_window_pattern);
- the feed-forward's norm named post_attention_norm (it is the pre-FFN norm, not a sandwich norm);
- experts: the router's logits plus its bias, the expert_used_count largest chosen and weighted by the softmax of
  those logits alone; each expert's gate and up products plus its biases through the clamped SwiGLU (swiglu_oai),
  its down product plus its bias. Expert weights are MXFP4 in the released files.
Following llama.cpp (models/openai-moe.cpp, build_moe_ffn with SOFTMAX_WEIGHT gating and LLM_FFN_SWIGLU_OAI_MOE).
The harmony chat format's channels are split by the server's reasoning splitter.
"""

from __future__ import annotations

import dataclasses

from .gemma3 import swa_pattern
from .spec import MetadataView, ModelSpec, decoder_spec

ARCH = "gpt-oss"
SWA_PERIOD = 2


def spec(f) -> ModelSpec:
    m = MetadataView(f, ARCH)
    s = decoder_spec(
        m,
        neox=True,
        ffn_act="swiglu_oai",
        attn_bias="optional",
        qk_norm=False,
        sandwich_norms=False,
        moe=True,
        ffn_norm="post_attention_norm",
        attn_sinks=True,
        expert_bias=True,
    )
    window = m.positive_int("attention.sliding_window")
    swa_base = m.number("rope.freq_base_swa", s.rope.freq_base)
    sliding = swa_pattern(m, s.n_layers, SWA_PERIOD)
    layers = tuple(
        dataclasses.replace(layer, sliding=True, rope_base=swa_base) if on else layer
        for layer, on in zip(s.layers, sliding)
    )
    return dataclasses.replace(s, layers=layers, sliding_window=window, expert_weights_softmax=True)
