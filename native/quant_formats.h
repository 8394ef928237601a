// GGML block formats: one struct per quantized type, byte-identical to GGUF files.
// Shared by every kernel (C++ now, CUDA later). Sizes are checked at compile time.
#pragma once
#include <cstdint>
#include <cstring>

namespace lll {

using f16_t = uint16_t;   // IEEE half, stored raw
using bf16_t = uint16_t;  // bfloat16, stored raw

constexpr int QK = 32;    // weights per simple block
constexpr int QK_K = 256; // weights per K-quant super-block

enum class QType : int {
  F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8,
  Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, IQ4_NL = 20, IQ4_XS = 23, BF16 = 30,
  MXFP4 = 39,
  // internal layouts (never in a file; ids past GGML's): repack.h makes them from a GGML type at load
  Q5_0X8 = 48, Q4_0X8 = 49, Q4_1X8 = 50, Q5_1X8 = 51, Q4_KX = 52,
};
constexpr int N_TYPE_IDS = 64;  // the kernel tables' per-type arrays: GGML's ids (< 40) and the internal ones

// The X8 layouts: the blocks of Q4_0, Q4_1, Q5_0 or Q5_1 regrouped per row so the small-N kernels decode them with
// shifts and masks alone and load a span's scales at once (repack.h). A row of 32j weights (j a multiple of 4) is
// spans of 8 blocks and, where j % 8 == 4, one last span of 4; a span of n blocks b = 0 .. n-1 (blocks s0 + b of the
// row, in order) takes n times the type's block bytes, as in the file:
//   d[n]        f16 scales
//   m[n]        f16 mins (Q4_1, Q5_1)
//   qs[n/2][32] byte i of vector p: low nibble = the 4 low bits of weight i of block 2p, high nibble = block 2p + 1
//   qh          (Q5_0, Q5_1) n = 8: 32 bytes, bit b of byte i = the fifth bit of weight i of block b;
//               n = 4: 16 bytes, bit b of byte i = weight i of block b, bit 4 + b = weight 16 + i of block b
// The weights are the type's (w = d * (q - offset), or d * q + m): the same weights, scales and groups, so products
// give the same bits.
constexpr int X8_SPAN = 8;

// 4.5 bpw: w = d * (q - 8), q in [0, 15]
struct block_q4_0 { f16_t d; uint8_t qs[QK / 2]; };
static_assert(sizeof(block_q4_0) == 18, "q4_0 size");
// 5.0 bpw: w = d * q + m
struct block_q4_1 { f16_t d; f16_t m; uint8_t qs[QK / 2]; };
static_assert(sizeof(block_q4_1) == 20, "q4_1 size");
// 5.5 bpw: w = d * (q - 16), q in [0, 31]; bit 4 of weight j in qh (little-endian u32) bit j
struct block_q5_0 { f16_t d; uint8_t qh[4]; uint8_t qs[QK / 2]; };
static_assert(sizeof(block_q5_0) == 22, "q5_0 size");
// 6.0 bpw: w = d * q + m
struct block_q5_1 { f16_t d; f16_t m; uint8_t qh[4]; uint8_t qs[QK / 2]; };
static_assert(sizeof(block_q5_1) == 24, "q5_1 size");
// 8.5 bpw: w = d * q
struct block_q8_0 { f16_t d; int8_t qs[QK]; };
static_assert(sizeof(block_q8_0) == 34, "q8_0 size");
// 2.625 bpw: 16 groups of 16; w = d * (sc & 15) * q - dmin * (sc >> 4), q in [0, 3]
struct block_q2_K { uint8_t scales[QK_K / 16]; uint8_t qs[QK_K / 4]; f16_t d; f16_t dmin; };
static_assert(sizeof(block_q2_K) == 84, "q2_K size");
// 3.4375 bpw: 16 groups of 16; w = d * (sc - 32) * (q - 4), q in [0, 7], 6-bit scales packed in 12 bytes
struct block_q3_K { uint8_t hmask[QK_K / 8]; uint8_t qs[QK_K / 4]; uint8_t scales[12]; f16_t d; };
static_assert(sizeof(block_q3_K) == 110, "q3_K size");
// 4.5 bpw: 8 groups of 32; w = d * sc * q - dmin * m, q in [0, 15], 6-bit sc and m in 12 bytes
struct block_q4_K { f16_t d; f16_t dmin; uint8_t scales[12]; uint8_t qs[QK_K / 2]; };
static_assert(sizeof(block_q4_K) == 144, "q4_K size");
// Q4_Kx (internal, repack.h): a Q4_K super-block with its scales unpacked, 152 bytes where the file's takes 144:
//   d      the super-block scale, widened from f16 to float (exactly)
//   mdmin  -dmin, widened likewise
//   sc[g], mn[g]  group g's 6-bit scale and min (ggml's get_scale_min_k4), one byte each
//   qs     as Q4_K's
// w = d * sc[g] * q + mdmin * mn[g]: the same weights, group scales (d * sc[g] and mdmin * mn[g], float products as the
// Q4_K decoders form them) and groups, so products give the same bits.
struct block_q4_kx { float d; float mdmin; uint8_t sc[8]; uint8_t mn[8]; uint8_t qs[QK_K / 2]; };
static_assert(sizeof(block_q4_kx) == 152, "q4_Kx size");
// 5.5 bpw: as q4_K with a fifth bit in qh, q in [0, 31]
struct block_q5_K { f16_t d; f16_t dmin; uint8_t scales[12]; uint8_t qh[QK_K / 8]; uint8_t qs[QK_K / 2]; };
static_assert(sizeof(block_q5_K) == 176, "q5_K size");
// 6.5625 bpw: 16 groups of 16; w = d * sc * (q - 32), q in [0, 63], sc int8
struct block_q6_K { uint8_t ql[QK_K / 2]; uint8_t qh[QK_K / 4]; int8_t scales[QK_K / 16]; f16_t d; };
static_assert(sizeof(block_q6_K) == 210, "q6_K size");
// 4.5 bpw: w = d * kvalues_iq4nl[q], q in [0, 15]
struct block_iq4_nl { f16_t d; uint8_t qs[QK / 2]; };
static_assert(sizeof(block_iq4_nl) == 18, "iq4_nl size");
// 4.25 bpw: 8 groups of 32; w = d * (ls - 32) * kvalues_iq4nl[q], 6-bit ls split over scales_l / scales_h
struct block_iq4_xs { f16_t d; uint16_t scales_h; uint8_t scales_l[QK_K / 64]; uint8_t qs[QK_K / 2]; };
static_assert(sizeof(block_iq4_xs) == 136, "iq4_xs size");
// 4.25 bpw: w = e8m0_half(e) * kvalues_mxfp4[q], q in [0, 15]; weight j < 16 the low nibble of qs[j], j + 16 its
// high nibble (OCP microscaling FP4: E2M1 values times an E8M0 power of two; both halved and doubled here, exactly)
struct block_mxfp4 { uint8_t e; uint8_t qs[QK / 2]; };
static_assert(sizeof(block_mxfp4) == 17, "mxfp4 size");

alignas(16) constexpr int8_t kvalues_iq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                                    1,   13,   25,  38,  53,  69,  89, 113};
// the E2M1 values doubled (ggml's kvalues_mxfp4): sign bit 3, magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6 times 2
alignas(16) constexpr int8_t kvalues_mxfp4[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// E8M0 exponent e -> 2^(e - 128) (half of E8M0's 2^(e - 127), to go with the doubled kvalues_mxfp4), exact for
// every e: e = 0, 1 give the float32 subnormals 2^-128, 2^-127; e = 255 gives 2^127, not NaN (ggml's
// ggml_e8m0_to_fp32_half, gguf-py's MXFP4.e8m0_to_fp32_half)
inline uint32_t e8m0_half_bits(uint8_t e) { return e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23; }
inline float e8m0_half(uint8_t e) {
  const uint32_t bits = e8m0_half_bits(e);
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

struct TypeInfo {
  QType type;
  const char* name;
  int block_size;  // weights per block
  int type_size;   // bytes per block
};

// returns nullptr for a type the kernels do not compute
const TypeInfo* type_info(int type_id);

// a Q3_K super-block's 12 packed bytes -> its 16 six-bit scales sc[0..15] (0..63; the weight scale is d * (sc - 32)),
// as ggml unpacks them
inline void scales_q3k(const uint8_t* q, uint8_t sc[16]) {
  uint32_t aux[4];
  std::memcpy(aux, q, 12);
  const uint32_t km1 = 0x03030303, km2 = 0x0f0f0f0f, tmp = aux[2];
  aux[2] = ((aux[0] >> 4) & km2) | (((tmp >> 4) & km1) << 4);
  aux[3] = ((aux[1] >> 4) & km2) | (((tmp >> 6) & km1) << 4);
  aux[0] = (aux[0] & km2) | (((tmp >> 0) & km1) << 4);
  aux[1] = (aux[1] & km2) | (((tmp >> 2) & km1) << 4);
  std::memcpy(sc, aux, 16);
}

// a K-quant super-block's 12 packed bytes of 6-bit scales and mins (Q4_K, Q5_K) -> sc[0..7] the scales, sc[8..15] the
// mins (ggml's get_scale_min_k4); repack.h's Q4_Kx keeps them so
inline void scales_k4(const uint8_t* q, uint8_t sc[16]) {
  uint32_t t[4];
  std::memcpy(t, q, 12);
  const uint32_t km1 = 0x3f3f3f3f, km2 = 0x0f0f0f0f, km3 = 0x03030303;
  t[3] = ((t[2] >> 4) & km2) | (((t[1] >> 6) & km3) << 4);
  const uint32_t aux = t[1] & km1;
  t[1] = (t[2] & km2) | (((t[0] >> 6) & km3) << 4);
  t[2] = aux;
  t[0] &= km1;
  std::memcpy(sc, t, 16);
}

// exact IEEE half -> float (handles subnormals, inf, nan)
inline float f16_to_f32(f16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  uint32_t bits;
  if (exp == 0) {
    if (man == 0) {
      bits = sign;
    } else {  // subnormal: renormalise
      int e = -1;
      do { man <<= 1; ++e; } while (!(man & 0x400));
      bits = sign | (uint32_t)(127 - 15 - e) << 23 | (man & 0x3ff) << 13;
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | man << 13;
  } else {
    bits = sign | (exp + 127 - 15) << 23 | man << 13;
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline float bf16_to_f32(bf16_t h) {
  uint32_t bits = (uint32_t)h << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

}  // namespace lll
