// The model: hyper-parameters of the generic decoder block (runtime/models/spec.py), weight views into
// the memory-mapped GGUF file, the paged KV cache, and the forward step: one call per engine step over
// a flat batch of tokens from any number of sequences (prefill, decode and mixed alike).
#pragma once
#include <initializer_list>
#include <utility>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "kernels.h"
#include "kv_cache.h"
#include "scratch_buffer.h"
#include "thread_pool.h"

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

// One engine step. Token t is token_ids[t] at position positions[t] of sequence seq_index[t]; its K and V
// go to KV slot slot_mapping[t], which must be block_tables[seq][pos / block_size] * block_size +
// pos % block_size. Sequence s has context_lens[s] positions after this step, all cached by the time its
// tokens attend (earlier steps wrote those not in this batch); block_tables: [n_seq][max_blocks].
struct StepBatch {
  int n_tokens = 0;
  const int32_t* token_ids = nullptr;     // [n_tokens]
  const int32_t* positions = nullptr;     // [n_tokens]
  const int32_t* slot_mapping = nullptr;  // [n_tokens]
  const int32_t* seq_index = nullptr;     // [n_tokens]
  int n_seq = 0, max_blocks = 0;
  const int32_t* block_tables = nullptr;  // [n_seq][max_blocks]
  const int32_t* context_lens = nullptr;  // [n_seq]
  int n_logits = 0;
  const int32_t* logits_rows = nullptr;   // [n_logits] rows of the batch whose logits are returned
};

// The KV cache's row formats, and two exact transforms of what a quantized K or V stores (f16 is stored as is):
// center: with a K bias b_k and no attention soft-cap, K is stored as k - b_k (after RoPE): each query's
//   scores all shift by -q . b_k, which the softmax ignores, while the large constant channels of the bias
//   (Qwen's outliers) leave the quantized values; with a V bias, V is stored as v - b_v and b_v added back
//   to the attention output (the softmax weights sum to 1).
// rotate: K is stored Hadamard-rotated per head (kv_format.h) with q rotated alike, so q . k is unchanged
//   while outlier channels are spread over the head; V is stored rotated and the attention output rotated back.
// equalize: K is stored divided per channel by s (q multiplied by s, so q . k is unchanged), s^2 the ratio of
//   K's to q's expected rms magnitude in that channel (estimated from the weights: the attn_k / attn_q row
//   norms scaled by attn_norm, plus the bias where it is kept, times the head-norm weight where there is one;
//   one value per RoPE pair; rms 1 per head): the s that minimises the expected error of q . k (make_k_scales),
//   so that a few large channels no longer set every block's scale.
struct KvConfig {
  KvType k_type = KvType::F16, v_type = KvType::F16;
  bool rotate = true, center = true, equalize = true;
};

class Model {
 public:
  // Checks every weight's shape against cfg (std::invalid_argument naming the tensor); 1-D weights
  // that are not F32 are dequantized once. The KV pool holds n_blocks blocks of block_size tokens.
  Model(const ModelConfig& cfg, ModelWeights weights, int n_blocks, int block_size, const KvConfig& kv,
        const KernelTable* kt, int n_threads);

  const ModelConfig& config() const { return cfg_; }
  const KvCache& kv_cache() const { return kv_; }
  bool rotate_k() const { return rotate_k_; }
  bool rotate_v() const { return rotate_v_; }
  bool center_k() const { return center_k_; }
  bool center_v() const { return center_v_; }
  bool equalize_k() const { return !k_scale_.empty(); }
  // [n_kv_head * head_dim]: the per-channel divisor of layer l's K (equalize_k() only)
  const std::vector<float>& k_scale(int l) const { return k_scale_.at(l); }
  int threads() const { return pool_.size(); }

  // logits: [n_logits][n_vocab]. Checks the batch (std::invalid_argument naming the array and index)
  // before touching the cache. One call at a time (a second caller waits).
  void forward(const StepBatch& b, float* logits);

 private:
  struct LayerNorms {  // float views of the 1-D weights (nullptr: absent)
    const float *attn_norm, *ffn_norm, *q_bias, *k_bias, *v_bias, *o_bias, *q_norm, *k_norm, *post_attn, *post_ffn;
  };
  const float* vector_of(const WeightView& w, int n, const char* name);
  void check(const StepBatch& b) const;
  void matmul(const WeightView& w, const float* x, int n, float* y);
  // several products of one input x [n][row_len] (q/k/v, gate/up: at most 4), each into its own y
  void matmul(std::initializer_list<std::pair<const WeightView*, float*>> products, const float* x, int n);

  ModelConfig cfg_;
  ModelWeights w_;
  const KernelTable* kt_;
  ThreadPool pool_;  // this model's thread count on the process's workers
  KvCache kv_;
  bool rotate_k_, rotate_v_, center_k_ = false, center_v_ = false;  // center_*: set once the biases are known
  std::vector<std::vector<float>> k_scale_;  // [n_layers][n_kv_head * head_dim] when K is equalized, else empty
  void make_k_scales();
  std::vector<LayerNorms> norms_;
  const float* output_norm_ = nullptr;
  const float* rope_freqs_ = nullptr;
  std::vector<std::vector<float>> owned_;  // dequantized 1-D weights that were not F32
  ScratchBuffer act_;                      // the step's activations (forward)
  std::mutex mu_;
};

}  // namespace lll
