"""The model spec: everything the generic native decoder block needs, read from GGUF metadata and tensor names.

One architecture file per `general.architecture` (llama.py, qwen2.py, gemma3.py) turns a GGUFFile into a
ModelSpec; the native side runs this block over it, with T tokens at positions pos:

    h = token_embd[ids] * embed_scale                                  # [T, d_model]
    h = h + token_types[0] + position_embd[pos]                        # encoders (BERT), where present
    for layer in layers:
        a = norm(h, attn_norm)                                         # post_norm: h = a as well
        q = a @ attn_q.T (+ attn_q_bias)                               # [T, n_head, head_dim]
        k = a @ attn_k.T (+ attn_k_bias); v = a @ attn_v.T (+ ...)     # [T, n_kv_head, head_dim]
        q, k = rms_norm(q, attn_q_norm), rms_norm(k, attn_k_norm)      # per head, when qk_norm
        q, k = rope(q, pos, layer.rope_base, layer.rope_scale), rope(k, ...)   # first n_rot dims of a head
        s = (q @ k.T) * attn_scale                                     # head h reads kv head h // (n_head // n_kv_head)
        s = attn_softcap * tanh(s / attn_softcap)                      # when attn_softcap
        s[i, j] = -inf where j > i, or i - j >= sliding_window on a sliding layer   # (causal)
        s[i, j] = -inf where j is of another sequence                  # always; bidirectional: nothing else
        o = (softmax(s) @ v) @ attn_output.T (+ attn_output_bias)      # [T, d_model]; with attn_sinks, head h's
                                                                       # softmax counts e^sink[h] too (no value)
        h = h + norm(o, post_attention_norm)                           # the norm only when post_attn_norm
        f = norm(h, ffn_norm)                                          # post_norm: h = f as well
        f = (act(f @ ffn_gate.T) * (f @ ffn_up.T)) @ ffn_down.T        # act: silu, gelu_tanh; swiglu_oai: gpt-oss's
                                                                       # min(g, 7) * sigmoid(1.702 min(g, 7)) *
                                                                       # (clamp(u, -7, 7) + 1) for act(g) * u
        # mixture of experts (n_expert > 0) instead: p = softmax(f @ ffn_gate_inp.T); the n_expert_used largest
        # (ties: the lower index) in order, their p renormalised to sum 1 when expert_weights_norm;
        # f = sum over them of p_e * ffn_e(f), ffn_e the expression above over expert e's rows of the _exps tensors
        # (gpt-oss: the router's and experts' biases added, p the softmax of the chosen logits: expert_weights_softmax)
        # gelu (no gate: BERT): f = gelu_tanh(f @ ffn_up.T + ffn_up_bias) @ ffn_down.T + ffn_down_bias
        h = h + norm(f, post_ffw_norm)                                 # the norm only when post_ffn_norm
    logits = norm(h, output_norm) @ output.T                           # [T, n_vocab]
    logits = final_softcap * tanh(logits / final_softcap)              # when final_softcap
    hidden = norm(h, output_norm)                                      # embeddings; an encoder has no logits

norm is rms_norm(x, w) = x / sqrt(mean(x**2) + rms_eps) * w, or with layer_norm LayerNorm:
(x - mean(x)) / sqrt(var(x) + rms_eps) * w + bias (the norm's *_bias tensor where present). GGUF norm weights are
used as stored (gemma's +1 is already folded in by the converter).

Encoders (BERT, nomic-bert: bert.py) are this block with post_norm (each norm's output becomes the residual stream:
a post-norm layer's output norm is the next layer's attn_norm, the embeddings' norm layer 0's, the last layer's
output_norm) and bidirectional attention (a row sees all of its sequence, so a sequence is computed whole in one
step); they have no LM head (output is token_embd, never used). rope rotates pairs (2i, 2i+1) (normal) or (i, i + n_rot/2) (NeoX) by
pos * rope_scale * rope_base**(-2i/n_rot) / freq_factors[i] (YaRN mixes in the unscaled angle per frequency and
scales cos and sin by rope.mscale: RopeSpec, yarn_angle in tests/reference_forward.py).

A file this block cannot run correctly raises UnsupportedModelError naming the file and the field.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

ROPE_SCALING_TYPES = ("none", "linear", "yarn")
FFN_ACTS = ("silu", "gelu_tanh", "swiglu_oai", "gelu")  # gelu: no gate (ffn_gate None), gelu_tanh(up)
_REQUIRED = object()


class UnsupportedModelError(ValueError):
    """A model this runtime cannot run correctly: an unknown architecture, an unsupported metadata value,
    or a missing or unexpected tensor. The message names the file and the field."""

    def __init__(self, path: str, field: str, problem: str):
        super().__init__(f"{path}: {field}: {problem}")
        self.path, self.field, self.problem = path, field, problem


ROWS = "@"  # "blk.0.attn_qkv.weight@0:3072": rows [0, 3072) of a fused tensor (phi3's QKV and gate-up)


def rows_ref(name: str, start: int, stop: int) -> str:
    """A reference to rows [start, stop) of tensor `name` (each row one output of its product)."""
    return f"{name}{ROWS}{start}:{stop}"


def split_ref(ref: str) -> tuple[str, slice | None]:
    """(tensor name, its rows) of a tensor reference: rows None for the whole tensor."""
    name, sep, rows = ref.partition(ROWS)
    if not sep:
        return ref, None
    start, _, stop = rows.partition(":")
    return name, slice(int(start), int(stop))


@dataclass(frozen=True)
class RopeSpec:
    n_rot: int  # leading dims of each head that rotate
    neox: bool  # True: pairs (i, i + n_rot/2) (NeoX); False: pairs (2i, 2i+1) (normal)
    freq_base: float  # of the global (non-sliding) layers
    scaling: str  # "none" | "linear"
    freq_scale: float  # 1 / rope.scaling.factor for "linear", else 1.0; the global layers' LayerSpec.rope_scale
    orig_context_length: int  # rope.scaling.original_context_length, 0 when absent
    freq_factors: str | None = None  # tensor [n_rot/2] dividing each frequency (llama 3 rope_freqs), or None
    # LongRoPE (Phi-3's 128k variants): the factors for a sequence context over long_context, in place of
    # freq_factors (the short ones), as llama.cpp chooses them by its context per sequence (ModelSpec.for_context)
    freq_factors_long: str | None = None
    long_context: int = 0
    # YaRN (scaling "yarn"; ggml's rope_yarn): frequency i's angle mixes the interpolated theta * freq_scale and the
    # original theta by ramp(i) * yarn_ext_factor, ramp 1 below the correction dims [lo, hi] of (yarn_beta_fast,
    # yarn_beta_slow) over yarn_orig_ctx and 0 above them; 0 for every other scaling (the angle theta * freq_scale)
    yarn_ext_factor: float = 0.0
    yarn_beta_fast: float = 32.0
    yarn_beta_slow: float = 1.0
    yarn_orig_ctx: int = 0  # the context the correction dims are computed over (original_context_length or the model's)
    # multiplies cos and sin (q and k alike: attention scores by its square), as ggml_rope_ext's attn_factor: under
    # YaRN (yarn_ext_factor != 0) a layer's rotation multiplies it by 1 + 0.1 ln(1 / rope_scale) besides
    mscale: float = 1.0


@dataclass(frozen=True)
class LayerSpec:
    sliding: bool  # attends to the last sliding_window positions only
    rope_base: float
    rope_scale: float  # multiplies the rotation angle (linear scaling)
    attn_norm: str
    attn_q: str  # [n_head * head_dim, d_model] (numpy order)
    attn_k: str  # [n_kv_head * head_dim, d_model]
    attn_v: str  # [n_kv_head * head_dim, d_model]
    attn_output: str  # [d_model, n_head * head_dim]
    ffn_norm: str
    ffn_gate: str  # [n_ff, d_model]
    ffn_up: str  # [n_ff, d_model]
    ffn_down: str  # [d_model, n_ff]
    attn_q_bias: str | None = None  # [n_head * head_dim]
    attn_k_bias: str | None = None  # [n_kv_head * head_dim]
    attn_v_bias: str | None = None  # [n_kv_head * head_dim]
    attn_output_bias: str | None = None  # [d_model]
    attn_q_norm: str | None = None  # [head_dim], shared by all heads
    attn_k_norm: str | None = None  # [head_dim]
    post_attention_norm: str | None = None  # [d_model]
    post_ffw_norm: str | None = None  # [d_model]
    # mixture of experts (ffn_gate, ffn_up and ffn_down are None then): expert e owns rows [e * n_ff, (e + 1) * n_ff)
    # of gate_exps and up_exps and rows [e * d_model, (e + 1) * d_model) of down_exps, n_ff the expert's width
    ffn_gate_inp: str | None = None  # [n_expert, d_model]: the router
    ffn_gate_exps: str | None = None  # [n_expert * n_ff, d_model]
    ffn_up_exps: str | None = None  # [n_expert * n_ff, d_model]
    ffn_down_exps: str | None = None  # [n_expert * d_model, n_ff]
    attn_sinks: str | None = None  # [n_head]: a logit per head the softmax counts and drops (gpt-oss)
    ffn_gate_inp_bias: str | None = None  # [n_expert]: added to the router's logits
    ffn_gate_exps_bias: str | None = None  # [n_expert, n_ff]: expert e's row added to its gate product
    ffn_up_exps_bias: str | None = None  # [n_expert, n_ff]
    ffn_down_exps_bias: str | None = None  # [n_expert, d_model]
    attn_norm_bias: str | None = None  # [d_model]: LayerNorm's (layer_norm)
    ffn_norm_bias: str | None = None  # [d_model]
    ffn_up_bias: str | None = None  # [n_ff]
    ffn_down_bias: str | None = None  # [d_model]

    def tensor_names(self) -> list[str]:
        """The file's tensors the layer reads (a fused tensor once, however many references slice it)."""
        return list(dict.fromkeys(split_ref(v)[0] for v in self.__dict__.values() if isinstance(v, str)))


@dataclass(frozen=True)
class ModelSpec:
    arch: str
    n_vocab: int
    d_model: int
    n_layers: int
    n_head: int
    n_kv_head: int
    head_dim: int  # of keys, queries and values alike
    n_ff: int
    context_length: int
    rms_eps: float
    rope: RopeSpec
    attn_scale: float  # multiplies q @ k.T
    ffn_act: str  # "silu" (SwiGLU) | "gelu_tanh" (GeGLU, tanh approximation)
    embed_scale: float  # multiplies the embedding rows
    sliding_window: int  # 0: no sliding layers
    attn_softcap: float  # 0.0: none
    final_softcap: float  # 0.0: none
    qkv_bias: bool
    attn_output_bias: bool
    qk_norm: bool
    post_attn_norm: bool
    post_ffn_norm: bool
    token_embd: str  # [n_vocab, d_model]
    output_norm: str  # [d_model]
    output: str  # [n_vocab, d_model]; == token_embd when tied
    layers: tuple[LayerSpec, ...] = field(repr=False)
    n_expert: int = 0  # 0: a dense feed-forward; else experts per layer (n_ff is then one expert's width)
    n_expert_used: int = 0  # experts each token goes through
    expert_weights_norm: bool = False  # the chosen experts' probabilities renormalised to sum 1
    # the chosen experts (the n_expert_used largest logits) weighted by the softmax of their logits alone (gpt-oss;
    # llama.cpp's SOFTMAX_WEIGHT gating) instead of by their probabilities under the softmax over all experts
    expert_weights_softmax: bool = False
    # attention temperature (Llama 4, mistral3): after rope, q at position pos is multiplied by
    # 1 + attn_temp_scale * ln(floor(pos / attn_temp_floor) + 1); attn_temp_scale 0: none
    attn_temp_scale: float = 0.0
    attn_temp_floor: int = 0
    # encoders (BERT): LayerNorm instead of RMSNorm (eps rms_eps), each norm's output the residual stream
    # (post_norm), attention over the whole sequence (bidirectional: no LM head, embeddings only)
    layer_norm: bool = False
    post_norm: bool = False
    bidirectional: bool = False
    output_norm_bias: str | None = None  # [d_model] (layer_norm)
    position_embd: str | None = None  # [n_positions, d_model]: learned positions, row pos added to a token at pos
    token_types: str | None = None  # [n_token_types, d_model]: row 0 added to every token (sentence A)

    def __post_init__(self) -> None:
        if len(self.layers) != self.n_layers:
            raise ValueError(f"{len(self.layers)} layer specs for {self.n_layers} layers")
        if self.n_expert < 0 or not (
            0 < self.n_expert_used <= self.n_expert if self.n_expert else not self.n_expert_used
        ):
            raise ValueError(f"n_expert_used {self.n_expert_used} must be in [1, n_expert {self.n_expert}]")
        moe = ("ffn_gate_inp", "ffn_gate_exps", "ffn_up_exps", "ffn_down_exps")
        dense = ("ffn_gate", "ffn_up", "ffn_down") if self.ffn_act != "gelu" else ("ffn_up", "ffn_down")
        for i, layer in enumerate(self.layers):
            want, other = (moe, dense) if self.n_expert else (dense, moe)
            if self.ffn_act == "gelu" and layer.ffn_gate is not None:
                raise ValueError(f"layer {i}: ffn_act gelu has no gate, but ffn_gate is set")
            if any(getattr(layer, k) is None for k in want) or any(getattr(layer, k) is not None for k in other):
                raise ValueError(
                    f"layer {i}: a {'mixture-of-experts' if self.n_expert else 'dense'} layer needs {want}"
                )
        if self.ffn_act not in FFN_ACTS:
            raise ValueError(f"ffn_act {self.ffn_act!r} is not one of {FFN_ACTS}")
        for i, layer in enumerate(self.layers):
            has = {
                "qkv_bias": None not in (layer.attn_q_bias, layer.attn_k_bias, layer.attn_v_bias),
                "attn_output_bias": layer.attn_output_bias is not None,
                "qk_norm": layer.attn_q_norm is not None and layer.attn_k_norm is not None,
                "post_attn_norm": layer.post_attention_norm is not None,
                "post_ffn_norm": layer.post_ffw_norm is not None,
            }
            for flag, present in has.items():
                if present != getattr(self, flag):
                    raise ValueError(f"layer {i} disagrees with {flag}={getattr(self, flag)}")
            if layer.sliding and not self.sliding_window:
                raise ValueError(f"layer {i} is sliding but sliding_window is 0")
        expert_biases = ("ffn_gate_inp_bias", "ffn_gate_exps_bias", "ffn_up_exps_bias", "ffn_down_exps_bias")
        if not self.n_expert and any(getattr(layer, k) for layer in self.layers for k in expert_biases):
            raise ValueError("expert biases without experts")
        if self.attn_temp_scale and self.attn_temp_floor <= 0:
            raise ValueError("attention temperature needs a positive attn_temp_floor")
        norm_biases = ("attn_norm_bias", "ffn_norm_bias")
        if not self.layer_norm and (
            self.output_norm_bias or any(getattr(layer, k) for layer in self.layers for k in norm_biases)
        ):
            raise ValueError("norm biases need layer_norm (RMSNorm has none)")
        if self.bidirectional and (self.sliding_window or self.attn_temp_scale):
            raise ValueError("bidirectional attention takes no sliding window or attention temperature")

    @property
    def cpu_only(self) -> str | None:
        """What of this model only the CPU stage runs (the CUDA stage refuses it), or None."""
        if self.n_expert:
            return "mixture-of-experts layers"
        if self.attn_temp_scale:
            return "attention temperature"
        if self.ffn_act == "swiglu_oai":
            return "the clamped SwiGLU (swiglu_oai)"
        if any(layer.attn_sinks for layer in self.layers):
            return "attention sinks"
        if self.bidirectional or self.layer_norm or self.post_norm or self.ffn_act == "gelu":
            return "encoder layers"
        if self.position_embd or self.token_types:
            return "encoder layers"
        if any(layer.ffn_up_bias or layer.ffn_down_bias for layer in self.layers):
            return "feed-forward biases"
        return None

    @property
    def encoder(self) -> bool:
        """An encoder (bidirectional attention): no LM head, only hidden states (embeddings); each sequence is
        computed whole in one step."""
        return self.bidirectional

    @property
    def tied_output(self) -> bool:
        return self.output == self.token_embd

    def for_context(self, ctx_size: int) -> ModelSpec:
        """This spec for sequences of up to ctx_size tokens: LongRoPE's long factors past rope.long_context."""
        r = self.rope
        if r.freq_factors_long is None or ctx_size <= r.long_context:
            return self
        return dataclasses.replace(self, rope=dataclasses.replace(r, freq_factors=r.freq_factors_long))

    @property
    def q_dim(self) -> int:
        return self.n_head * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.n_kv_head * self.head_dim

    @property
    def sliding_layers(self) -> tuple[int, ...]:
        return tuple(i for i, layer in enumerate(self.layers) if layer.sliding)

    def tensor_names(self) -> list[str]:
        names = [self.token_embd, self.output_norm]
        if not self.tied_output:
            names.append(self.output)
        names += [t for t in (self.rope.freq_factors, self.rope.freq_factors_long) if t and t not in names]
        names += [n for n in (self.output_norm_bias, self.position_embd, self.token_types) if n]
        for layer in self.layers:
            names += layer.tensor_names()
        return names


def _yarn_mscale(factor: float, mscale: float) -> float:
    return 1.0 if factor <= 1.0 else 0.1 * mscale * math.log(factor) + 1.0


def yarn_rope(m: MetadataView, rope: RopeSpec, arch_keys: bool = False) -> RopeSpec:
    """rope with YaRN's fields as llama.cpp sets them (llama-context.cpp, ggml's rope_yarn) when its scaling is
    "yarn": ext_factor 1 unless the file says otherwise, and a magnitude of attn_factor * (1 + 0.1 ln factor) in all
    (divided by 1 + 0.1 * yarn_log_multiplier * ln factor where the file gives a multiplier). arch_keys: the
    architecture reads the file's beta and log-multiplier keys (llama.cpp's mistral3 does; the others keep the
    defaults 32 and 1 whatever the file says)."""
    if rope.scaling != "yarn":
        return rope
    beta_fast, beta_slow, log_mul = 32.0, 1.0, 0.0
    if arch_keys:
        beta_fast = m.number("rope.scaling.yarn_beta_fast", beta_fast)
        beta_slow = m.number("rope.scaling.yarn_beta_slow", beta_slow)
        log_mul = m.number("rope.scaling.yarn_log_multiplier", 0.0)
    ext = m.number("rope.scaling.yarn_ext_factor", -1.0)
    ext = 1.0 if ext < 0 else ext
    factor = 1.0 / rope.freq_scale
    if ext != 0:  # the rotation multiplies in 1 + 0.1 ln(factor) again (RopeSpec.mscale)
        mscale = _yarn_mscale(factor, 1.0) / (_yarn_mscale(factor, log_mul) if log_mul else 1.0)
        mscale /= 1.0 + 0.1 * math.log(factor)
    else:
        mscale = m.number("rope.scaling.yarn_attn_factor", 1.0)
    return dataclasses.replace(
        rope, yarn_ext_factor=ext, yarn_beta_fast=beta_fast, yarn_beta_slow=beta_slow, mscale=mscale * rope.mscale
    )


class MetadataView:
    """Typed access to one GGUF file's `{arch}.*` keys; every failure raises UnsupportedModelError naming the key."""

    def __init__(self, f, arch: str):
        self.f, self.arch, self.path = f, arch, f.path

    def key(self, suffix: str) -> str:
        return f"{self.arch}.{suffix}"

    def fail(self, field: str, problem: str) -> UnsupportedModelError:
        return UnsupportedModelError(self.path, field, problem)

    def raw(self, suffix: str) -> Any:
        return self.f.metadata.get(self.key(suffix))

    def _scalar(self, suffix: str, default: Any) -> Any:
        """the file's value, or None when absent and a default was given."""
        v = self.raw(suffix)
        if v is None and default is _REQUIRED:
            raise self.fail(self.key(suffix), "missing (required)")
        if isinstance(v, list) or hasattr(v, "tolist"):  # numpy arrays and StringArray
            raise self.fail(self.key(suffix), "per-layer values (an array) are not supported")
        return v

    def integer(self, suffix: str, default: Any = _REQUIRED) -> int:
        v = self._scalar(suffix, default)
        if v is None:
            return default
        if isinstance(v, bool) or not isinstance(v, int):
            raise self.fail(self.key(suffix), f"expected an integer, got {v!r}")
        return v

    def positive_int(self, suffix: str, default: Any = _REQUIRED) -> int:
        v = self._scalar(suffix, default)
        if v is None:
            return default
        v = self.integer(suffix)
        if v <= 0:
            raise self.fail(self.key(suffix), f"must be positive, got {v}")
        return v

    def number(self, suffix: str, default: Any = _REQUIRED) -> float:
        v = self._scalar(suffix, default)
        if v is None:
            return default
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise self.fail(self.key(suffix), f"expected a finite number, got {v!r}")
        return float(v)

    def string(self, suffix: str, default: Any = _REQUIRED) -> str:
        v = self._scalar(suffix, default)
        if v is None:
            return default
        if not isinstance(v, str):
            raise self.fail(self.key(suffix), f"expected a string, got {v!r}")
        return v

    def tensor(self, name: str, dims: tuple[int, ...], required: bool = True) -> str | None:
        """name when the file has it with GGML dims `dims` (dims[0] = row length); None when optional and absent."""
        t = self.f.tensors.get(name)
        if t is None:
            if required:
                raise self.fail(name, "tensor missing")
            return None
        if tuple(t.dims) != tuple(dims):
            raise self.fail(name, f"tensor has dims {tuple(t.dims)}, expected {tuple(dims)} (GGML order)")
        return name


def decoder_spec(
    m: MetadataView,
    *,
    neox: bool,
    ffn_act: str,
    attn_bias: str,
    qk_norm: bool,
    sandwich_norms: bool,
    fused: bool = False,
    moe: bool = False,
    yarn_keys: bool = False,
    ffn_norm: str = "ffn_norm",
    attn_sinks: bool = False,
    expert_bias: bool = False,
    own_tensors: tuple[str, ...] = (),
) -> ModelSpec:
    """The spec every supported architecture shares: all layers global, attn_scale 1/sqrt(head_dim),
    embed_scale 1. attn_bias: "required" (q, k, v biases), "optional" (q, k, v, output biases when
    present) or "none". fused: Q, K and V are the rows of one attn_qkv.weight (in that order), gate and up the
    two halves of one ffn_up.weight (gate first), as phi3 stores them. moe: every layer's feed-forward is a mixture
    of experts (expert_count, expert_used_count, expert_feed_forward_length; ffn_gate_inp and the stacked
    ffn_{gate,up,down}_exps tensors), n_ff the width of one expert. Architectures adjust the result with
    dataclasses.replace. yarn_keys: read YaRN's beta and log-multiplier keys (yarn_rope). ffn_norm: the name of the
    feed-forward's norm tensor (gpt-oss calls it post_attention_norm); attn_sinks: every layer has attn_sinks.weight;
    expert_bias: the router and the experts have biases (gpt-oss). own_tensors: tensors the architecture's file reads
    itself (phi3's LongRoPE factors), not refused as unused."""
    n_expert = n_expert_used = 0
    if moe:
        n_expert = m.positive_int("expert_count")
        n_expert_used = m.positive_int("expert_used_count")
        if n_expert_used > n_expert:
            raise m.fail(m.key("expert_used_count"), f"{n_expert_used} is more than expert_count {n_expert}")
        for suffix in ("expert_shared_count", "expert_shared_feed_forward_length"):
            if m.raw(suffix):
                raise m.fail(m.key(suffix), "shared experts are not supported")
        scale = m.number("expert_weights_scale", 0.0)
        if scale not in (0.0, 1.0):
            raise m.fail(m.key("expert_weights_scale"), f"scaled expert weights are not supported (got {scale})")
    else:
        for suffix in ("expert_count", "expert_used_count"):
            n = m.raw(suffix)
            if n is not None and not (isinstance(n, int) and n == 0):
                raise m.fail(m.key(suffix), f"mixture-of-experts layers are not supported by {m.arch} (got {n!r})")
    if m.raw("attention.causal") is False:
        raise m.fail(m.key("attention.causal"), "non-causal attention is not supported")

    n_layers = m.positive_int("block_count")
    d_model = m.positive_int("embedding_length")
    n_ff = m.positive_int("feed_forward_length")
    if moe:  # one expert's width (llama.cpp: feed_forward_length / expert_used_count when the key is absent)
        n_ff = m.positive_int("expert_feed_forward_length", n_ff // n_expert_used or _REQUIRED)
    n_head = m.positive_int("attention.head_count")
    n_kv_head = m.positive_int("attention.head_count_kv", n_head)
    if n_head % n_kv_head:
        raise m.fail(m.key("attention.head_count_kv"), f"{n_kv_head} does not divide head_count {n_head}")
    default_head_dim = d_model // n_head if d_model % n_head == 0 else _REQUIRED
    head_dim = m.positive_int("attention.key_length", default_head_dim)
    v_dim = m.positive_int("attention.value_length", head_dim)
    if v_dim != head_dim:
        raise m.fail(m.key("attention.value_length"), f"{v_dim} differs from key_length {head_dim}; not supported")
    context_length = m.positive_int("context_length")
    rms_eps = m.number("attention.layer_norm_rms_epsilon")
    if not 0 < rms_eps < 1:
        raise m.fail(m.key("attention.layer_norm_rms_epsilon"), f"out of range: {rms_eps}")

    n_rot = m.positive_int("rope.dimension_count", head_dim)  # fewer than head_dim: partial rotary (Phi-4 mini)
    if n_rot > head_dim or n_rot % 2:
        raise m.fail(m.key("rope.dimension_count"), f"{n_rot} must be even and at most the head's {head_dim} dims")
    freq_base = m.number("rope.freq_base", 10000.0)
    if freq_base <= 0:
        raise m.fail(m.key("rope.freq_base"), f"must be positive, got {freq_base}")
    scaling = m.string("rope.scaling.type", "linear")
    if scaling not in ROPE_SCALING_TYPES:
        raise m.fail(
            m.key("rope.scaling.type"),
            f"rope scaling {scaling!r} is not supported (supported: {', '.join(ROPE_SCALING_TYPES)})",
        )
    factor_key = "rope.scaling.factor" if m.raw("rope.scaling.factor") is not None else "rope.scale_linear"
    factor = m.number(factor_key, 0.0)
    if factor < 0:
        raise m.fail(m.key(factor_key), f"must not be negative, got {factor}")
    freq_scale = 1.0 if scaling == "none" or factor == 0.0 else 1.0 / factor
    if scaling != "yarn":
        scaling = "linear" if freq_scale != 1.0 else "none"
    orig_ctx = m.integer("rope.scaling.original_context_length", 0)
    attn_factor = m.number("rope.scaling.attn_factor", 1.0)

    t_embd = m.f.tensors.get("token_embd.weight")
    if t_embd is None or len(t_embd.dims) != 2:
        raise m.fail("token_embd.weight", "tensor missing" if t_embd is None else f"expected 2 dims, got {t_embd.dims}")
    n_vocab = t_embd.dims[1]
    if m.integer("vocab_size", n_vocab) != n_vocab:
        raise m.fail(m.key("vocab_size"), f"{m.raw('vocab_size')} disagrees with token_embd.weight ({n_vocab} rows)")
    m.tensor("token_embd.weight", (d_model, n_vocab))
    output = m.tensor("output.weight", (d_model, n_vocab), required=False) or "token_embd.weight"
    freq_factors = m.tensor("rope_freqs.weight", (n_rot // 2,), required=False)

    q_dim, kv_dim = n_head * head_dim, n_kv_head * head_dim
    layers = []
    for i in range(n_layers):
        b = f"blk.{i}."
        biases = {}
        if attn_bias != "none":
            req = attn_bias == "required"
            biases = {
                "attn_q_bias": m.tensor(b + "attn_q.bias", (q_dim,), req),
                "attn_k_bias": m.tensor(b + "attn_k.bias", (kv_dim,), req),
                "attn_v_bias": m.tensor(b + "attn_v.bias", (kv_dim,), req),
            }
            if attn_bias == "optional":
                biases["attn_output_bias"] = m.tensor(b + "attn_output.bias", (d_model,), False)
        norms = {}
        if qk_norm:
            norms = {
                "attn_q_norm": m.tensor(b + "attn_q_norm.weight", (head_dim,)),
                "attn_k_norm": m.tensor(b + "attn_k_norm.weight", (head_dim,)),
            }
        if sandwich_norms:
            norms.update(
                post_attention_norm=m.tensor(b + "post_attention_norm.weight", (d_model,)),
                post_ffw_norm=m.tensor(b + "post_ffw_norm.weight", (d_model,)),
            )
        if fused:
            qkv = m.tensor(b + "attn_qkv.weight", (d_model, q_dim + 2 * kv_dim))
            gate_up = m.tensor(b + "ffn_up.weight", (d_model, 2 * n_ff))
            products = {
                "attn_q": rows_ref(qkv, 0, q_dim),
                "attn_k": rows_ref(qkv, q_dim, q_dim + kv_dim),
                "attn_v": rows_ref(qkv, q_dim + kv_dim, q_dim + 2 * kv_dim),
                "ffn_gate": rows_ref(gate_up, 0, n_ff),
                "ffn_up": rows_ref(gate_up, n_ff, 2 * n_ff),
            }
        else:
            products = {
                "attn_q": m.tensor(b + "attn_q.weight", (d_model, q_dim)),
                "attn_k": m.tensor(b + "attn_k.weight", (d_model, kv_dim)),
                "attn_v": m.tensor(b + "attn_v.weight", (d_model, kv_dim)),
            }
        if moe:
            products |= {
                "ffn_gate": None,
                "ffn_up": None,
                "ffn_down": None,
                "ffn_gate_inp": m.tensor(b + "ffn_gate_inp.weight", (d_model, n_expert)),
                "ffn_gate_exps": m.tensor(b + "ffn_gate_exps.weight", (d_model, n_ff, n_expert)),
                "ffn_up_exps": m.tensor(b + "ffn_up_exps.weight", (d_model, n_ff, n_expert)),
                "ffn_down_exps": m.tensor(b + "ffn_down_exps.weight", (n_ff, d_model, n_expert)),
            }
            if expert_bias:
                products |= {
                    "ffn_gate_inp_bias": m.tensor(b + "ffn_gate_inp.bias", (n_expert,)),
                    "ffn_gate_exps_bias": m.tensor(b + "ffn_gate_exps.bias", (n_ff, n_expert)),
                    "ffn_up_exps_bias": m.tensor(b + "ffn_up_exps.bias", (n_ff, n_expert)),
                    "ffn_down_exps_bias": m.tensor(b + "ffn_down_exps.bias", (d_model, n_expert)),
                }
        elif not fused:
            products |= {
                "ffn_gate": m.tensor(b + "ffn_gate.weight", (d_model, n_ff)),
                "ffn_up": m.tensor(b + "ffn_up.weight", (d_model, n_ff)),
                "ffn_down": m.tensor(b + "ffn_down.weight", (n_ff, d_model)),
            }
        else:
            products["ffn_down"] = m.tensor(b + "ffn_down.weight", (n_ff, d_model))
        layers.append(
            LayerSpec(
                sliding=False,
                rope_base=freq_base,
                rope_scale=freq_scale,
                attn_norm=m.tensor(b + "attn_norm.weight", (d_model,)),
                attn_output=m.tensor(b + "attn_output.weight", (q_dim, d_model)),
                ffn_norm=m.tensor(b + ffn_norm + ".weight", (d_model,)),
                attn_sinks=m.tensor(b + "attn_sinks.weight", (n_head,)) if attn_sinks else None,
                **products,
                **biases,
                **norms,
            )
        )

    def all_or_none(key: str) -> bool:
        present = [getattr(layer, key) is not None for layer in layers]
        if any(present) and not all(present):
            name = getattr(layers[present.index(True)], key)
            raise m.fail(name, f"tensor present on some layers only (not on blk.{present.index(False)}); not supported")
        return present[0]

    qkv_bias = [all_or_none(k) for k in ("attn_q_bias", "attn_k_bias", "attn_v_bias")]
    if any(qkv_bias) and not all(qkv_bias):
        raise m.fail("blk.0.attn_q.bias", "q, k and v biases must come together")

    softcaps = {}
    for key in ("attn_logit_softcapping", "final_logit_softcapping"):
        softcaps[key] = m.number(key, 0.0)
        if softcaps[key] < 0:
            raise m.fail(m.key(key), f"must not be negative, got {softcaps[key]}")

    spec = ModelSpec(
        arch=m.arch,
        n_vocab=n_vocab,
        d_model=d_model,
        n_layers=n_layers,
        n_head=n_head,
        n_kv_head=n_kv_head,
        head_dim=head_dim,
        n_ff=n_ff,
        context_length=context_length,
        rms_eps=rms_eps,
        rope=yarn_rope(
            m,
            RopeSpec(
                n_rot=n_rot,
                neox=neox,
                freq_base=freq_base,
                scaling=scaling,
                freq_scale=freq_scale,
                orig_context_length=orig_ctx,
                freq_factors=freq_factors,
                yarn_orig_ctx=orig_ctx or context_length,
                mscale=attn_factor,
            ),
            yarn_keys,
        ),
        attn_scale=1.0 / math.sqrt(head_dim),
        ffn_act=ffn_act,
        embed_scale=1.0,
        sliding_window=0,
        attn_softcap=softcaps["attn_logit_softcapping"],
        final_softcap=softcaps["final_logit_softcapping"],
        qkv_bias=all(qkv_bias),
        attn_output_bias=all_or_none("attn_output_bias"),
        qk_norm=qk_norm,
        post_attn_norm=sandwich_norms,
        post_ffn_norm=sandwich_norms,
        token_embd="token_embd.weight",
        output_norm=m.tensor("output_norm.weight", (d_model,)),
        output=output,
        layers=tuple(layers),
        n_expert=n_expert,
        n_expert_used=n_expert_used,
    )
    refuse_unused(m, spec, "decoder", own_tensors)
    return spec


def refuse_unused(m: MetadataView, spec: ModelSpec, what: str, own_tensors=(), examples: str = "") -> None:
    """UnsupportedModelError naming the file's tensors the spec does not read (a variant this runtime would run
    wrong by ignoring them); own_tensors: ones the architecture's file reads itself; examples: such variants."""
    unused = sorted(set(m.f.tensors) - set(spec.tensor_names()) - set(own_tensors))
    if unused:
        more = f" and {len(unused) - 3} more" if len(unused) > 3 else ""
        raise m.fail(
            unused[0],
            f"tensor not used by the {m.arch} {what} (unused: {', '.join(unused[:3])}{more}); "
            f"a variant this runtime does not support{f' ({examples})' if examples else ''}",
        )
