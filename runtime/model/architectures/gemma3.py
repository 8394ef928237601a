"""gemma3 (Gemma 3 text models): GeGLU, NeoX rope, Q/K RMSNorm, sandwich norms, interleaved sliding windows.

Following llama.cpp (llama-model.cpp, models/gemma3.cpp):
- embeddings are scaled by sqrt(d_model); the output is tied to token_embd.weight.
- every norm weight (attn, q, k, post-attention, ffn, post-ffw, output) already includes gemma's +1.
- attn_scale is 1/sqrt(head_dim) (query_pre_attn_scalar = head_dim), except for the 62-layer 27B,
  whose query_pre_attn_scalar is d_model / n_head; the file has no key for it.
- with `gemma3.attention.sliding_window` > 0, layer i is sliding unless (i + 1) % 6 == 0 (the period comes
  from `gemma3.attention.sliding_window_pattern` when present: an integer period or a per-layer boolean
  array); a sliding layer attends to the positions p with q_pos - p < sliding_window and uses rope base
  `gemma3.rope.freq_base_swa` (default 10000) without rope scaling; global layers use rope.freq_base and
  the file's rope scaling.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from .spec import MetadataView, ModelSpec, decoder_spec

ARCH = "gemma3"
DEFAULT_SWA_PERIOD = 6
DEFAULT_SWA_ROPE_BASE = 10000.0
N_LAYERS_27B = 62


def swa_pattern(m: MetadataView, n_layers: int, default_period: int) -> list[bool]:
    """Which layers slide (llama.cpp's load_swa_pattern): the file's attention.sliding_window_pattern, an integer
    period (layer i slides when i % period < period - 1; 0: all) or per-layer flags, else default_period."""
    key = m.key("attention.sliding_window_pattern")
    v = m.raw("attention.sliding_window_pattern")
    if v is None:
        v = default_period
    if isinstance(v, np.ndarray):
        if v.ndim != 1 or len(v) != n_layers or v.dtype.kind not in "biu":
            raise m.fail(key, f"expected {n_layers} per-layer flags, got an array of {v.dtype} with shape {v.shape}")
        return [bool(x) for x in v]
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise m.fail(key, f"expected a period or per-layer flags, got {v!r}")
    return [v == 0 or i % v < v - 1 for i in range(n_layers)]


def gemma_windows(m: MetadataView, s: ModelSpec, sliding: list[bool], n_layers_27b: int, local_base=None) -> ModelSpec:
    """What gemma2 and gemma3 add to the decoder block: embeddings scaled by sqrt(d_model), attn_scale from
    query_pre_attn_scalar (head_dim, or d_model / n_head for the 27B of n_layers_27b layers), and with
    attention.sliding_window > 0 the layers flagged in `sliding` attending to that window (at rope base
    local_base, unscaled, where one is given)."""
    window = m.integer("attention.sliding_window", 0)
    if window < 0:
        raise m.fail(m.key("attention.sliding_window"), f"must not be negative, got {window}")
    layers = s.layers
    if window > 0:
        local = {} if local_base is None else {"rope_base": local_base, "rope_scale": 1.0}
        layers = tuple(replace(layer, sliding=True, **local) if on else layer for layer, on in zip(layers, sliding))
    qpas = s.d_model // s.n_head if s.n_layers == n_layers_27b else s.head_dim
    return replace(
        s, embed_scale=math.sqrt(s.d_model), attn_scale=1.0 / math.sqrt(qpas), sliding_window=window, layers=layers
    )


def spec(f) -> ModelSpec:
    m = MetadataView(f, ARCH)
    s = decoder_spec(m, neox=True, ffn_act="gelu_tanh", attn_bias="none", qk_norm=True, sandwich_norms=True)
    local_base = m.number("rope.freq_base_swa", DEFAULT_SWA_ROPE_BASE)
    if local_base <= 0:
        raise m.fail(m.key("rope.freq_base_swa"), f"must be positive, got {local_base}")
    return gemma_windows(m, s, swa_pattern(m, s.n_layers, DEFAULT_SWA_PERIOD), N_LAYERS_27B, local_base)
