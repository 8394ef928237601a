// The decoder block's elementwise and per-row ops (ops.h).
#include "ops.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>

namespace lll {

void rms_norm(const float* x, const float* w, int rows, int n, float eps, float* out) {
  for (int r = 0; r < rows; ++r) {
    const float* xr = x + (size_t)r * n;
    float* o = out + (size_t)r * n;
    double ss = 0.0;
    for (int i = 0; i < n; ++i) ss += (double)xr[i] * xr[i];
    const float inv = (float)(1.0 / std::sqrt(ss / n + eps));
    for (int i = 0; i < n; ++i) o[i] = xr[i] * inv * w[i];
  }
}

void layer_norm(const float* x, const float* w, const float* b, int rows, int n, float eps, float* out) {
  for (int r = 0; r < rows; ++r) {
    const float* xr = x + (size_t)r * n;
    float* o = out + (size_t)r * n;
    double s = 0.0;
    for (int i = 0; i < n; ++i) s += xr[i];
    const float mean = (float)(s / n);
    double ss = 0.0;
    for (int i = 0; i < n; ++i) ss += (double)(xr[i] - mean) * (xr[i] - mean);
    const float inv = (float)(1.0 / std::sqrt(ss / n + eps));
    if (b)
      for (int i = 0; i < n; ++i) o[i] = (xr[i] - mean) * inv * w[i] + b[i];
    else
      for (int i = 0; i < n; ++i) o[i] = (xr[i] - mean) * inv * w[i];
  }
}

// the dims of ggml_rope_yarn_corr_dims: the frequency that turns beta times over orig_ctx positions (in float, as
// ggml computes it: its floor and ceil decide the ramp's ends)
static float yarn_corr_dim(int n_rot, int orig_ctx, float beta, float base) {
  return n_rot * std::log(orig_ctx / (beta * 2 * (float)M_PI)) / (2 * std::log(base));
}

void rope_angles(int pos, int n_rot, double base, double scale, const float* factors, float* cs, float* sn,
                 const RopeYarn& yarn) {
  double lo = 0, hi = 0, mscale = yarn.mscale;
  if (yarn.ext_factor != 0) {
    lo = std::max(0.f, std::floor(yarn_corr_dim(n_rot, yarn.orig_ctx, (float)yarn.beta_fast, (float)base)));
    hi = std::min(n_rot - 1.f, std::ceil(yarn_corr_dim(n_rot, yarn.orig_ctx, (float)yarn.beta_slow, (float)base)));
    if (scale > 0) mscale *= 1.0 + 0.1 * std::log(1.0 / scale);
  }
  for (int i = 0; i < n_rot / 2; ++i) {
    double extrap = pos * std::pow(base, -2.0 * i / n_rot);
    if (factors) extrap /= factors[i];
    double theta = extrap * scale;
    if (yarn.ext_factor != 0) {
      const double ramp = 1 - std::min(1.0, std::max(0.0, (i - lo) / std::max(0.001, hi - lo)));
      const double mix = ramp * yarn.ext_factor;
      theta = theta * (1 - mix) + extrap * mix;
    }
    cs[i] = (float)(std::cos(theta) * mscale);
    sn[i] = (float)(std::sin(theta) * mscale);
  }
}

void rope(float* x, int n_heads, int head_dim, int n_rot, bool neox, const float* cs, const float* sn) {
  const int half = n_rot / 2;
  for (int h = 0; h < n_heads; ++h) {
    float* xh = x + (size_t)h * head_dim;
    for (int i = 0; i < half; ++i) {
      const int ia = neox ? i : 2 * i, ib = neox ? i + half : 2 * i + 1;
      const float a = xh[ia], b = xh[ib];
      xh[ia] = a * cs[i] - b * sn[i];
      xh[ib] = a * sn[i] + b * cs[i];
    }
  }
}

LLL_VECTOR_CLONES
void silu_mul(float* __restrict g, const float* __restrict u, size_t n) {
  // g / (1 + e^-g) with h = e^(-|g| / 2): g / (1 + h h) for g >= 0, (g h) h / (1 + h h) below, which stays exact
  // down to where the result underflows (e^g alone would leave exp_poly's range below -87)
  for (size_t i = 0; i < n; ++i) {
    const float x = g[i], h = exp_poly(-0.5f * std::fabs(x));
    g[i] = (x >= 0.f ? x : x * h * h) / (1.0f + h * h) * u[i];
  }
}

// 0.5 x (1 + tanh z), z = sqrt(2 / pi) (x + 0.044715 x^3), as x sigmoid(2z) with h = e^-|z|: x / (1 + h h) for
// z >= 0, (x h) h / (1 + h h) below (no cancellation where tanh z is near -1); exp_poly has no calls or branches, so
// the loops vectorise (std::tanh was a call per element: a fifth of a BERT step)
static inline float gelu_one(float x) {
  const float z = 0.7978845608028654f * (x + 0.044715f * x * x * x);
  const float h = exp_poly(-std::fabs(z));
  return (z >= 0.f ? x : x * h * h) / (1.0f + h * h);
}

LLL_VECTOR_CLONES
void gelu_tanh_mul(float* __restrict g, const float* __restrict u, size_t n) {
  for (size_t i = 0; i < n; ++i) g[i] = gelu_one(g[i]) * u[i];
}

LLL_VECTOR_CLONES
void gelu_tanh(float* x, size_t n) {
  for (size_t i = 0; i < n; ++i) x[i] = gelu_one(x[i]);
}

void swiglu_oai_mul(float* g, const float* u, size_t n) {
  const float alpha = 1.702f, limit = 7.0f;
  for (size_t i = 0; i < n; ++i) {
    const float x = std::min(g[i], limit), y = std::min(std::max(u[i], -limit), limit);
    g[i] = x / (1.0f + std::exp(-alpha * x)) * (y + 1.0f);
  }
}

void ffn_act_mul(FfnAct act, float* g, const float* u, size_t n) {
  switch (act) {
    case FfnAct::Silu: return silu_mul(g, u, n);
    case FfnAct::GeluTanh: return gelu_tanh_mul(g, u, n);
    case FfnAct::SwigluOai: return swiglu_oai_mul(g, u, n);
    case FfnAct::Gelu: return gelu_tanh(g, n);
  }
}

void softcap(float* x, size_t n, float cap) {
  for (size_t i = 0; i < n; ++i) x[i] = cap * std::tanh(x[i] / cap);
}

f16_t f32_to_f16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000;
  const uint32_t absx = x & 0x7fffffff;
  if (absx >= 0x7f800000) return (f16_t)(sign | 0x7c00 | (absx > 0x7f800000 ? 0x200 : 0));  // inf, nan
  if (absx >= 0x477ff000) return (f16_t)(sign | 0x7c00);  // rounds past 65504
  if (absx < 0x38800000) {  // below 2^-14: subnormal half (or zero)
    if (absx < 0x33000000) return (f16_t)sign;  // below half the smallest subnormal
    const uint32_t man = (absx & 0x7fffff) | 0x800000;
    const int shift = 126 - (int)(absx >> 23);  // 14 + 112 - exp: puts the value in units of 2^-24
    const uint32_t q = man >> shift, rem = man & ((1u << shift) - 1), halfway = 1u << (shift - 1);
    return (f16_t)(sign | (q + (rem > halfway || (rem == halfway && (q & 1)))));
  }
  const uint32_t h = ((absx >> 13) - (112u << 10));
  const uint32_t rem = absx & 0x1fff;
  return (f16_t)(sign | (h + (rem > 0x1000 || (rem == 0x1000 && (h & 1)))));
}

const float* f16_table() {
  static const std::unique_ptr<float[]> table = [] {
    std::unique_ptr<float[]> t(new float[65536]);
    for (uint32_t h = 0; h < 65536; ++h) t[h] = f16_to_f32((f16_t)h);
    return t;
  }();
  return table.get();
}

}  // namespace lll
