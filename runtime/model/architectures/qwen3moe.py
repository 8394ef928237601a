"""qwen3moe (Qwen3 mixture-of-experts: Qwen3-30B-A3B, Qwen3-Coder-30B-A3B): qwen3's attention (per-head Q/K RMSNorm
before NeoX rope, no biases) and, in every layer, a mixture of experts instead of the dense feed-forward: a softmax
router over expert_count experts, the expert_used_count most probable renormalised to sum 1, each a SwiGLU of
expert_feed_forward_length. No shared expert. Following llama.cpp (models/qwen3moe.cpp, build_moe_ffn with
norm_w and softmax gating).
"""

from __future__ import annotations

import dataclasses

from .spec import MetadataView, ModelSpec, decoder_spec

ARCH = "qwen3moe"


def spec(f) -> ModelSpec:
    m = MetadataView(f, ARCH)
    s = decoder_spec(m, neox=True, ffn_act="silu", attn_bias="none", qk_norm=True, sandwich_norms=False, moe=True)
    return dataclasses.replace(s, expert_weights_norm=True)
