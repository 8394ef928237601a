// Device decode of GGUF weight rows: decode8<T>(row, k, i0, out) writes weights i0 .. i0 + 7 of a row of k weights
// of type T as floats, for every type the CPU kernels compute (quant_formats.h, byte-identical to ggml). Shared by
// the batched product and the embedding lookup (gemm.cu).
//
// Exactness: every value is computed with the float operations, in the order, of the CPU's dequantize (matmul.cpp
// over the unpack routines of kernels_generic.inc, which equal gguf's dequantize): w = s * (u - offset) for the
// symmetric types, w = s * u + m (the K-quants: s * u - dm) for the types with a min, s and m themselves one float
// product of the f16 super-scale and the integer sub-scale. The products and sums are spelt with __fmul_rn /
// __fadd_rn / __fsub_rn so that nvcc cannot contract them into fused multiply-adds, which round once instead of
// twice: the results are bit-identical to the CPU's.
//
// Alignment: rows start wherever row_bytes puts them; blocks of 18, 22, 34, 84, 110 and 210 bytes are only 2-byte
// aligned, so quantized rows are read with 16-bit loads at most (and F16/BF16 rows likewise). F32 rows are read as
// floats (4-byte aligned rows: row_bytes a multiple of 4, as a row of floats is).
#pragma once
#include <cstdint>

#include "../quant_formats.h"
#include "device_compat.cuh"

namespace lll::cuda {

// ---- loads ----

__device__ __forceinline__ uint32_t ld16(const uint8_t* p) { return *reinterpret_cast<const uint16_t*>(p); }
__device__ __forceinline__ float ld_f16(const uint8_t* p) { return __half2float(__ushort_as_half((uint16_t)ld16(p))); }
// the little-endian 32-bit word at a 2-byte aligned address
__device__ __forceinline__ uint32_t ld32(const uint8_t* p) { return ld16(p) | (ld16(p + 2) << 16); }
// the 8 bytes at a 2-byte aligned address
__device__ __forceinline__ void ld8(const uint8_t* p, uint8_t v[8]) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint32_t h = ld16(p + 2 * i);
    v[2 * i] = (uint8_t)h;
    v[2 * i + 1] = (uint8_t)(h >> 8);
  }
}

// kvalues_iq4nl[q] (quant_formats.h), q in [0, 15], from registers: bytes 0..7 of the table in the words of the
// first __byte_perm, bytes 8..15 in the second (no memory table, so no serialised lookups across a warp)
__device__ __forceinline__ int iq4nl_value(int q) {
  const uint32_t b = q < 8 ? __byte_perm(0xBFAD9881u, 0xF6EADDCFu, (uint32_t)q)
                           : __byte_perm(0x26190D01u, 0x71594535u, (uint32_t)(q - 8));
  return (int)(int8_t)(b & 0xFF);
}

// the 6-bit scale and min of group g (0..7) of a Q4_K / Q5_K super-block's 12 packed bytes (ggml's
// get_scale_min_k4)
__device__ __forceinline__ void scale_min_k4(const uint8_t* q, int g, int& sc, int& mn) {
  if (g < 4) {
    sc = q[g] & 63;
    mn = q[g + 4] & 63;
  } else {
    sc = (q[g + 4] & 0xF) | ((q[g - 4] >> 6) << 4);
    mn = (q[g + 4] >> 4) | ((q[g] >> 6) << 4);
  }
}

// ---- per-type float expressions (the CPU's, see the header) ----

__device__ __forceinline__ float sym(float s, int q_minus_offset) { return __fmul_rn(s, (float)q_minus_offset); }
__device__ __forceinline__ float with_min(float s, int u, float m) { return __fadd_rn(__fmul_rn(s, (float)u), m); }
__device__ __forceinline__ float minus_min(float s, int u, float dm) { return __fsub_rn(__fmul_rn(s, (float)u), dm); }

// Weights i0 .. i0 + 7 (i0 a multiple of 8) of a row of k weights of type T -> out[8]. Quantized types: i0 + 8 <= k
// (k is whole blocks); float types: entries at or past k are 0.
template <int T>
__device__ __forceinline__ void decode8(const uint8_t* row, int k, int i0, float out[8]);

// 32-weight blocks: weight j < 16 in the low nibble of qs[j], weight j >= 16 in the high nibble of qs[j - 16]; the
// 8 weights from o = i0 % 32 are the nibbles (low for o < 16) of qs[o % 16 ..]
__device__ __forceinline__ void nibbles8(const uint8_t* qs, int o, int u[8]) {
  uint8_t v[8];
  ld8(qs + (o & 15), v);
  const int shift = o < 16 ? 0 : 4;
#pragma unroll
  for (int i = 0; i < 8; ++i) u[i] = (v[i] >> shift) & 15;
}
// bit 4 of the weights from o of a Q5 block: bit (o + i) of the little-endian qh word
__device__ __forceinline__ void high_bits8(uint32_t qh, int o, int u[8]) {
#pragma unroll
  for (int i = 0; i < 8; ++i) u[i] |= (int)((qh >> (o + i)) & 1u) << 4;
}

template <>
__device__ __forceinline__ void decode8<(int)QType::Q4_0>(const uint8_t* row, int, int i0, float out[8]) {
  const uint8_t* b = row + (size_t)(i0 / 32) * sizeof(block_q4_0);
  const float d = ld_f16(b);
  int u[8];
  nibbles8(b + 2, i0 % 32, u);
#pragma unroll
  for (int i = 0; i < 8; ++i) out[i] = sym(d, u[i] - 8);
}

template <>
__device__ __forceinline__ void decode8<(int)QType::Q4_1>(const uint8_t* row, int, int i0, float out[8]) {
  const uint8_t* b = row + (size_t)(i0 / 32) * sizeof(block_q4_1);
  const float d = ld_f16(b), m = ld_f16(b + 2);
  int u[8];
  nibbles8(b + 4, i0 % 32, u);
#pragma unroll
  for (int i = 0; i < 8; ++i) out[i] = with_min(d, u[i], m);
}

template <>
__device__ __forceinline__ void decode8<(int)QType::Q5_0>(const uint8_t* row, int, int i0, float out[8]) {
  const uint8_t* b = row + (size_t)(i0 / 32) * sizeof(block_q5_0);
  const float d = ld_f16(b);
  int u[8];
  nibbles8(b + 6, i0 % 32, u);
  high_bits8(ld32(b + 2), i0 % 32, u);
#pragma unroll
  for (int i = 0; i < 8; ++i) out[i] = sym(d, u[i] - 16);
}

template <>
__device__ __forceinline__ void decode8<(int)QType::Q5_1>(const uint8_t* row, int, int i0, float out[8]) {
  const uint8_t* b = row + (size_t)(i0 / 32) * sizeof(block_q5_1);
  const float d = ld_f16(b), m = ld_f16(b + 2);
  int u[8];
  nibbles8(b + 8, i0 % 32, u);
  high_bits8(ld32(b + 4), i0 % 32, u);
#pragma unroll
  for (int i = 0; i < 8; ++i) out[i] = with_min(d, u[i], m);
}

template <>
__device__ __forceinline__ void decode8<(int)QType::Q8_0>(const uint8_t* row, int, int i0, float out[8]) {
  const uint8_t* b = row + (size_t)(i0 / 32) * sizeof(block_q8_0);
  const float d = ld_f16(b);
  uint8_t v[8];
  ld8(b + 2 + i0 % 32, v);
#pragma unroll
  for (int i = 0; i < 8; ++i) out[i] = sym(d, (int)(int8_t)v[i]);
}

template <>
__device__ __forceinline__ void decode8<(int)QType::IQ4_NL>(const uint8_t* row, int, int i0, float out[8]) {
  const uint8_t* b = row + (size_t)(i0 / 32) * sizeof(block_iq4_nl);
  const float d = ld_f16(b);
  int u[8];
  nibbles8(b + 2, i0 % 32, u);
#pragma unroll
  for (int i = 0; i < 8; ++i) out[i] = sym(d, iq4nl_value(u[i]));
}

// K-quants: o = i0 % 256 is the position in the super-block b
template <>
__device__ __forceinline__ void decode8<(int)QType::Q2_K>(const uint8_t* row, int, int i0, float out[8]) {
  // weight o: bits 2j, 2j + 1 of qs[32h + l] (o = 128h + 32j + l); groups of 16: scales[o / 16], low nibble the
  // scale, high nibble the min
  const uint8_t* b = row + (size_t)(i0 / 256) * sizeof(block_q2_K);
  const int o = i0 % 256, h = o / 128, j = (o % 128) / 32, l = o % 32;
  const float d = ld_f16(b + 80), dmin = ld_f16(b + 82);
  const int sc = b[o / 16];
  const float s = __fmul_rn(d, (float)(sc & 15)), dm = __fmul_rn(dmin, (float)(sc >> 4));
  uint8_t v[8];
  ld8(b + 16 + 32 * h + l, v);
#pragma unroll
  for (int i = 0; i < 8; ++i) out[i] = minus_min(s, (v[i] >> (2 * j)) & 3, dm);
}

template <>
__device__ __forceinline__ void decode8<(int)QType::Q3_K>(const uint8_t* row, int, int i0, float out[8]) {
  // weight o = 128h + 32j + l: low bits 2j, 2j + 1 of qs[32h + l], bit 2 = bit 4h + j of hmask[l]; u - 4 the
  // signed value. Group g = o / 16: 6-bit scale, low 4 bits in scales[g % 8] (high nibble for g >= 8), high 2
  // bits at bit 2 (g / 4) of scales[8 + g % 4]; s = d * (scale - 32)
  const uint8_t* b = row + (size_t)(i0 / 256) * sizeof(block_q3_K);
  const int o = i0 % 256, h = o / 128, j = (o % 128) / 32, l = o % 32, g = o / 16;
  const uint8_t* scales = b + 96;
  const int sc = ((scales[g % 8] >> (4 * (g / 8))) & 15) | (((scales[8 + g % 4] >> (2 * (g / 4))) & 3) << 4);
  const float s = __fmul_rn(ld_f16(b + 108), (float)(sc - 32));
  uint8_t q[8], hm[8];
  ld8(b + 32 + 32 * h + l, q);
  ld8(b + l, hm);
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int u = ((q[i] >> (2 * j)) & 3) | (((hm[i] >> (4 * h + j)) & 1) << 2);
    out[i] = sym(s, u - 4);
  }
}

// Q4_K / Q5_K: group g = o / 32 is the low (even g) or high (odd g) nibble of qs[32 (g / 2) + o % 32]
__device__ __forceinline__ void k4_scales(const uint8_t* b, int g, float& s, float& dm) {
  int sc, mn;
  scale_min_k4(b + 4, g, sc, mn);
  s = __fmul_rn(ld_f16(b), (float)sc);
  dm = __fmul_rn(ld_f16(b + 2), (float)mn);
}

template <>
__device__ __forceinline__ void decode8<(int)QType::Q4_K>(const uint8_t* row, int, int i0, float out[8]) {
  const uint8_t* b = row + (size_t)(i0 / 256) * sizeof(block_q4_K);
  const int o = i0 % 256, g = o / 32;
  float s, dm;
  k4_scales(b, g, s, dm);
  uint8_t v[8];
  ld8(b + 16 + 32 * (g / 2) + o % 32, v);
#pragma unroll
  for (int i = 0; i < 8; ++i) out[i] = minus_min(s, (v[i] >> (4 * (g & 1))) & 15, dm);
}

template <>
__device__ __forceinline__ void decode8<(int)QType::Q5_K>(const uint8_t* row, int, int i0, float out[8]) {
  // as Q4_K, qs at 48, and bit 4 of weight o is bit g of qh[o % 32] (qh at 16)
  const uint8_t* b = row + (size_t)(i0 / 256) * sizeof(block_q5_K);
  const int o = i0 % 256, g = o / 32;
  float s, dm;
  k4_scales(b, g, s, dm);
  uint8_t v[8], hv[8];
  ld8(b + 48 + 32 * (g / 2) + o % 32, v);
  ld8(b + 16 + o % 32, hv);
#pragma unroll
  for (int i = 0; i < 8; ++i) out[i] = minus_min(s, ((v[i] >> (4 * (g & 1))) & 15) | (((hv[i] >> g) & 1) << 4), dm);
}

template <>
__device__ __forceinline__ void decode8<(int)QType::Q6_K>(const uint8_t* row, int, int i0, float out[8]) {
  // weight o = 128h + 32l + i: low 4 bits from ql[64h + 32(l & 1) + i] (high nibble for l >= 2), bits 4..5 from
  // bits 2l, 2l + 1 of qh[32h + i] (qh at 128); groups of 16: s = d * scales[o / 16] (int8 at 192, d at 208)
  const uint8_t* b = row + (size_t)(i0 / 256) * sizeof(block_q6_K);
  const int o = i0 % 256, h = o / 128, l = (o % 128) / 32, i = o % 32;
  const float s = __fmul_rn(ld_f16(b + 208), (float)(int8_t)b[192 + o / 16]);
  uint8_t lo[8], hi[8];
  ld8(b + 64 * h + 32 * (l & 1) + i, lo);
  ld8(b + 128 + 32 * h + i, hi);
#pragma unroll
  for (int t = 0; t < 8; ++t) {
    const int u = ((lo[t] >> (4 * (l >> 1))) & 15) | (((hi[t] >> (2 * l)) & 3) << 4);
    out[t] = sym(s, u - 32);
  }
}

template <>
__device__ __forceinline__ void decode8<(int)QType::IQ4_XS>(const uint8_t* row, int, int i0, float out[8]) {
  // group g = o / 32: 6-bit scale ls, low 4 bits in scales_l[g / 2] (high nibble for odd g), high 2 bits at bit 2g
  // of scales_h; s = d * (ls - 32); the group's weights as an IQ4_NL block's, from qs[16g] (qs at 8)
  const uint8_t* b = row + (size_t)(i0 / 256) * sizeof(block_iq4_xs);
  const int o = i0 % 256, g = o / 32;
  const int ls = ((b[4 + g / 2] >> (4 * (g % 2))) & 15) | (int)(((ld16(b + 2) >> (2 * g)) & 3) << 4);
  const float s = __fmul_rn(ld_f16(b), (float)(ls - 32));
  int u[8];
  nibbles8(b + 8 + 16 * g, o % 32, u);
#pragma unroll
  for (int i = 0; i < 8; ++i) out[i] = sym(s, iq4nl_value(u[i]));
}

// float types: one element each, 0 past k
template <>
__device__ __forceinline__ void decode8<(int)QType::F32>(const uint8_t* row, int k, int i0, float out[8]) {
  const float* r = reinterpret_cast<const float*>(row);
#pragma unroll
  for (int i = 0; i < 8; ++i) out[i] = i0 + i < k ? r[i0 + i] : 0.0f;
}

template <>
__device__ __forceinline__ void decode8<(int)QType::F16>(const uint8_t* row, int k, int i0, float out[8]) {
#pragma unroll
  for (int i = 0; i < 8; ++i) out[i] = i0 + i < k ? ld_f16(row + 2 * (size_t)(i0 + i)) : 0.0f;
}

template <>
__device__ __forceinline__ void decode8<(int)QType::BF16>(const uint8_t* row, int k, int i0, float out[8]) {
#pragma unroll
  for (int i = 0; i < 8; ++i) out[i] = i0 + i < k ? __uint_as_float(ld16(row + 2 * (size_t)(i0 + i)) << 16) : 0.0f;
}

}  // namespace lll::cuda
