// One 32-weight step of a quantized weight row, as both int8 products take it (qgemv_kernel.cuh, a warp per weight
// row; mmq_kernel.cuh, tensor-core tiles): decode_step<T> decodes step s once into eight 32-bit words of four int8
// weights each (weights 4j .. 4j + 3 of the step in activation order: the values the integer products multiply,
// Q4_0 / Q4_1 / Q4_K 0..15, Q5_0 0..31, Q6_K 0..63, Q8_0 -128..127) and the step's two scales; step_term<T> turns a
// step's exact int32 sums against one activation row into its float term, the CPU's canonical terms (kernels.h:
// isum * s * dx, plus m * dx * sum(xq) for types with a min, minus the offset times sum(xq) for the symmetric
// ones). Every float operation is spelt with an _rn intrinsic, so nvcc contracts none of them into a fused
// multiply-add: the two kernels compute each term with the same operations and get the same bits. The tests run
// this source on the CPU too (device_compat.cuh).
//
// Block layouts (quant_formats.h) are byte-identical to GGUF; blocks of 18, 22, 34 and 210 bytes are only 2-byte
// aligned, so their words are assembled from 16-bit loads (Q4_1's and Q4_K's blocks are whole words).
#pragma once
#include <cstdint>

#include "../quant_formats.h"
#include "dequant.cuh"
#include "device_compat.cuh"

namespace lll::cuda {

__device__ __forceinline__ float f16(uint16_t h) { return __half2float(__ushort_as_half(h)); }
// the 32-bit word at a 2-byte aligned address
__device__ __forceinline__ int word2(const uint8_t* p) {
  const uint16_t* h = reinterpret_cast<const uint16_t*>(p);
  return (int)((uint32_t)h[0] | ((uint32_t)h[1] << 16));
}
__device__ __forceinline__ int word4(const uint8_t* p) { return *reinterpret_cast<const int*>(p); }
// bits 0..3 of h -> bit 4 of bytes 0..3
__device__ __forceinline__ int spread_bit4(uint32_t h) {
  return (int)(((h & 1u) << 4) | ((h & 2u) << 11) | ((h & 4u) << 18) | ((h & 8u) << 25));
}

// a step's scales: a = d (Q4_0, Q5_0, Q8_0), d and the min m (Q4_1), d * sc and dmin * mn (Q4_K), or the scales of
// its two 16-weight groups (Q6_K)
struct StepScales {
  float a, b;
};

template <int T>
__device__ void decode_step(const uint8_t* row, int s, int u[8], StepScales& sc);

template <>
__device__ __forceinline__ void decode_step<(int)QType::Q4_0>(const uint8_t* row, int s, int u[8], StepScales& sc) {
  const uint8_t* b = row + (size_t)s * sizeof(block_q4_0);
  sc = {f16(*reinterpret_cast<const uint16_t*>(b)), 0.0f};
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int q = word2(b + 2 + 4 * j);
    u[j] = q & 0x0F0F0F0F;
    u[j + 4] = (q >> 4) & 0x0F0F0F0F;
  }
}

template <>
__device__ __forceinline__ void decode_step<(int)QType::Q4_1>(const uint8_t* row, int s, int u[8], StepScales& sc) {
  const uint8_t* b = row + (size_t)s * sizeof(block_q4_1);
  sc = {f16(*reinterpret_cast<const uint16_t*>(b)), f16(*reinterpret_cast<const uint16_t*>(b + 2))};
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int q = word4(b + 4 + 4 * j);
    u[j] = q & 0x0F0F0F0F;
    u[j + 4] = (q >> 4) & 0x0F0F0F0F;
  }
}

template <>
__device__ __forceinline__ void decode_step<(int)QType::Q5_0>(const uint8_t* row, int s, int u[8], StepScales& sc) {
  const uint8_t* b = row + (size_t)s * sizeof(block_q5_0);
  sc = {f16(*reinterpret_cast<const uint16_t*>(b)), 0.0f};
  const uint32_t qh = (uint32_t)word2(b + 2);
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int q = word2(b + 6 + 4 * j);
    u[j] = (q & 0x0F0F0F0F) | spread_bit4(qh >> (4 * j));
    u[j + 4] = ((q >> 4) & 0x0F0F0F0F) | spread_bit4(qh >> (16 + 4 * j));
  }
}

template <>
__device__ __forceinline__ void decode_step<(int)QType::Q8_0>(const uint8_t* row, int s, int u[8], StepScales& sc) {
  const uint8_t* b = row + (size_t)s * sizeof(block_q8_0);
  sc = {f16(*reinterpret_cast<const uint16_t*>(b)), 0.0f};
#pragma unroll
  for (int j = 0; j < 8; ++j) u[j] = word2(b + 2 + 4 * j);
}

// step g of a super-block is its group g: low nibbles of qs[32 (g/2) ..] (even g), high (odd)
template <>
__device__ __forceinline__ void decode_step<(int)QType::Q4_K>(const uint8_t* row, int s, int u[8], StepScales& sc) {
  const uint8_t* b = row + (size_t)(s / 8) * sizeof(block_q4_K);
  const int g = s % 8;
  int isc, imn;
  scale_min_k4(b + 4, g, isc, imn);
  sc = {__fmul_rn(f16(*reinterpret_cast<const uint16_t*>(b)), (float)isc),
        __fmul_rn(f16(*reinterpret_cast<const uint16_t*>(b + 2)), (float)imn)};
  const uint8_t* qs = b + 16 + 32 * (g / 2);
  const int shift = 4 * (g & 1);
#pragma unroll
  for (int j = 0; j < 8; ++j) u[j] = (word4(qs + 4 * j) >> shift) & 0x0F0F0F0F;
}

// step q = 4h + l of a super-block: weights 128h + 32l + i; low 4 bits from ql[64h + 32(l & 1) + i] (high nibble for
// l >= 2), bits 4..5 from bits 2l, 2l + 1 of qh[32h + i]; its 16-weight groups scaled by scales[2q], scales[2q + 1]
template <>
__device__ __forceinline__ void decode_step<(int)QType::Q6_K>(const uint8_t* row, int s, int u[8], StepScales& sc) {
  const uint8_t* b = row + (size_t)(s / 8) * sizeof(block_q6_K);
  const int q = s % 8, h = q / 4, l = q % 4;
  const uint8_t* ql = b + 64 * h + 32 * (l & 1);
  const uint8_t* qh = b + 128 + 32 * h;
  const int8_t* scales = reinterpret_cast<const int8_t*>(b + 192);
  const float d = f16(*reinterpret_cast<const uint16_t*>(b + 208));
  sc = {__fmul_rn(d, (float)scales[2 * q]), __fmul_rn(d, (float)scales[2 * q + 1])};
  const int lshift = 4 * (l >= 2), hshift = 2 * l;
#pragma unroll
  for (int j = 0; j < 8; ++j)
    u[j] = ((word2(ql + 4 * j) >> lshift) & 0x0F0F0F0F) | (((word2(qh + 4 * j) >> hshift) & 0x03030303) << 4);
}

// The term of a step against one activation row of scale dx: s0, s1 the sums of u * xq over the step's weights 0..15
// and 16..31, x0, x1 the sums of xq there (all exact). Only Q6_K keeps the halves apart; the others add them
// (integer additions, exact, so any split of the step gives the same term).
template <int T>
__device__ __forceinline__ float step_term(int s0, int s1, int x0, int x1, StepScales sc, float dx) {
  if constexpr (T == (int)QType::Q4_0)
    return __fmul_rn((float)(s0 + s1 - 8 * (x0 + x1)), __fmul_rn(sc.a, dx));
  else if constexpr (T == (int)QType::Q5_0)
    return __fmul_rn((float)(s0 + s1 - 16 * (x0 + x1)), __fmul_rn(sc.a, dx));
  else if constexpr (T == (int)QType::Q8_0)
    return __fmul_rn((float)(s0 + s1), __fmul_rn(sc.a, dx));
  else if constexpr (T == (int)QType::Q4_1)
    return __fadd_rn(__fmul_rn((float)(s0 + s1), __fmul_rn(sc.a, dx)), __fmul_rn(sc.b, __fmul_rn(dx, (float)(x0 + x1))));
  else if constexpr (T == (int)QType::Q4_K)
    return __fsub_rn(__fmul_rn((float)(s0 + s1), __fmul_rn(sc.a, dx)), __fmul_rn(sc.b, __fmul_rn(dx, (float)(x0 + x1))));
  else  // Q6_K
    return __fmul_rn(dx, __fadd_rn(__fmul_rn((float)(s0 - 32 * x0), sc.a), __fmul_rn((float)(s1 - 32 * x1), sc.b)));
}

// ---- the order in which a product's terms meet (both kernels) ----
// An output's steps go in chunks of 32 (1,024 weights). A chunk's 32 terms (the missing ones of a last, short
// chunk are +0.0) are summed pairwise in step order: ((t0 + t1) + (t2 + t3)) + ..., which is a warp's xor-shuffle
// reduction at offsets 1, 2, 4, 8, 16 when lane l holds t_l, and a stack of five partial sums when one thread takes
// the terms one after another (tree_push). The chunk sums are added to the output in chunk order, from 0.0f.

// leaf i (0..31) of a chunk into the stack st (slot l holds a sum of 2^l leaves while bit l of i is set); after
// leaf 31, st[0] holds the chunk's sum
__device__ __forceinline__ void tree_push(float st[5], int i, float v) {
#pragma unroll
  for (int l = 0; l < 5; ++l) {
    if (!((i >> l) & 1)) {
      st[l] = v;
      return;
    }
    v = __fadd_rn(st[l], v);
  }
  st[0] = v;
}

}  // namespace lll::cuda
