// The KV transforms: exact changes of what a quantized K or V stores (f16 is stored as is), applied between
// RoPE and the cache write and undone on the attention output, so that the step reads like the decoder block
// with two named calls (to_cache, from_cache) and a second backend can implement the same pair.
// center: with a K bias b_k and no attention soft-cap, K is stored as k - b_k (after RoPE): each query's
//   scores all shift by -q . b_k, which the softmax ignores, while the large constant channels of the bias
//   (Qwen's outliers) leave the quantized values; with a V bias, V is stored as v - b_v and b_v added back
//   to the attention output (the softmax weights sum to 1).
// rotate: K is stored Hadamard-rotated per head (kv_format.h) with q rotated alike, so q . k is unchanged
//   while outlier channels are spread over the head; V is stored rotated and the attention output rotated back.
// equalize: K is stored divided per channel by s (q multiplied by s, so q . k is unchanged), s^2 the ratio of
//   K's to q's expected rms magnitude in that channel (estimated from the weights: the attn_k / attn_q row
//   norms scaled by attn_norm, plus the bias where it is kept, times the head-norm weight where there is one;
//   one value per RoPE pair; rms 1 per head): the s that minimises the expected error of q . k
//   (equalizing_k_scales), so that a few large channels no longer set every block's scale.
#pragma once
#include <vector>

#include "kernels.h"
#include "kv_format.h"
#include "model_config.h"

namespace lll {

struct KvConfig {
  KvType k_type = KvType::F16, v_type = KvType::F16;
  bool rotate = true, center = true, equalize = true;
};

class KvTransforms {
 public:
  KvTransforms() = default;
  // what kv asks for, where it applies: only to a quantized K (V); center K where every layer has a K bias
  // and there is no attention soft-cap, V where every layer has a V bias. Equalizing K waits for set_k_scales.
  KvTransforms(const ModelConfig& c, const KvConfig& kv, bool all_k_bias, bool all_v_bias);
  // s: [n_layers][n_kv_head * head_dim], K's per-channel divisors (equalize)
  void set_k_scales(std::vector<std::vector<float>> s) { k_scale_ = std::move(s); }

  bool rotate_k() const { return rotate_k_; }
  bool rotate_v() const { return rotate_v_; }
  bool center_k() const { return center_k_; }
  bool center_v() const { return center_v_; }
  bool equalize_k() const { return !k_scale_.empty(); }
  // [n_kv_head * head_dim]: the per-channel divisor of layer l's K (equalize_k() only)
  const std::vector<float>& k_scale(int l) const { return k_scale_.at(l); }

  // the V bias the projection adds: none where V is stored centered (from_cache adds it to the output)
  const float* v_bias(const float* bias) const { return center_v_ ? nullptr : bias; }
  // n rows of layer l after RoPE -> what the cache stores and the queries that read it:
  // q: [n][n_head][head_dim]; k, v: [n][n_kv_head][head_dim]; k_bias: [n_kv_head * head_dim] (center only)
  void to_cache(int l, const float* k_bias, float* q, float* k, float* v, int n) const;
  // whether from_cache changes anything
  bool changes_output() const { return rotate_v_ || center_v_; }
  // att: [n][n_head][head_dim], the attention over the stored V -> over the true V; v_bias: [n_kv_head * head_dim]
  void from_cache(const float* v_bias, float* att, int n) const;

 private:
  int n_head_ = 0, n_kv_head_ = 0, head_dim_ = 0;
  bool rotate_k_ = false, rotate_v_ = false, center_k_ = false, center_v_ = false;
  std::vector<std::vector<float>> k_scale_;  // [n_layers][n_kv_head * head_dim] when K is equalized, else empty
};

// One layer's K divisors [n_kv_head * head_dim] (equalize, above), from its weights: attn_k and attn_q
// [rows, d_model], attn_norm [d_model], the biases as added (k_bias: nullptr where K is centered) and the head
// norms [head_dim] (nullptr: absent).
std::vector<float> equalizing_k_scales(const KernelTable& kt, const ModelConfig& c, const WeightView& attn_k,
                                       const WeightView& attn_q, const float* attn_norm, const float* k_bias,
                                       const float* q_bias, const float* k_norm, const float* q_norm);

}  // namespace lll
