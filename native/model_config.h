// What a model is made of: the hyper-parameters of the generic decoder block (runtime/model/architectures/spec.py) and the
// views of its weights in the memory-mapped GGUF file.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace lll {

// m rows of row_len weights of GGML type `type`, row r at data + r * row_bytes; data == nullptr: absent.
// The bytes belong to the caller (the mmap) and must outlive the Model.
struct WeightView {
  const uint8_t* data = nullptr;
  int type = -1;
  int rows = 0, row_len = 0;
  size_t row_bytes = 0;
  bool present() const { return data != nullptr; }
};

// Silu: SwiGLU; GeluTanh: GeGLU (tanh approximation); SwigluOai: gpt-oss's clamped SwiGLU (ops.h swiglu_oai_mul);
// Gelu: no gate, gelu_tanh(up) (BERT's feed-forward as llama.cpp computes it: ggml_gelu, the tanh approximation)
enum class FfnAct : int { Silu = 0, GeluTanh = 1, SwigluOai = 2, Gelu = 3 };

// Every field and weight of a model is spelt once, in the lists below: the structs are generated from them, so
// is the binding's reading of Python's dicts (bind_model.cpp), localllm.model.model builds those dicts from the names
// (kernels.model_fields()), and tests/runtime/test_model_spec.py checks each name against runtime/model/architectures/spec.py
// (a field of ModelSpec or its RopeSpec; of LayerSpec for the layer lists, in its order). Adding a field to the
// decoder block is one entry here and its use in the step.

// ModelConfig: X(type, name)
#define LLL_CONFIG_FIELDS(X)                                                                            \
  X(int, n_vocab) X(int, d_model) X(int, n_layers) X(int, n_head) X(int, n_kv_head) X(int, head_dim)     \
  X(int, n_ff) X(float, rms_eps)                                                                        \
  X(int, n_rot)            /* leading dims of each head that rotate (even, <= head_dim) */              \
  X(bool, neox)            /* rope pairs (i, i + n_rot/2); else (2i, 2i+1) */                           \
  X(float, attn_scale)     /* multiplies q . k */                                                       \
  X(FfnAct, ffn_act)       /* "silu" | "gelu_tanh" in Python */                                         \
  X(float, embed_scale)    /* multiplies the embedding rows */                                          \
  X(int, sliding_window)   /* 0: no sliding layers */                                                   \
  X(float, attn_softcap)   /* 0: none */                                                                \
  X(float, final_softcap)  /* 0: none */                                                                \
  X(int, n_expert)         /* 0: dense feed-forward; else experts per layer (n_ff: one expert's width) */ \
  X(int, n_expert_used)    /* experts a token goes through (<= n_expert) */                             \
  X(bool, expert_weights_norm) /* the chosen experts' probabilities renormalised to sum 1 */                \
  X(bool, expert_weights_softmax) /* the chosen experts' weights: the softmax of their router logits alone */ \
  /* YaRN (ops.h RopeYarn): the unscaled angle mixed in by ramp * yarn_ext_factor (0: none), the ramp's   \
     correction dims from the betas over yarn_orig_ctx; mscale multiplies cos and sin */                  \
  X(float, yarn_ext_factor) X(float, yarn_beta_fast) X(float, yarn_beta_slow) X(int, yarn_orig_ctx)      \
  X(float, mscale)                                                                                      \
  X(float, attn_temp_scale) /* q at pos times 1 + attn_temp_scale * ln(floor(pos / attn_temp_floor) + 1) */ \
  X(int, attn_temp_floor)                                                                               \
  /* encoders (BERT): */                                                                                \
  X(bool, layer_norm)      /* the norms are LayerNorm (mean removed, + their bias when present), eps rms_eps */ \
  X(bool, post_norm)       /* each norm's output replaces the residual stream h (BERT's post-norm) */   \
  X(bool, bidirectional)   /* a row sees every position of its sequence; the step holds whole sequences */

// ModelWeights, besides the layers: X(name)
#define LLL_MODEL_WEIGHTS(X)                                                                            \
  X(token_embd)    /* [n_vocab, d_model] */                                                             \
  X(output_norm)   /* [d_model] */                                                                      \
  X(output)        /* [n_vocab, d_model] (may view token_embd) */                                       \
  X(freq_factors)  /* [n_rot/2] dividing each RoPE frequency, or absent */                             \
  X(output_norm_bias) /* [d_model] (LayerNorm), or absent */                                              \
  X(position_embd) /* [n_positions, d_model]: row pos added to a token at pos (BERT), or absent */        \
  X(token_types)   /* [n_token_types, d_model]: row 0 added to every token (BERT's sentence A), or absent */

// LayerWeights' values: X(type, name)
#define LLL_LAYER_FIELDS(X)                                                                             \
  X(bool, sliding)      /* attends to the last sliding_window positions only */                         \
  X(float, rope_base)                                                                                   \
  X(float, rope_scale)  /* multiplies the rotation angle; 0: no rope on the layer (NoPE) */

// LayerWeights' tensors: X(name). 2-D: attn_q [n_head*head_dim, d_model], attn_k/attn_v
// [n_kv_head*head_dim, d_model], attn_output [d_model, n_head*head_dim], ffn_gate/ffn_up [n_ff, d_model],
// ffn_down [d_model, n_ff] (ffn_gate absent where ffn_act is Gelu). 1-D (one row): norms [d_model] or [head_dim] (q/k norms), biases [rows of the
// matching product]. Mixture-of-experts layers (ModelConfig::n_expert > 0): ffn_gate_inp [n_expert, d_model] (the
// router), ffn_gate_exps/ffn_up_exps [n_expert * n_ff, d_model] and ffn_down_exps [n_expert * d_model, n_ff], expert
// e's rows the e-th slice, in place of ffn_gate/ffn_up/ffn_down. The first six are required, the feed-forward's
// of its kind, the others optional.
#define LLL_LAYER_WEIGHTS(X)                                                                            \
  X(attn_norm) X(attn_q) X(attn_k) X(attn_v) X(attn_output) X(ffn_norm) X(ffn_gate) X(ffn_up) X(ffn_down) \
  X(attn_q_bias) X(attn_k_bias) X(attn_v_bias) X(attn_output_bias) X(attn_q_norm) X(attn_k_norm)        \
  X(post_attention_norm) X(post_ffw_norm)                                                               \
  X(ffn_gate_inp) X(ffn_gate_exps) X(ffn_up_exps) X(ffn_down_exps)                                    \
  X(attn_sinks)         /* [n_head]: a logit per head the softmax counts and drops (gpt-oss) */         \
  X(ffn_gate_inp_bias)  /* [n_expert] */                                                                \
  X(ffn_gate_exps_bias) /* [n_expert][n_ff] */                                                          \
  X(ffn_up_exps_bias)   /* [n_expert][n_ff] */                                                          \
  X(ffn_down_exps_bias) /* [n_expert][d_model] */                                                       \
  X(attn_norm_bias) X(ffn_norm_bias) /* [d_model] (LayerNorm) */                                         \
  X(ffn_up_bias)        /* [n_ff] */                                                                    \
  X(ffn_down_bias)      /* [d_model] */

#define LLL_FIELD_MEMBER(type, name) type name{};
#define LLL_WEIGHT_MEMBER(name) WeightView name;

struct ModelConfig {
  LLL_CONFIG_FIELDS(LLL_FIELD_MEMBER)
};

struct LayerWeights {
  LLL_LAYER_FIELDS(LLL_FIELD_MEMBER)
  LLL_LAYER_WEIGHTS(LLL_WEIGHT_MEMBER)
};

struct ModelWeights {
  LLL_MODEL_WEIGHTS(LLL_WEIGHT_MEMBER)
  std::vector<LayerWeights> layers;
};

#undef LLL_FIELD_MEMBER
#undef LLL_WEIGHT_MEMBER

}  // namespace lll
