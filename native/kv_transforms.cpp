// The KV transforms (kv_transforms.h): where they apply, the per-row work, and K's equalizing scales.
#include "kv_transforms.h"

#include <algorithm>
#include <cmath>

#include "matmul.h"

namespace lll {

KvTransforms::KvTransforms(const ModelConfig& c, const KvConfig& kv, bool all_k_bias, bool all_v_bias)
    : n_head_(c.n_head),
      n_kv_head_(c.n_kv_head),
      head_dim_(c.head_dim),
      rotate_k_(kv.rotate && kv.k_type != KvType::F16),
      rotate_v_(kv.rotate && kv.v_type != KvType::F16),
      center_k_(kv.center && kv.k_type != KvType::F16 && all_k_bias && c.attn_softcap == 0.f),
      center_v_(kv.center && kv.v_type != KvType::F16 && all_v_bias) {}

void KvTransforms::to_cache(int l, const float* k_bias, float* q, float* k, float* v, int n) const {
  const int hd = head_dim_, qd = n_head_ * hd, kvd = n_kv_head_ * hd, group = n_head_ / n_kv_head_;
  // centering: K stored minus its bias. The bias was added before RoPE, so this is not a no-op: every score
  // of a query shifts by the same -q . b_k (softmax-invariant). (V's is never added: v_bias)
  if (center_k_)
    for (int t = 0; t < n; ++t)
      for (int i = 0; i < kvd; ++i) k[(size_t)t * kvd + i] -= k_bias[i];
  if (!k_scale_.empty()) {  // (q * s) . (k / s) = q . k
    const float* ks = k_scale_[l].data();
    for (int t = 0; t < n; ++t) {
      for (int i = 0; i < kvd; ++i) k[(size_t)t * kvd + i] /= ks[i];
      for (int hh = 0; hh < n_head_; ++hh)
        for (int i = 0; i < hd; ++i) q[(size_t)t * qd + (size_t)hh * hd + i] *= ks[(size_t)(hh / group) * hd + i];
    }
  }
  if (rotate_k_) {  // (H q) . (H k) = q . k
    hadamard_rotate(q, n * n_head_, hd);
    hadamard_rotate(k, n * n_kv_head_, hd);
  }
  if (rotate_v_) hadamard_rotate(v, n * n_kv_head_, hd);
}

void KvTransforms::from_cache(const float* v_bias, float* att, int n) const {
  const int hd = head_dim_, qd = n_head_ * hd, group = n_head_ / n_kv_head_;
  if (rotate_v_) hadamard_rotate(att, n * n_head_, hd);  // sum p (H v) = H sum p v; H H = I
  if (center_v_)  // sum p (v - b_v) + b_v = sum p v: head h reads kv head h / group
    for (int t = 0; t < n; ++t)
      for (int hh = 0; hh < n_head_; ++hh)
        for (int i = 0; i < hd; ++i) att[(size_t)t * qd + (size_t)hh * hd + i] += v_bias[(size_t)(hh / group) * hd + i];
}

std::vector<float> equalizing_k_scales(const KernelTable& kt, const ModelConfig& c, const WeightView& attn_k,
                                       const WeightView& attn_q, const float* attn_norm, const float* k_bias,
                                       const float* q_bias, const float* k_norm, const float* q_norm) {
  // s minimises the expected squared error of q . k. The rounding error e of a rotated q4_0 / q8_0 block is
  // about isotropic, of variance proportional to |k / s|^2, so the score error (q s) . e has variance
  // proportional to sum_i k_i^2 / s_i^2 * sum_i q_i^2 s_i^2, least (Cauchy-Schwarz) at s_i^2 = |k_i| / |q_i|,
  // with |k_i|, |q_i| the channels' rms magnitudes. Those come from the weights: for a normed input of unit
  // entries, channel r of x W^T + b has mean square sum_j W_rj^2 n_j^2 + b_r^2 (n: attn_norm).
  const int d = c.d_model, hd = c.head_dim, kvd = c.n_kv_head * hd, qd = c.n_head * hd, half = c.n_rot / 2;
  const int group = c.n_head / c.n_kv_head;
  std::vector<float> w;
  // rms magnitude per channel of x W^T + b, [rows / hd][hd]; with a per-head norm, relative magnitudes times
  // |norm_i| (the head is normalised to rms 1 before the norm weight)
  auto channel_rms = [&](const WeightView& W, int rows, const float* norm, const float* bias,
                         const float* head_norm) {
    w.resize((size_t)rows * d);
    lll::dequantize(kt, W.type, W.data, W.row_bytes, rows, d, w.data());
    std::vector<double> g(rows);
    for (int r = 0; r < rows; ++r) {
      double ss = bias ? (double)bias[r] * bias[r] : 0.0;
      for (int i = 0; i < d; ++i) {
        const double a = (double)w[(size_t)r * d + i] * norm[i];
        ss += a * a;
      }
      g[r] = ss;
    }
    for (int h = 0; h < rows / hd; ++h) {
      double* gh = g.data() + (size_t)h * hd;
      double ms = 0;
      for (int i = 0; i < hd; ++i) ms += gh[i] / hd;
      for (int i = 0; i < hd; ++i)
        gh[i] = head_norm ? std::fabs(head_norm[i]) * std::sqrt(gh[i] / (ms + 1e-30)) : std::sqrt(gh[i]);
    }
    return g;
  };
  // K as stored (k_bias: nullptr when centered)
  const std::vector<double> gk = channel_rms(attn_k, kvd, attn_norm, k_bias, k_norm);
  const std::vector<double> gq1 = channel_rms(attn_q, qd, attn_norm, q_bias, q_norm);
  std::vector<float> s(kvd);
  for (int h = 0; h < c.n_kv_head; ++h) {
    std::vector<double> k(gk.begin() + (size_t)h * hd, gk.begin() + (size_t)(h + 1) * hd), q(hd, 0.0);
    for (int j = 0; j < group; ++j)  // the query heads that read kv head h: their mean square
      for (int i = 0; i < hd; ++i) q[i] += gq1[(size_t)(h * group + j) * hd + i] * gq1[(size_t)(h * group + j) * hd + i] / group;
    for (int i = 0; i < hd; ++i) q[i] = std::sqrt(q[i]);
    for (int i = 0; i < half; ++i) {  // RoPE mixes a pair: one scale for both
      const int ia = c.neox ? i : 2 * i, ib = c.neox ? i + half : 2 * i + 1;
      k[ia] = k[ib] = std::sqrt((k[ia] * k[ia] + k[ib] * k[ib]) / 2);
      q[ia] = q[ib] = std::sqrt((q[ia] * q[ia] + q[ib] * q[ib]) / 2);
    }
    const double kmax = *std::max_element(k.begin(), k.end()), qmax = *std::max_element(q.begin(), q.end());
    std::vector<double> r(hd);  // s^2 up to a factor; dead channels floored so the ratio stays finite
    double mr = 0;
    for (int i = 0; i < hd; ++i) {
      r[i] = std::max(k[i], 1e-6 * kmax + 1e-30) / std::max(q[i], 1e-6 * qmax + 1e-30);
      mr += r[i] / hd;
    }
    for (int i = 0; i < hd; ++i)  // rms 1 per head
      s[(size_t)h * hd + i] = (float)std::min(1e3, std::max(1e-3, std::sqrt(r[i] / mr)));
  }
  return s;
}


}  // namespace lll
