"""A small model of an architecture no real test file covers (issue 34): the architecture's real metadata keys and
tensor names, random weights at Xavier's spread (1 / sqrt(row length): the residual stream keeps its scale and
two summation orders rarely flip a top-1; norms 1 + N(0, 0.1)), and a real tokenizer borrowed from a test model
of the same vocabulary family, so llama.cpp loads it as it loads the real thing and records reference logits.
Deterministic: the same arguments write the same bytes (the reference records the file's sha256).

    python models/synthetic_arch.py qwen3 OUT.gguf [--type F32|Q8_0] [--seed 0]
    write(out, "qwen3", tokenizer_from=PATH, wtype="Q8_0", seed=0) -> sha256 of the file

Needs numpy, the `gguf` package (the test extra) and localllm (to read the borrowed tokenizer).
"""

from __future__ import annotations

import argparse
import hashlib
import math
import sys
from pathlib import Path

import gguf
import numpy as np
from gguf import GGMLQuantizationType as T

# Shapes per architecture: small, but with GQA, several heads and head_dim != d_model / n_head where the
# architecture allows it. tokenizer: the test model whose vocabulary the architecture's real models use.
ARCHS = {
    "qwen3": {
        "tokenizer": "qwen2.5-coder-0.5b-instruct-q4_k_m",
        "d_model": 128,
        "n_layers": 2,
        "n_head": 4,
        "n_kv": 2,
        "head_dim": 64,  # Qwen3 sets key_length apart from d_model / n_head (128 for 2048 / 16 in the 1.7B)
        "n_ff": 320,
        "rope_base": 1000000.0,
        "eps": 1e-6,
    },
}
ARCHS["llama3"] = {  # Llama 3.x: arch "llama", rope_freqs.weight (its rope scaling), tied embeddings (1B / 3B)
    "arch": "llama",
    "tokenizer": "smollm2-135m-instruct-q4_1",
    "d_model": 128,
    "n_layers": 2,
    "n_head": 4,
    "n_kv": 2,
    "head_dim": 32,
    "n_ff": 320,
    "rope_base": 500000.0,
    "eps": 1e-5,
    "rope_freqs": True,
}
ARCHS["gemma2"] = {  # Gemma 2: soft-caps, sandwich norms, sliding windows on even layers
    "tokenizer": "gemma-3-270m-q4_k_m",
    "d_model": 128,
    "n_layers": 3,
    "n_head": 4,
    "n_kv": 2,
    "head_dim": 64,
    "n_ff": 320,
    "rope_base": 10000.0,
    "eps": 1e-6,
    "extra": [
        ("attention.sliding_window", 4, "uint32"),
        ("attn_logit_softcapping", 50.0, "float32"),
        ("final_logit_softcapping", 30.0, "float32"),
    ],
}
ARCHS["smollm3"] = {  # SmolLM3: llama with no rope on every fourth layer (layer 3 here)
    "tokenizer": "smollm2-135m-instruct-q4_1",
    "d_model": 128,
    "n_layers": 4,
    "n_head": 4,
    "n_kv": 2,
    "head_dim": 32,
    "n_ff": 320,
    "rope_base": 5000000.0,
    "eps": 1e-6,
}
ARCHS[
    "phi3"
] = {  # Phi-3: fused QKV and gate-up tensors (its own vocabulary is Llama 2's 32k; llama.cpp 0.3.36 loads a phi3
    # with the 0.5B's, not with smollm2's or gemma's: its phi3 vocabulary setup looks up tokens they lack)
    "tokenizer": "qwen2.5-coder-0.5b-instruct-q4_k_m",
    "d_model": 128,
    "n_layers": 2,
    "n_head": 4,
    "n_kv": 2,
    "head_dim": 32,
    "n_ff": 320,
    "rope_base": 10000.0,
    "eps": 1e-5,
    "extra": [("rope.dimension_count", 32, "uint32")],
    "output": True,
}
ARCHS["phi3-partial"] = {  # Phi-4 mini's shape of phi3: rope on the first 3/4 of each head only
    **ARCHS["phi3"],
    "arch": "phi3",
    "extra": [("rope.dimension_count", 24, "uint32")],
}
ARCHS["phi3-longrope"] = {  # Phi-3.5 mini's LongRoPE, scaled: factors short and long, attn_factor from the context
    # ratio as convert_hf_to_gguf computes it; original context 1024 of 4096, so llama.cpp's 512 uses the short ones
    **ARCHS["phi3"],
    "arch": "phi3",
    "longrope": True,
    "extra": [
        ("rope.dimension_count", 32, "uint32"),
        ("rope.scaling.original_context_length", 1024, "uint32"),
        ("rope.scaling.attn_factor", math.sqrt(1 + math.log(4) / math.log(1024)), "float32"),
    ],
}
ARCHS["phi3-longrope-long"] = {  # the same with an original context of 128: 512 (and the tests' 256) use the long ones
    **ARCHS["phi3-longrope"],
    "extra": [
        ("rope.dimension_count", 32, "uint32"),
        ("rope.scaling.original_context_length", 128, "uint32"),
        ("rope.scaling.attn_factor", math.sqrt(1 + math.log(32) / math.log(128)), "float32"),
    ],
}
ARCHS["qwen3moe"] = {  # Qwen3-MoE (30B-A3B's shape of layer, scaled): qwen3's attention, 8 experts, 3 per token
    **ARCHS["qwen3"],
    "n_ff": 256,  # feed_forward_length, which the real files carry beside the experts' width
    "n_ff_exp": 64,
    "n_expert": 8,
    "n_expert_used": 3,
    "extra": [
        ("expert_count", 8, "uint32"),
        ("expert_used_count", 3, "uint32"),
        ("expert_feed_forward_length", 64, "uint32"),
    ],
}
ARCHS["qwen3moe-bench"] = {  # the MoE speed benchmark's model: Qwen3-30B-A3B's width, expert width and top-8, with
    # 64 experts instead of 128 and 8 layers instead of 48 (1.4 GB at Q4_0); smollm2's 49k vocabulary keeps the head
    # (tied) from outweighing the experts a token reads, as in the real model
    "arch": "qwen3moe",
    "tokenizer": "smollm2-135m-instruct-q4_1",
    "d_model": 2048,
    "n_layers": 8,
    "n_head": 32,
    "n_kv": 4,
    "head_dim": 64,
    "n_ff": 6144,
    "n_ff_exp": 768,
    "n_expert": 64,
    "n_expert_used": 8,
    "rope_base": 1000000.0,
    "eps": 1e-6,
    "extra": [
        ("expert_count", 64, "uint32"),
        ("expert_used_count", 8, "uint32"),
        ("expert_feed_forward_length", 768, "uint32"),
    ],
}
# YaRN over a tiny original context (16 positions), so the test texts' positions reach the part of the ramp and the
# attention temperature that only long contexts see in a real file
_YARN = [
    ("rope.scaling.type", "yarn", "string"),
    ("rope.scaling.factor", 4.0, "float32"),
    ("rope.scaling.original_context_length", 16, "uint32"),
]
ARCHS["qwen3-yarn"] = {  # Qwen3 with YaRN as its model cards enable it (magnitude 1 + 0.1 ln 4 on cos and sin)
    **ARCHS["qwen3"],
    "arch": "qwen3",
    "extra": _YARN,
}
ARCHS["mistral3"] = {  # Ministral 3: llama's block, YaRN with its betas and log multiplier, attention temperature
    "tokenizer": "smollm2-135m-instruct-q4_1",
    "d_model": 128,
    "n_layers": 2,
    "n_head": 4,
    "n_kv": 2,
    "head_dim": 32,
    "n_ff": 320,
    "rope_base": 1000000.0,
    "eps": 1e-5,
    "extra": [
        *_YARN,
        ("rope.scaling.yarn_beta_fast", 16.0, "float32"),
        ("rope.scaling.yarn_beta_slow", 2.0, "float32"),
        ("rope.scaling.yarn_log_multiplier", 0.5, "float32"),
        ("attention.temperature_scale", 0.5, "float32"),  # Ministral 3: 0.1; larger here to be seen
    ],
}
ARCHS["gpt-oss"] = {  # gpt-oss-20b's layer, scaled: biases everywhere, attention sinks, sliding windows on even
    # layers, YaRN, 8 experts with biases, 2 per token, the clamped SwiGLU (its clamps at 7 are not reached at Xavier's
    # spread: tests/native/test_kernels.py checks them); its o200k vocabulary is not on the index: qwen2's borrowed
    "tokenizer": "qwen2.5-coder-0.5b-instruct-q4_k_m",
    "d_model": 128,
    "n_layers": 3,
    "n_head": 4,
    "n_kv": 2,
    "head_dim": 64,
    "n_ff": 64,
    "n_ff_exp": 64,
    "n_expert": 8,
    "n_expert_used": 2,
    "rope_base": 150000.0,
    "eps": 1e-5,
    "output": True,
    # MXFP4's coarser experts move the next layers' router logits more than Q8_0 does: a wider router keeps the
    # second and third experts' gap above that noise at most positions
    "router_scale": 16.0,
    "extra": [
        ("expert_count", 8, "uint32"),
        ("expert_used_count", 2, "uint32"),
        ("expert_feed_forward_length", 64, "uint32"),
        ("attention.sliding_window", 4, "uint32"),
        *_YARN,
    ],
}
ARCHS["gpt-oss-chat"] = {  # gpt-oss's chat side: the harmony format's special tokens added to the borrowed vocabulary
    # and a harmony chat template (HARMONY_TEMPLATE), for the reply parsing and serve tests (no llama.cpp recording)
    **ARCHS["gpt-oss"],
    "arch": "gpt-oss",
    "harmony": True,
}
# gpt-oss's special tokens (o200k_harmony), appended as control tokens; <|return|> is its EOS
HARMONY_TOKENS = ("<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|return|>", "<|call|>", "<|constrain|>")
# The harmony format as gpt-oss's own template writes it (system and developer headers, tools as a TypeScript
# namespace, reasoning kept before a tool call, the tool's reply from functions.NAME), shortened: no date line, no
# built-in tools, parameters as their JSON Schema
HARMONY_TEMPLATE = """\
{%- set effort = reasoning_effort if reasoning_effort is defined else "medium" -%}
<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.
Knowledge cutoff: 2024-06

Reasoning: {{ effort }}

# Valid channels: analysis, commentary, final. Channel must be included for every message.
{%- if tools %}{{ "\\n" }}Calls to these tools must go to the commentary channel: 'functions'.{% endif %}<|end|>
{%- if messages[0].role in ("system", "developer") -%}
{%- set developer = messages[0].content -%}{%- set rest = messages[1:] -%}
{%- else -%}{%- set developer = "" -%}{%- set rest = messages -%}{%- endif -%}
{%- if developer or tools -%}
<|start|>developer<|message|>
{%- if developer %}# Instructions

{{ developer }}

{% endif -%}
{%- if tools %}# Tools

## functions

namespace functions {

{% for t in tools %}{% set f = t.function %}// {{ f.description }}
type {{ f.name }} = (_: {{ f.parameters | tojson }}) => any;

{% endfor %}} // namespace functions
{%- endif %}<|end|>
{%- endif -%}
{%- set last = namespace(name=none) -%}
{%- for m in rest -%}
{%- if m.role == "user" -%}
<|start|>user<|message|>{{ m.content }}<|end|>
{%- elif m.role == "assistant" and m.tool_calls -%}
{%- set call = m.tool_calls[0].function -%}
{%- if m.thinking %}<|start|>assistant<|channel|>analysis<|message|>{{ m.thinking }}<|end|>{% endif -%}
<|start|>assistant to=functions.{{ call.name }}<|channel|>commentary json<|message|>{{ call.arguments | tojson }}<|call|>
{%- set last.name = call.name -%}
{%- elif m.role == "assistant" -%}
<|start|>assistant<|channel|>final<|message|>{{ m.content }}<|end|>
{%- elif m.role == "tool" -%}
<|start|>functions.{{ last.name }} to=assistant<|channel|>commentary<|message|>{{ m.content | tojson }}<|end|>
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt %}<|start|>assistant{% endif -%}
"""
# Encoders (embedding models): no LM head, a WordPiece vocabulary built from a test model's (wordpiece_vocab), the
# keys and tensor names convert_hf_to_gguf writes for BERT (learned positions, q/k/v/o and feed-forward biases,
# post-norm LayerNorms with biases, GELU) and nomic-bert (fused QKV, NeoX rope, SwiGLU, no biases)
ARCHS["bert"] = {
    "tokenizer": "qwen2.5-coder-0.5b-instruct-q4_k_m",
    "encoder": True,
    "d_model": 128,
    "n_layers": 2,
    "n_head": 4,
    "n_kv": 4,
    "head_dim": 32,
    "n_ff": 512,
    "context": 512,
    "eps": 1e-12,
    "pooling": 1,  # mean (all-MiniLM, bge use mean / cls)
}
ARCHS["bert-cls"] = {**ARCHS["bert"], "arch": "bert", "pooling": 2}  # bge's CLS pooling
ARCHS["nomic-bert"] = {
    **ARCHS["bert"],
    "n_ff": 320,
    "context": 2048,
    "rope_base": 1000.0,
    "eps": 1e-12,
}
ARCHS["bert-bench"] = {  # all-MiniLM-L6-v2's shape (d 384, 6 layers, 12 heads, ffn 1536, 512 positions) for
    # `bench embed`; its 30,522-row vocabulary is the synthetic ~3k one (only looked up: an encoder has no head)
    **ARCHS["bert"],
    "arch": "bert",
    "d_model": 384,
    "n_layers": 6,
    "n_head": 12,
    "n_kv": 12,
    "head_dim": 32,
    "n_ff": 1536,
}
# MXFP4: the experts' matrices in MXFP4, the others in Q8_0 (as the released gpt-oss files)
WEIGHT_TYPES = {"F32": T.F32, "F16": T.F16, "Q8_0": T.Q8_0, "Q4_0": T.Q4_0, "MXFP4": T.MXFP4}
# the router's spread: real routers are peaked, and Xavier's would leave the 3rd and 4th experts' probabilities
# often within rounding of each other (a choice two implementations may make differently)
ROUTER_SCALE = 4.0


def _encoder_tensors(arch: str, c: dict) -> dict[str, tuple[int, ...]]:
    """bert / nomic-bert: name -> numpy shape, in the order convert_hf_to_gguf writes them."""
    d, ff, qd = c["d_model"], c["n_ff"], c["n_head"] * c["head_dim"]
    out = {"token_embd.weight": (c["n_vocab"], d), "token_types.weight": (2, d)}
    if arch == "bert":
        out["position_embd.weight"] = (c["context"], d)
    out |= {"token_embd_norm.weight": (d,), "token_embd_norm.bias": (d,)}
    for i in range(c["n_layers"]):
        b = f"blk.{i}."
        if arch == "bert":
            for x in "qkv":
                out |= {b + f"attn_{x}.weight": (qd, d), b + f"attn_{x}.bias": (qd,)}
            out |= {b + "attn_output.weight": (d, qd), b + "attn_output.bias": (d,)}
        else:
            out |= {b + "attn_qkv.weight": (3 * qd, d), b + "attn_output.weight": (d, qd)}
        out |= {b + "attn_output_norm.weight": (d,), b + "attn_output_norm.bias": (d,)}
        if arch == "bert":
            out |= {b + "ffn_up.weight": (ff, d), b + "ffn_up.bias": (ff,)}
            out |= {b + "ffn_down.weight": (d, ff), b + "ffn_down.bias": (d,)}
        else:
            out |= {b + "ffn_gate.weight": (ff, d), b + "ffn_up.weight": (ff, d), b + "ffn_down.weight": (d, ff)}
        out |= {b + "layer_output_norm.weight": (d,), b + "layer_output_norm.bias": (d,)}
    return out


def _tensors(arch: str, c: dict) -> dict[str, tuple[int, ...]]:
    """name -> shape as numpy holds it ([rows, row length]); the writer reverses it into GGUF's dims."""
    if c.get("encoder"):
        return _encoder_tensors(arch, c)
    d, hd = c["d_model"], c["head_dim"]
    out = {"token_embd.weight": (c["n_vocab"], d), "output_norm.weight": (d,)}
    if c.get("output"):
        out["output.weight"] = (c["n_vocab"], d)
    qd, kvd, ff = c["n_head"] * hd, c["n_kv"] * hd, c["n_ff"]
    for i in range(c["n_layers"]):
        b = f"blk.{i}."
        down = {b + "ffn_down.weight": (d, ff)}
        if arch == "phi3":  # fused: Q K V rows in one tensor, gate and up halves in one
            attn = {b + "attn_qkv.weight": (qd + 2 * kvd, d)}
            ffn = {b + "ffn_up.weight": (2 * ff, d)}
        else:
            attn = {b + "attn_q.weight": (qd, d), b + "attn_k.weight": (kvd, d), b + "attn_v.weight": (kvd, d)}
            ffn = {b + "ffn_gate.weight": (ff, d), b + "ffn_up.weight": (ff, d)}
        if arch in ("qwen3moe", "gpt-oss"):  # the router and the experts' tensors stacked [expert, rows, row length]
            ne, fe = c["n_expert"], c["n_ff_exp"]
            ffn = {
                b + "ffn_gate_inp.weight": (ne, d),
                b + "ffn_gate_exps.weight": (ne, fe, d),
                b + "ffn_up_exps.weight": (ne, fe, d),
            }
            down = {b + "ffn_down_exps.weight": (ne, d, fe)}
        out.update(
            {
                b + "attn_norm.weight": (d,),
                **attn,
                b + "attn_output.weight": (d, qd),
                b + "ffn_norm.weight": (d,),
                **ffn,
                **down,
            }
        )
        if arch == "gpt-oss":  # biases, sinks; its feed-forward norm is called post_attention_norm
            ne, fe = c["n_expert"], c["n_ff_exp"]
            out.update(
                {
                    b + "attn_q.bias": (qd,),
                    b + "attn_k.bias": (kvd,),
                    b + "attn_v.bias": (kvd,),
                    b + "attn_output.bias": (d,),
                    b + "attn_sinks.weight": (c["n_head"],),
                    b + "post_attention_norm.weight": out.pop(b + "ffn_norm.weight"),
                    b + "ffn_gate_inp.bias": (ne,),
                    b + "ffn_gate_exps.bias": (ne, fe),
                    b + "ffn_up_exps.bias": (ne, fe),
                    b + "ffn_down_exps.bias": (ne, d),
                }
            )
        if arch in ("qwen3", "qwen3moe"):  # (qwen3moe-bench is arch qwen3moe)
            out.update({b + "attn_q_norm.weight": (hd,), b + "attn_k_norm.weight": (hd,)})
        if arch == "gemma2":
            out.update({b + "post_attention_norm.weight": (d,), b + "post_ffw_norm.weight": (d,)})
    if c.get("rope_freqs"):
        out["rope_freqs.weight"] = (hd // 2,)
    if c.get("longrope"):
        out["rope_factors_long.weight"] = out["rope_factors_short.weight"] = (hd // 2,)
    return out


def _longrope_factors(n: int, long: bool) -> np.ndarray:
    """[n] LongRoPE factors shaped as Phi-3.5's: 1 for the fast frequencies rising to ~2 (short) or ~40 (long)."""
    x = np.linspace(0.0, 1.0, n)
    top = 40.0 if long else 2.0
    return (1.0 + (top - 1.0) * x**3).astype(np.float32)


def _llama3_rope_factors(head_dim: int, base: float) -> np.ndarray:
    """What llama.cpp's converter writes as rope_freqs.weight for Llama 3.1's rope scaling (factor 8, low / high
    frequency factors 1 / 4, original context 8192): each frequency's divisor."""
    factor, low, high, old_ctx = 8.0, 1.0, 4.0, 8192
    freqs = 1.0 / base ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    low_wavelen, high_wavelen = old_ctx / low, old_ctx / high
    out = []
    for f in freqs:
        wavelen = 2 * math.pi / f
        if wavelen < high_wavelen:
            out.append(1.0)
        elif wavelen > low_wavelen:
            out.append(factor)
        else:
            smooth = (old_ctx / wavelen - low) / (high - low)
            out.append(1.0 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


def _metadata(arch: str, c: dict) -> list[tuple[str, object, str]]:
    """(key, value, type) of the architecture's own keys."""
    if c.get("encoder"):  # as convert_hf_to_gguf's BertModel / NomicBertModel write them
        keys = [
            ("general.name", f"synthetic {arch}", "string"),
            (f"{arch}.context_length", c["context"], "uint32"),
            (f"{arch}.embedding_length", c["d_model"], "uint32"),
            (f"{arch}.feed_forward_length", c["n_ff"], "uint32"),
            (f"{arch}.block_count", c["n_layers"], "uint32"),
            (f"{arch}.attention.head_count", c["n_head"], "uint32"),
            (f"{arch}.attention.layer_norm_epsilon", c["eps"], "float32"),
            (f"{arch}.attention.causal", False, "bool"),
            (f"{arch}.pooling_type", c["pooling"], "uint32"),
        ]
        if arch == "nomic-bert":
            keys.append((f"{arch}.rope.freq_base", c["rope_base"], "float32"))
        return keys
    return [
        ("general.name", f"synthetic {arch}", "string"),
        (f"{arch}.block_count", c["n_layers"], "uint32"),
        (f"{arch}.context_length", 4096, "uint32"),
        (f"{arch}.embedding_length", c["d_model"], "uint32"),
        (f"{arch}.feed_forward_length", c["n_ff"], "uint32"),
        (f"{arch}.attention.head_count", c["n_head"], "uint32"),
        (f"{arch}.attention.head_count_kv", c["n_kv"], "uint32"),
        (f"{arch}.attention.key_length", c["head_dim"], "uint32"),
        (f"{arch}.attention.value_length", c["head_dim"], "uint32"),
        (f"{arch}.rope.freq_base", c["rope_base"], "float32"),
        (f"{arch}.attention.layer_norm_rms_epsilon", c["eps"], "float32"),
        *((f"{arch}.{k}", v, t) for k, v, t in c.get("extra", ())),
    ]


def _add(w: gguf.GGUFWriter, key: str, value, kind: str) -> None:
    if kind == "string":
        w.add_string(key, value)
    elif kind == "uint32":
        w.add_uint32(key, int(value))
    elif kind == "int32":
        w.add_int32(key, int(value))
    elif kind == "float32":
        w.add_float32(key, float(value))
    elif kind == "bool":
        w.add_bool(key, bool(value))
    elif kind == "array":
        w.add_array(key, list(value) if not isinstance(value, np.ndarray) else value.tolist())
    else:
        raise ValueError(f"{key}: metadata type {kind} is not copied")


def test_model_path(name: str) -> Path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from fetch_test_models import cache_dir

    return cache_dir() / f"{name}.gguf"


# BERT's layout of the first ids: [PAD], 99 unused, [UNK], [CLS], [SEP], [MASK] (llama.cpp's defaults for a "bert"
# vocabulary are these ids)
BERT_SPECIALS = ["[PAD]", *(f"[unused{i}]" for i in range(99)), "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
_CONTROL = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"}
# single characters past ASCII: accented Latin, Greek, Cyrillic, CJK (BERT's vocabulary has thousands)
_EXTRA_CHARS = "àáâäçèéêëíîïñóôöøùúûüßåæœαβγδλπσωабвгдежиклмнопрстуя中国人大日本语的是不了在有我他这个们"


def wordpiece_vocab(src: Path, n_words: int = 1800, n_suffixes: int = 700) -> list[str]:
    """A WordPiece vocabulary in Hugging Face's spelling (continuations "##ing"), built from a byte-level BPE test
    model's tokens: BERT's specials, single characters (ASCII, some accented, Greek, Cyrillic, CJK) and their
    "##" forms, the numbers 0-99, the first n_words lowercase word tokens ("Ġword") and the first n_suffixes
    lowercase word-internal ones as "##" pieces (BPE ids run roughly by frequency). Deterministic."""
    import re

    from localllm.model.gguf import GGUFFile

    with GGUFFile(src) as f:
        bpe = f.metadata["tokenizer.ggml.tokens"].tolist()
    ascii_chars = [chr(c) for c in range(33, 127) if not chr(c).isupper()]
    chars = ascii_chars + list(_EXTRA_CHARS)
    vocab = BERT_SPECIALS + chars + ["##" + c for c in chars if c.isalnum()] + [str(i) for i in range(10, 100)]
    words = [t[1:] for t in bpe if t.startswith("Ġ") and re.fullmatch("[a-z]{2,}", t[1:])]
    pieces = ["##" + t for t in bpe if re.fullmatch("[a-z]{2,}", t)]
    seen = set(vocab)
    for t in words[:n_words] + pieces[:n_suffixes]:
        if t not in seen:
            seen.add(t)
            vocab.append(t)
    return vocab


def _wordpiece_metadata(src: Path) -> list[tuple[str, object, str]]:
    """tokenizer.* keys as convert_hf_to_gguf writes a BERT tokenizer: the phantom-space vocabulary (a word-initial
    piece "▁word", a continuation "##ing" as "ing", control tokens as they are), token types, BERT's special ids
    and the flags gguf's SpecialVocab reads off the "[CLS] $A [SEP]" template."""
    hf = wordpiece_vocab(src)
    tokens = [t if t in _CONTROL else t[2:] if t.startswith("##") else "▁" + t for t in hf]
    types = [3 if t in _CONTROL else 1 for t in hf]
    return [
        ("tokenizer.ggml.model", "bert", "string"),
        ("tokenizer.ggml.pre", "default", "string"),
        ("tokenizer.ggml.tokens", tokens, "array"),
        ("tokenizer.ggml.token_type", types, "array"),
        ("tokenizer.ggml.token_type_count", 2, "uint32"),
        ("tokenizer.ggml.eos_token_id", hf.index("[SEP]"), "uint32"),
        ("tokenizer.ggml.unknown_token_id", hf.index("[UNK]"), "uint32"),
        ("tokenizer.ggml.seperator_token_id", hf.index("[SEP]"), "uint32"),
        ("tokenizer.ggml.padding_token_id", hf.index("[PAD]"), "uint32"),
        ("tokenizer.ggml.cls_token_id", hf.index("[CLS]"), "uint32"),
        ("tokenizer.ggml.mask_token_id", hf.index("[MASK]"), "uint32"),
        ("tokenizer.ggml.add_bos_token", True, "bool"),
        ("tokenizer.ggml.add_eos_token", True, "bool"),
    ]


def write(out: Path, name: str, tokenizer_from: Path | None = None, wtype: str = "F32", seed: int = 0) -> str:
    """Writes the model `name` (a key of ARCHS); returns the file's sha256."""
    from localllm.model.gguf import GGUFFile

    c = dict(ARCHS[name])
    arch = c.get("arch", name)
    src = tokenizer_from or test_model_path(c["tokenizer"])
    w = gguf.GGUFWriter(str(out), arch)
    if c.get("encoder"):
        tok = _wordpiece_metadata(src)
        c["n_vocab"] = len(tok[2][1])
        for key, value, kind in _metadata(arch, c) + tok:
            _add(w, key, value, kind)
    else:
        with GGUFFile(src) as f:
            kinds = f.metadata_types
            tok = {k: v for k, v in f.metadata.items() if k.startswith("tokenizer.")}
            if c.get("harmony"):
                n = len(tok["tokenizer.ggml.tokens"])
                tok["tokenizer.ggml.tokens"] = [str(t) for t in tok["tokenizer.ggml.tokens"]] + list(HARMONY_TOKENS)
                tok["tokenizer.ggml.token_type"] = np.asarray(tok["tokenizer.ggml.token_type"]).tolist() + [3] * len(
                    HARMONY_TOKENS
                )
                tok["tokenizer.ggml.eos_token_id"] = n + HARMONY_TOKENS.index("<|return|>")
                tok["tokenizer.chat_template"] = HARMONY_TEMPLATE
            c["n_vocab"] = len(tok["tokenizer.ggml.tokens"])
            for key, value, kind in _metadata(arch, c):
                _add(w, key, value, kind)
            for key, value in tok.items():
                _add(w, key, value, kinds[key])
    rng = np.random.default_rng(seed)
    qt = WEIGHT_TYPES[wtype]
    for name, shape in _tensors(arch, c).items():
        if name == "rope_freqs.weight":
            w.add_tensor(name, _llama3_rope_factors(c["head_dim"], c["rope_base"]))
            continue
        if name.startswith("rope_factors_"):
            w.add_tensor(name, _longrope_factors(shape[0], long=name == "rope_factors_long.weight"))
            continue
        if name.endswith(".bias") or name.endswith("attn_sinks.weight"):  # F32 around 0: biases 0.1, sinks 1 spread
            spread = 1.0 if name.endswith("attn_sinks.weight") else 0.1
            w.add_tensor(name, (spread * rng.standard_normal(shape)).astype(np.float32))
            continue
        if len(shape) == 1:
            t = (1.0 + 0.1 * rng.standard_normal(shape)).astype(np.float32)
            w.add_tensor(name, t)
            continue
        t = (rng.standard_normal(shape) / math.sqrt(shape[-1])).astype(np.float32)
        kind = T.Q8_0 if name == "token_embd.weight" and qt == T.F32 else qt  # a real file's embedding is quantized
        if name in ("position_embd.weight", "token_types.weight"):  # small tables, kept F32
            kind = T.F32
        if qt == T.MXFP4 and "_exps." not in name:
            kind = T.Q8_0
        if name.endswith("ffn_gate_inp.weight"):  # routers stay F32 in real files (llama.cpp does not quantize them)
            t, kind = t * c.get("router_scale", ROUTER_SCALE), T.F32
        if kind == T.F32:
            w.add_tensor(name, t)
        else:
            q = gguf.quants.quantize(t, kind)
            w.add_tensor(name, q, raw_shape=q.shape, raw_dtype=kind)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    h = hashlib.sha256()
    with open(out, "rb") as fh:
        while chunk := fh.read(1 << 22):
            h.update(chunk)
    return h.hexdigest()


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="synthetic_arch.py", description=__doc__.splitlines()[0])
    ap.add_argument("arch", choices=sorted(ARCHS))
    ap.add_argument("out", type=Path)
    ap.add_argument("--type", default="F32", choices=sorted(WEIGHT_TYPES))
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    print(write(a.out, a.arch, wtype=a.type, seed=a.seed))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
