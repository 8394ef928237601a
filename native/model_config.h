// What a model is made of: the hyper-parameters of the generic decoder block (runtime/models/spec.py) and the
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

enum class FfnAct : int { Silu = 0, GeluTanh = 1 };

struct ModelConfig {
  int n_vocab, d_model, n_layers, n_head, n_kv_head, head_dim, n_ff;
  float rms_eps;
  int n_rot;           // leading dims of each head that rotate (even, <= head_dim)
  bool neox;           // rope pairs (i, i + n_rot/2); else (2i, 2i+1)
  float attn_scale;    // multiplies q . k
  FfnAct ffn_act;
  float embed_scale;   // multiplies the embedding rows
  int sliding_window;  // 0: no sliding layers
  float attn_softcap, final_softcap;  // 0: none
};

struct LayerWeights {
  bool sliding = false;
  float rope_base = 10000.f, rope_scale = 1.f;
  // 2-D: attn_q [n_head*head_dim, d_model], attn_k/attn_v [n_kv_head*head_dim, d_model],
  // attn_output [d_model, n_head*head_dim], ffn_gate/ffn_up [n_ff, d_model], ffn_down [d_model, n_ff]
  WeightView attn_q, attn_k, attn_v, attn_output, ffn_gate, ffn_up, ffn_down;
  // 1-D (one row): norms [d_model] or [head_dim] (q/k norms), biases [rows of the matching product]
  WeightView attn_norm, ffn_norm, attn_q_bias, attn_k_bias, attn_v_bias, attn_output_bias, attn_q_norm,
      attn_k_norm, post_attention_norm, post_ffw_norm;
};

struct ModelWeights {
  WeightView token_embd;  // [n_vocab, d_model]
  WeightView output_norm; // [d_model]
  WeightView output;      // [n_vocab, d_model] (may view token_embd)
  WeightView rope_freqs;  // [n_rot/2] or absent
  std::vector<LayerWeights> layers;
};

}  // namespace lll
