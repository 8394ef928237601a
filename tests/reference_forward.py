"""A slow, obviously correct numpy forward pass over a ModelSpec: the judge for the native decoder block.

    ref = ReferenceModel(GGUFFile(path))         # builds the spec with spec_from_gguf
    logits = ref.logits([1, 2, 3])               # [T, n_vocab] float32; full causal attention, no KV cache

Weights come from `gguf.quants.dequantize` as float32 and are cached per tensor (cache=False keeps only
the tensors of the layer being computed, for models whose float32 weights would not fit). Matrix products
run in float32; norms, rope, softmax and the nonlinearities in float64. It follows spec.py's block exactly.

float64=True is the accuracy judge for the native paths: the same dequantized weights, widened exactly to
float64, and every product in float64 too; logits come back float64. Nothing but the 1-D tensors (norms,
biases) is kept: each matrix is dequantized when its product runs, in row chunks of at most CHUNK_BYTES of
float64, so memory stays bounded whatever the model (the 1.5B's tied 151936 x 1536 output included).

    ref.logits_batch([ids_a, ids_b])             # several sequences in one pass: each weight dequantized once
    ref.hidden(ids)                              # [T, d_model]: the final hidden states (an encoder's output)

Encoders (bert, nomic-bert: spec.py's layer_norm, post_norm, bidirectional) run the same block: LayerNorm with the
norms' biases, each norm's output the residual stream, attention over the whole sequence, learned positions and
token_types row 0 added to the embeddings, the feed-forward's biases and gate-less GELU.

act_quant=True rounds each matrix product's input the way ggml's CPU dot products do before they multiply:
to Q8_0 (blocks of 32, fp16 scale) for 32-weight block types, to Q8_K (blocks of 256, float scale) for
K-quants and IQ4_XS, to fp16 for F16. Only the rounding is emulated; products stay float32.
"""

from __future__ import annotations

import gguf
import numpy as np
from gguf.quants import dequantize
from localllm.model.architectures import ModelSpec, spec_from_gguf


def rms_norm(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    """x: [..., n], w: [n]; normalises the last axis."""
    x = x.astype(np.float64)
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def rope(
    x: np.ndarray,
    pos: np.ndarray,
    n_rot: int,
    neox: bool,
    base: float,
    scale: float,
    freq_factors: np.ndarray | None,
    yarn=None,
) -> np.ndarray:
    """x: [T, n_heads, head_dim], pos: [T]; rotates the first n_rot dims of every head (ggml_rope_ext). yarn: the
    spec's RopeSpec where it may carry YaRN's fields (its mscale and ramp, ggml's rope_yarn)."""
    half = n_rot // 2
    inv_freq = base ** (-2.0 * np.arange(half) / n_rot)  # [half]
    if freq_factors is not None:
        inv_freq = inv_freq / freq_factors
    extrap = pos[:, None].astype(np.float64) * inv_freq[None, :]  # [T, half]
    theta, mscale = scale * extrap, 1.0
    if yarn is not None:
        mscale = yarn.mscale
        if yarn.yarn_ext_factor:
            lo, hi = yarn_corr_dims(n_rot, yarn.yarn_orig_ctx, base, yarn.yarn_beta_fast, yarn.yarn_beta_slow)
            ramp = 1 - np.clip((np.arange(half) - lo) / max(0.001, hi - lo), 0, 1)
            mix = ramp * yarn.yarn_ext_factor
            theta = theta * (1 - mix) + extrap * mix
            if scale > 0:
                mscale *= 1 + 0.1 * np.log(1 / scale)
    cos, sin = np.cos(theta)[:, None, :] * mscale, np.sin(theta)[:, None, :] * mscale
    out = x.astype(np.float64).copy()
    if neox:
        a, b = x[..., :half], x[..., half:n_rot]
        out[..., :half], out[..., half:n_rot] = a * cos - b * sin, a * sin + b * cos
    else:
        a, b = x[..., 0:n_rot:2], x[..., 1:n_rot:2]
        out[..., 0:n_rot:2], out[..., 1:n_rot:2] = a * cos - b * sin, a * sin + b * cos
    return out


def yarn_corr_dims(n_rot: int, orig_ctx: int, base: float, beta_fast: float, beta_slow: float) -> tuple[float, float]:
    """ggml_rope_yarn_corr_dims, in float32 as ggml computes it (its floor and ceil place the ramp's ends)."""
    f = np.float32

    def dim(beta):
        return f(n_rot) * np.log(f(orig_ctx) / (f(beta) * f(2) * f(np.pi))) / (f(2) * np.log(f(base)))

    return max(0.0, float(np.floor(dim(beta_fast)))), min(n_rot - 1.0, float(np.ceil(dim(beta_slow))))


def layer_norm(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, eps: float) -> np.ndarray:
    """x: [..., n], w, b: [n]; (x - mean) / sqrt(var + eps) * w + b over the last axis, in float64."""
    x = x.astype(np.float64)
    c = x - x.mean(axis=-1, keepdims=True)
    y = c / np.sqrt(np.mean(c * c, axis=-1, keepdims=True) + eps) * w
    return y + b if b is not None else y


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x**3)))


def silu(x: np.ndarray) -> np.ndarray:
    return x / (1.0 + np.exp(-x))


def glu(act: str, g: np.ndarray, u: np.ndarray) -> np.ndarray:
    """The gated feed-forward's act(g) * u (spec.py's ffn_act), in float64."""
    if act == "gelu":  # no gate (g None): gelu_tanh(up)
        return gelu_tanh(u.astype(np.float64))
    g, u = g.astype(np.float64), u.astype(np.float64)
    if act == "swiglu_oai":  # ggml_swiglu_oai: alpha 1.702, limit 7
        x, y = np.minimum(g, 7.0), np.clip(u, -7.0, 7.0)
        return x / (1.0 + np.exp(-1.702 * x)) * (y + 1.0)
    return (silu(g) if act == "silu" else gelu_tanh(g)) * u


def softcap(x: np.ndarray, cap: float) -> np.ndarray:
    return cap * np.tanh(x / cap) if cap else x


_Q8_K_INPUT = {"Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "IQ4_XS"}


def quantize_activations(x: np.ndarray, weight_type: str) -> np.ndarray:
    """x: [T, n] float32 -> x as ggml's vec_dot_type for weight_type represents it (quantize_row_q8_0/q8_K_ref)."""
    if weight_type == "F32":
        return x
    if weight_type == "F16":
        return x.astype(np.float16).astype(np.float32)
    if weight_type in _Q8_K_INPUT:
        xb = x.reshape(x.shape[0], -1, 256)
        mx = np.take_along_axis(xb, np.abs(xb).argmax(-1)[..., None], -1)  # signed value of largest magnitude
        iscale = np.divide(np.float32(-127.0), mx, out=np.zeros_like(mx), where=mx != 0)
        q = np.minimum(np.rint(iscale * xb), 127)
        d = np.divide(np.float32(1.0), iscale, out=np.zeros_like(iscale), where=iscale != 0)
        return (q * d).reshape(x.shape).astype(np.float32)
    xb = x.reshape(x.shape[0], -1, 32)
    d = np.abs(xb).max(-1, keepdims=True) / np.float32(127.0)
    q = np.rint(np.divide(xb, d, out=np.zeros_like(xb), where=d != 0))
    return (q * d.astype(np.float16).astype(np.float32)).reshape(x.shape)


CHUNK_BYTES = 64 << 20  # float64 weight rows dequantized at a time by a float64 product


class ReferenceModel:
    def __init__(
        self,
        f,
        spec: ModelSpec | None = None,
        cache: bool = True,
        act_quant: bool = False,
        float64: bool = False,
    ):
        self.f, self.spec, self.act_quant, self.float64 = f, spec or spec_from_gguf(f), act_quant, float64
        self.cache = cache and not float64
        self._weights: dict[str, np.ndarray] = {}

    def _tensor(self, ref: str):
        """(TensorInfo, its rows as uint8 [n, row_bytes]) of a spec's tensor reference: a name, or "name@a:b" for rows
        [a, b) of a fused tensor (phi3's QKV and gate-up)."""
        name, _, rows = ref.partition("@")
        t = self.f.tensors[name]
        if not rows:
            return t, t.rows()
        a, b = (int(v) for v in rows.split(":"))
        return t, t.rows()[a:b]

    def weight(self, name: str) -> np.ndarray:
        """float32 (float64 under float64=True) [n_rows, row_len] (numpy order: a Linear's [out, in]); [row_len]
        for 1-D tensors, which are always kept."""
        w = self._weights.get(name)
        if w is None:
            t, rows = self._tensor(name)
            w = dequantize(rows, gguf.GGMLQuantizationType(t.type.id))
            shape = t.shape if len(t.shape) == 1 else (len(rows), t.row_len)
            w = w.astype(np.float64 if self.float64 else np.float32, copy=False).reshape(shape)
            if self.cache or w.ndim == 1:
                self._weights[name] = w
        return w

    def product64(self, x: np.ndarray, name: str) -> np.ndarray:
        """x: [T, in] float64 -> x @ W.T [T, out] float64, W dequantized CHUNK_BYTES of float64 rows at a time."""
        t, rows = self._tensor(name)
        qt = gguf.GGMLQuantizationType(t.type.id)
        step = max(1, CHUNK_BYTES // (8 * t.row_len))
        y, xt = np.empty((x.shape[0], len(rows))), np.ascontiguousarray(x.T)
        for r in range(0, len(rows), step):
            w = dequantize(rows[r : r + step], qt).astype(np.float64).reshape(-1, t.row_len)
            y[:, r : r + len(w)] = (w @ xt).T
        return y

    def embed(self, ids: list[int]) -> np.ndarray:
        """float32 [T, d_model]: the embedding rows of ids, dequantized one row each."""
        t = self.f.tensors[self.spec.token_embd]
        rows = t.rows()[np.asarray(ids)]
        return dequantize(rows, gguf.GGMLQuantizationType(t.type.id)).astype(np.float32).reshape(len(ids), -1)

    def linear(self, x: np.ndarray, w: str, b: str | None = None) -> np.ndarray:
        """x: [T, in] -> [T, out] float32 (float64 under float64=True)."""
        if self.float64:
            if self.act_quant:
                x = quantize_activations(x.astype(np.float32), self._tensor(w)[0].type.name)
            y = self.product64(x.astype(np.float64), w)
            return y + self.weight(b) if b else y
        x = x.astype(np.float32)
        if self.act_quant:
            x = quantize_activations(x, self._tensor(w)[0].type.name)
        y = x @ self.weight(w).T
        return y + self.weight(b) if b else y

    def attention(self, layer, x: np.ndarray, pos: np.ndarray, seq: np.ndarray | None = None) -> np.ndarray:
        """x: [T, d_model] normed -> [T, d_model], before the output norm and the residual. seq: [T] the sequence
        of each token (a token attends within its own only), None for one sequence."""
        s, T = self.spec, x.shape[0]
        q = self.linear(x, layer.attn_q, layer.attn_q_bias).reshape(T, s.n_head, s.head_dim)
        k = self.linear(x, layer.attn_k, layer.attn_k_bias).reshape(T, s.n_kv_head, s.head_dim)
        v = self.linear(x, layer.attn_v, layer.attn_v_bias).reshape(T, s.n_kv_head, s.head_dim).astype(np.float64)
        if s.qk_norm:
            q = rms_norm(q, self.weight(layer.attn_q_norm), s.rms_eps)
            k = rms_norm(k, self.weight(layer.attn_k_norm), s.rms_eps)
        ff = self.weight(s.rope.freq_factors).astype(np.float64) if s.rope.freq_factors else None
        q = rope(q, pos, s.rope.n_rot, s.rope.neox, layer.rope_base, layer.rope_scale, ff, s.rope)
        k = rope(k, pos, s.rope.n_rot, s.rope.neox, layer.rope_base, layer.rope_scale, ff, s.rope)
        if s.attn_temp_scale:  # attention temperature (spec.py)
            q = q * (1 + s.attn_temp_scale * np.log(np.floor(pos / s.attn_temp_floor) + 1))[:, None, None]

        group = s.n_head // s.n_kv_head
        k = np.repeat(k, group, axis=1)  # [T, n_head, head_dim]: head h reads kv head h // group
        v = np.repeat(v, group, axis=1)
        scores = np.einsum("ihd,jhd->hij", q, k) * s.attn_scale  # [n_head, T, T]
        scores = softcap(scores, s.attn_softcap)
        i, j = pos[:, None], pos[None, :]
        masked = j > i if not s.bidirectional else np.zeros((T, T), dtype=bool)
        if seq is not None:
            masked |= seq[:, None] != seq[None, :]
        if layer.sliding:
            masked |= i - j >= s.sliding_window
        scores = np.where(masked[None], -np.inf, scores)
        if layer.attn_sinks:  # one more logit per head in the softmax, whose weight goes to no value
            sink = np.broadcast_to(self.weight(layer.attn_sinks).astype(np.float64)[:, None, None], (s.n_head, T, 1))
            scores = np.concatenate([scores, sink], axis=-1)
        scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
        probs = (scores / scores.sum(axis=-1, keepdims=True))[..., :T]
        out = np.einsum("hij,jhd->ihd", probs, v).reshape(T, s.q_dim)
        return self.linear(out, layer.attn_output, layer.attn_output_bias)

    def ffn(self, layer, x: np.ndarray) -> np.ndarray:
        """x: [T, d_model] normed -> [T, d_model]."""
        if self.spec.n_expert:
            return self.experts(layer, x)
        up = self.linear(x, layer.ffn_up, layer.ffn_up_bias)
        gate = self.linear(x, layer.ffn_gate) if layer.ffn_gate else None
        return self.linear(glu(self.spec.ffn_act, gate, up), layer.ffn_down, layer.ffn_down_bias)

    def experts(self, layer, x: np.ndarray) -> np.ndarray:
        """The mixture of experts (spec.py), token by token: softmax router, the n_expert_used most probable (ties:
        the lower index), renormalised when expert_weights_norm, each expert a feed-forward over its rows."""
        s = self.spec
        z = self.linear(x, layer.ffn_gate_inp, layer.ffn_gate_inp_bias).astype(np.float64)
        p = np.exp(z - z.max(axis=-1, keepdims=True))
        p /= p.sum(axis=-1, keepdims=True)
        out = np.zeros((len(x), s.d_model))

        def bias(name: str | None, e: int) -> float | np.ndarray:
            return self.weight(name)[e].astype(np.float64) if name else 0.0

        for t in range(len(x)):
            chosen = np.argsort(-z[t], kind="stable")[: s.n_expert_used]
            w = p[t][chosen]
            if s.expert_weights_softmax:  # the softmax of the chosen logits alone
                w = np.exp(z[t][chosen] - z[t][chosen].max())
                w /= w.sum()
            elif s.expert_weights_norm:
                w = w / max(w.sum(), 6.103515625e-5)
            for wj, e in zip(w, chosen):

                def rows(name: str, n: int, e=e) -> str:
                    return f"{name}@{e * n}:{(e + 1) * n}"

                xe = x[t : t + 1]
                g = self.linear(xe, rows(layer.ffn_gate_exps, s.n_ff)) + bias(layer.ffn_gate_exps_bias, e)
                u = self.linear(xe, rows(layer.ffn_up_exps, s.n_ff)) + bias(layer.ffn_up_exps_bias, e)
                y = self.linear(glu(s.ffn_act, g, u), rows(layer.ffn_down_exps, s.d_model))
                out[t] += wj * (y[0] + bias(layer.ffn_down_exps_bias, e))
        return out if self.float64 else out.astype(np.float32)

    def logits(self, ids: list[int]) -> np.ndarray:
        """[len(ids), n_vocab] float32 (float64 under float64=True) for tokens at positions 0..len(ids)-1."""
        return self.forward(ids, np.arange(len(ids)), None)

    def logits_batch(self, seqs: list[list[int]]) -> list[np.ndarray]:
        """logits(ids) of each sequence, all computed in one pass (every weight dequantized once)."""
        ids = [t for ids in seqs for t in ids]
        pos = np.concatenate([np.arange(len(ids)) for ids in seqs])
        seq = np.repeat(np.arange(len(seqs)), [len(ids) for ids in seqs])
        out = self.forward(ids, pos, seq)
        return np.split(out, np.cumsum([len(ids) for ids in seqs])[:-1])

    def norm(self, x: np.ndarray, w: str, b: str | None = None) -> np.ndarray:
        """spec.py's norm: rms_norm, or LayerNorm with its bias under layer_norm."""
        s = self.spec
        if s.layer_norm:
            return layer_norm(x, self.weight(w), self.weight(b) if b else None, s.rms_eps)
        return rms_norm(x, self.weight(w), s.rms_eps)

    def hidden(self, ids: list[int]) -> np.ndarray:
        """[len(ids), d_model]: the final hidden states, norm(h, output_norm) (float64 under float64=True)."""
        h = self.forward(ids, np.arange(len(ids)), None, hidden=True)
        return h if self.float64 else h.astype(np.float32)

    def forward(self, ids: list[int], pos: np.ndarray, seq: np.ndarray | None, hidden: bool = False) -> np.ndarray:
        """ids, pos: [T]; seq: attention()'s. -> [T, n_vocab] logits, or with hidden the final hidden states."""
        s = self.spec
        h = self.embed(ids).astype(np.float64) * s.embed_scale
        if s.token_types:
            h = h + self.weight(s.token_types)[0]
        if s.position_embd:
            h = h + self.weight(s.position_embd)[np.asarray(pos)]
        for layer in s.layers:
            x = self.norm(h, layer.attn_norm, layer.attn_norm_bias)
            if s.post_norm:  # the normed value is the residual stream
                h = x
            a = self.attention(layer, x, pos) if seq is None else self.attention(layer, x, pos, seq)
            if s.post_attn_norm:
                a = rms_norm(a, self.weight(layer.post_attention_norm), s.rms_eps)
            h = h + a
            x = self.norm(h, layer.ffn_norm, layer.ffn_norm_bias)
            if s.post_norm:
                h = x
            f = self.ffn(layer, x)
            if s.post_ffn_norm:
                f = rms_norm(f, self.weight(layer.post_ffw_norm), s.rms_eps)
            h = h + f
        h = self.norm(h, s.output_norm, s.output_norm_bias)
        if hidden:
            return h
        out = self.linear(h, s.output)
        out = softcap(out.astype(np.float64), s.final_softcap)
        return out if self.float64 else out.astype(np.float32)
