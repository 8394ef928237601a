// The elementwise and per-row ops of the decoder block, scalar (the compiler vectorises the loops):
// RMSNorm, LayerNorm, RoPE, SiLU, GELU-tanh, soft-capping and IEEE half conversion.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "model_config.h"
#include "quant_formats.h"

// Loops of elementwise float work built for AVX-512, AVX2 + FMA and the baseline, the best chosen at load
// (function multi-versioning). GCC before 12 and clang take no "arch=" clones: AVX-512F / AVX2 (no FMA)
// there; elsewhere the baseline only.
#if defined(LLL_X86) && defined(__linux__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12
#define LLL_VECTOR_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#elif defined(LLL_X86) && defined(__linux__) && defined(__GNUC__)
#define LLL_VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define LLL_VECTOR_CLONES
#endif

namespace lll {

// e^x for |x| <= 87 to within 2 ulp (Cephes' expf: x = n ln2 + r, |r| <= ln2 / 2, a degree-5 polynomial for
// (e^r - 1 - r) / r^2); beyond +-87 it clamps. No calls or branches, so loops over it vectorise (the file
// must be built with -fno-trapping-math for the clamp's compares to if-convert).
inline float exp_poly(float x) {
  x = x < -87.0f ? -87.0f : x;  // ternaries (not std::min / max) become minps / maxps
  x = x > 87.0f ? 87.0f : x;
  const float t = x * 1.44269504088896341f;
  const float big = t + 12582912.0f;  // round to nearest: 1.5 * 2^23 leaves no fraction bits
  const float fn = big - 12582912.0f;
  const float r = (x - fn * 0.693359375f) - fn * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float er = p * (r * r) + r + 1.0f;
  // 2^n, n in [-126, 126]: n sits in big's low mantissa bits (big's bits are 0x4B400000 + n), read as an integer;
  // a NaN x (which the clamps above keep) goes through no float -> int conversion (undefined for NaN) and the
  // NaN er makes the result NaN
  uint32_t bits;
  std::memcpy(&bits, &big, 4);
  bits = (bits - 0x4B400000u + 127u) << 23;
  float scale;
  std::memcpy(&scale, &bits, 4);
  return er * scale;
}

// out[r][i] = x[r][i] / sqrt(mean(x[r]**2) + eps) * w[i] for r < rows; x, out: [rows][n] (out may be x)
void rms_norm(const float* x, const float* w, int rows, int n, float eps, float* out);

// out[r][i] = (x[r][i] - mean(x[r])) / sqrt(var(x[r]) + eps) * w[i] + b[i] for r < rows (b may be null): LayerNorm,
// mean and variance summed in double as ggml_norm does; x, out: [rows][n] (out may be x)
void layer_norm(const float* x, const float* w, const float* b, int rows, int n, float eps, float* out);

// YaRN (ggml's rope_yarn): frequency i's angle is theta_i * scale * (1 - mix) + theta_i * mix, mix =
// ext_factor * ramp(i), ramp 1 for i below the correction dim of beta_fast, 0 above that of beta_slow, linear
// between (ggml_rope_yarn_corr_dims over orig_ctx and the base); cos and sin are multiplied by mscale, and under
// YaRN (ext_factor != 0) by 1 + 0.1 ln(1 / scale) too. The defaults: no YaRN, magnitude 1.
struct RopeYarn {
  double ext_factor = 0, beta_fast = 32, beta_slow = 1, mscale = 1;
  int orig_ctx = 0;
};
// cs, sn: [n_rot/2] cos and sin of theta_i = pos * scale * base**(-2i/n_rot) / factors[i] (factors may be null),
// as RopeYarn says where it is given
void rope_angles(int pos, int n_rot, double base, double scale, const float* factors, float* cs, float* sn,
                 const RopeYarn& yarn = RopeYarn{});
// x: [n_heads][head_dim], rotated in place over the first n_rot dims of each head by the angles of
// rope_angles: pairs (2i, 2i+1) (normal) or (i, i + n_rot/2) (neox)
void rope(float* x, int n_heads, int head_dim, int n_rot, bool neox, const float* cs, const float* sn);

// g[i] = act(g[i]) * u[i] for i < n
void silu_mul(float* g, const float* u, size_t n);
void gelu_tanh_mul(float* g, const float* u, size_t n);
// x[i] = gelu_tanh(x[i]) = 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))): a feed-forward without a gate (BERT)
void gelu_tanh(float* x, size_t n);
// gpt-oss's SwiGLU (ggml_swiglu_oai, alpha 1.702, limit 7): x = min(g, 7), y = clamp(u, -7, 7),
// g[i] = x / (1 + e^(-1.702 x)) * (y + 1)
void swiglu_oai_mul(float* g, const float* u, size_t n);
// the feed-forward's activation (model_config.h FfnAct) over n elements; Gelu: g[i] = gelu_tanh(g[i]), u unused
void ffn_act_mul(FfnAct act, float* g, const float* u, size_t n);

// x[i] = cap * tanh(x[i] / cap) for i < n
void softcap(float* x, size_t n, float cap);

// round to nearest even; overflow goes to inf, tiny values to subnormals or zero
f16_t f32_to_f16(float f);
// a 65536-entry table of f16_to_f32, built on first use
const float* f16_table();

}  // namespace lll
