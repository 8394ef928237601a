// The elementwise and per-row ops of the decoder block, scalar (the compiler vectorises the loops):
// RMSNorm, RoPE, SiLU, GELU-tanh, soft-capping and IEEE half conversion.
#pragma once
#include <cstddef>
#include <cstdint>

#include "quant_formats.h"

namespace lll {

// out[r][i] = x[r][i] / sqrt(mean(x[r]**2) + eps) * w[i] for r < rows; x, out: [rows][n] (out may be x)
void rms_norm(const float* x, const float* w, int rows, int n, float eps, float* out);

// cs, sn: [n_rot/2] cos and sin of theta_i = pos * scale * base**(-2i/n_rot) / factors[i] (factors may be null)
void rope_angles(int pos, int n_rot, double base, double scale, const float* factors, float* cs, float* sn);
// x: [n_heads][head_dim], rotated in place over the first n_rot dims of each head by the angles of
// rope_angles: pairs (2i, 2i+1) (normal) or (i, i + n_rot/2) (neox)
void rope(float* x, int n_heads, int head_dim, int n_rot, bool neox, const float* cs, const float* sn);

// g[i] = act(g[i]) * u[i] for i < n
void silu_mul(float* g, const float* u, size_t n);
void gelu_tanh_mul(float* g, const float* u, size_t n);

// x[i] = cap * tanh(x[i] / cap) for i < n
void softcap(float* x, size_t n, float cap);

// round to nearest even; overflow goes to inf, tiny values to subnormals or zero
f16_t f32_to_f16(float f);
// a 65536-entry table of f16_to_f32, built on first use
const float* f16_table();

}  // namespace lll
