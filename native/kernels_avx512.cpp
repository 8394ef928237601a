// AVX-512 (F, BW, VL, VNNI) path: the generic kernels compiled for AVX-512, with the two hot tile
// kernels written by hand: the 16-row interleave (a 16x8 dword transpose per 32 weights) and the
// VNNI micro-kernel, whose 16 int32 lanes are the 16 weight rows of the tile (no horizontal sums).
#define LLL_NS avx512
#include "kernels_generic.inc"

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <type_traits>
#include <vector>

namespace lll {
namespace avx512 {

// ---- interleave: u_rows [16][kc] -> u_il [kc/4][16][4] ---------------------------------------------
// Per 32 weights the 16 rows hold 16x8 dwords; three rounds of two-source dword permutes transpose
// them. The permute indices are derived once by tracking which (row, dword) each lane holds.
struct TransposeIdx {
  __m512i s1[2], s2[2], s3[2];  // [output parity]
};

static std::vector<std::array<int, 2>> lanes_of(int r_lo, int r_n, int j_lo, int j_n, bool by_row) {
  std::vector<std::array<int, 2>> v;
  if (by_row) {
    for (int r = r_lo; r < r_lo + r_n; ++r)
      for (int j = j_lo; j < j_lo + j_n; ++j) v.push_back({r, j});
  } else {
    for (int j = j_lo; j < j_lo + j_n; ++j)
      for (int r = r_lo; r < r_lo + r_n; ++r) v.push_back({r, j});
  }
  return v;
}

static __m512i index_for(const std::vector<std::array<int, 2>>& a, const std::vector<std::array<int, 2>>& b,
                         const std::vector<std::array<int, 2>>& want) {
  alignas(64) int idx[16];
  for (int l = 0; l < 16; ++l) {
    auto ia = std::find(a.begin(), a.end(), want[l]);
    idx[l] = ia != a.end() ? (int)(ia - a.begin()) : 16 + (int)(std::find(b.begin(), b.end(), want[l]) - b.begin());
  }
  return _mm512_load_si512(idx);
}

static const TransposeIdx& transpose_idx() {
  // Rows are relative to the sources' first row; every stage has the same pattern for each pair.
  static TransposeIdx t = [] {
    TransposeIdx x;
    // stage 1: A (rows 0,1 | j 0..7, by row) + B (rows 2,3) -> C_h: rows 0..3, j 4h..4h+3, by j
    auto A = lanes_of(0, 2, 0, 8, true), B = lanes_of(2, 2, 0, 8, true);
    for (int h = 0; h < 2; ++h) x.s1[h] = index_for(A, B, lanes_of(0, 4, 4 * h, 4, false));
    // stage 2: C (rows 0..3, j 0..3 by j) + C' (rows 4..7) -> D_e: rows 0..7, j 2e..2e+1, by j
    auto C0 = lanes_of(0, 4, 0, 4, false), C1 = lanes_of(4, 4, 0, 4, false);
    for (int e = 0; e < 2; ++e) x.s2[e] = index_for(C0, C1, lanes_of(0, 8, 2 * e, 2, false));
    // stage 3: D (rows 0..7, j 0..1 by j) + D' (rows 8..15) -> Z_f: rows 0..15, j f, by row
    auto D0 = lanes_of(0, 8, 0, 2, false), D1 = lanes_of(8, 8, 0, 2, false);
    for (int f = 0; f < 2; ++f) x.s3[f] = index_for(D0, D1, lanes_of(0, 16, f, 1, true));
    return x;
  }();
  return t;
}

static void interleave16_avx512(const uint8_t* u_rows, int kc, uint8_t* u_il) {
  const TransposeIdx& T = transpose_idx();
  for (int k0 = 0; k0 < kc; k0 += 32) {
    __m512i A[8], C[8], D[8];
    for (int i = 0; i < 8; ++i) {
      __m256i lo = _mm256_loadu_si256((const __m256i*)(u_rows + (2 * i) * kc + k0));
      __m256i hi = _mm256_loadu_si256((const __m256i*)(u_rows + (2 * i + 1) * kc + k0));
      A[i] = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
    }
    // C[2p + h]: rows 4p..4p+3, dwords 4h..4h+3
    for (int p = 0; p < 4; ++p)
      for (int h = 0; h < 2; ++h) C[2 * p + h] = _mm512_permutex2var_epi32(A[2 * p], T.s1[h], A[2 * p + 1]);
    // D[4q + 2h + e]: rows 8q..8q+7, dwords 4h+2e..4h+2e+1
    for (int q = 0; q < 2; ++q)
      for (int h = 0; h < 2; ++h)
        for (int e = 0; e < 2; ++e)
          D[4 * q + 2 * h + e] = _mm512_permutex2var_epi32(C[4 * q + h], T.s2[e], C[4 * q + 2 + h]);
    uint8_t* out = u_il + (k0 >> 2) * 64;
    for (int h = 0; h < 2; ++h)
      for (int e = 0; e < 2; ++e)
        for (int f = 0; f < 2; ++f) {
          const int j = 4 * h + 2 * e + f;
          _mm512_storeu_si512((__m512i*)(out + j * 64),
                              _mm512_permutex2var_epi32(D[2 * h + e], T.s3[f], D[4 + 2 * h + e]));
        }
  }
}


// ---- unpack: hand-vectorised for the common types (the rest use the generic loops) -------------
static inline __m256i nibbles32(const uint8_t* qs) {  // 16 bytes -> [lo nibbles (16) | hi nibbles (16)]
  const __m128i q = _mm_loadu_si128((const __m128i*)qs);
  const __m128i m4 = _mm_set1_epi8(15);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), m4), _mm_and_si128(q, m4));
}
static inline __m256i high_bit5(const uint8_t* qh) {  // bit j of a u32 -> 0x10 in byte j
  uint32_t h;
  std::memcpy(&h, qh, 4);
  return _mm256_maskz_set1_epi8((__mmask32)h, 16);
}
static inline __m256i iq4_lookup(__m256i idx) {
  const __m256i tbl = _mm256_broadcastsi128_si256(_mm_add_epi8(_mm_load_si128((const __m128i*)kvalues_iq4nl),
                                                               _mm_set1_epi8((char)128)));
  return _mm256_shuffle_epi8(tbl, idx);
}

// f16 at byte `off` of nb <= 8 consecutive blocks of `bs` bytes -> s[0..8) (zeros past nb)
static inline void scales8(const uint8_t* p, int bs, int nb, int off, float* s) {
  alignas(16) uint16_t h[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int i = 0; i < nb; ++i) std::memcpy(&h[i], p + i * bs + off, 2);
  _mm256_storeu_ps(s, _mm256_cvtph_ps(_mm_load_si128((const __m128i*)h)));
}
static inline void block_scales(const uint8_t* p, int bs, int nb, int off, float* s) {
  for (int i = 0; i < nb; i += 8) scales8(p + i * bs, bs, nb - i < 8 ? nb - i : 8, off, s + i);
}

static void unpack_q4_0_v(const uint8_t* __restrict p, int kc, uint8_t* __restrict u, float* __restrict s,
                          float* __restrict, int ss) {
  const block_q4_0* b = (const block_q4_0*)p;
  block_scales(p, sizeof(block_q4_0), kc / QK, 0, s);
  for (int i = 0; i < kc / QK; ++i) {
    _mm256_storeu_si256((__m256i*)(u + i * QK), nibbles32(b[i].qs));
  }
}
static void unpack_q4_1_v(const uint8_t* __restrict p, int kc, uint8_t* __restrict u, float* __restrict s,
                          float* __restrict m, int ss) {
  const block_q4_1* b = (const block_q4_1*)p;
  block_scales(p, sizeof(block_q4_1), kc / QK, 0, s);
  block_scales(p, sizeof(block_q4_1), kc / QK, 2, m);
  for (int i = 0; i < kc / QK; ++i) {
    _mm256_storeu_si256((__m256i*)(u + i * QK), nibbles32(b[i].qs));
  }
}
// two 16-byte nibble runs -> [lo a | hi a | lo b | hi b] (64 weights of two consecutive blocks)
static inline __m512i nibbles64(const uint8_t* qa, const uint8_t* qb) {
  const __m256i v = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i*)qa)),
                                            _mm_loadu_si128((const __m128i*)qb), 1);
  const __m256i m4 = _mm256_set1_epi8(15);
  const __m512i lo = _mm512_castsi256_si512(_mm256_and_si256(v, m4));
  const __m512i hi = _mm512_castsi256_si512(_mm256_and_si256(_mm256_srli_epi16(v, 4), m4));
  // qwords: lo = [a0 a1 b0 b1 ...], hi = [a0' a1' b0' b1' ...] -> [a0 a1 a0' a1' b0 b1 b0' b1']
  return _mm512_permutex2var_epi64(lo, _mm512_set_epi64(11, 10, 3, 2, 9, 8, 1, 0), hi);
}

static void unpack_q5_0_v(const uint8_t* __restrict p, int kc, uint8_t* __restrict u, float* __restrict s,
                          float* __restrict, int ss) {
  const block_q5_0* b = (const block_q5_0*)p;
  const int nb = kc / QK;
  block_scales(p, sizeof(block_q5_0), nb, 0, s);
  int i = 0;
  for (; i + 2 <= nb; i += 2) {
    uint32_t ha, hb;
    std::memcpy(&ha, b[i].qh, 4);
    std::memcpy(&hb, b[i + 1].qh, 4);
    const __m512i h = _mm512_maskz_set1_epi8((__mmask64)ha | (__mmask64)hb << 32, 16);
    _mm512_storeu_si512((void*)(u + i * QK), _mm512_or_si512(nibbles64(b[i].qs, b[i + 1].qs), h));
  }
  if (i < nb) _mm256_storeu_si256((__m256i*)(u + i * QK), _mm256_or_si256(nibbles32(b[i].qs), high_bit5(b[i].qh)));
}
static void unpack_q5_1_v(const uint8_t* __restrict p, int kc, uint8_t* __restrict u, float* __restrict s,
                          float* __restrict m, int ss) {
  const block_q5_1* b = (const block_q5_1*)p;
  block_scales(p, sizeof(block_q5_1), kc / QK, 0, s);
  block_scales(p, sizeof(block_q5_1), kc / QK, 2, m);
  for (int i = 0; i < kc / QK; ++i) {
    _mm256_storeu_si256((__m256i*)(u + i * QK), _mm256_or_si256(nibbles32(b[i].qs), high_bit5(b[i].qh)));
  }
}
static void unpack_q8_0_v(const uint8_t* __restrict p, int kc, uint8_t* __restrict u, float* __restrict s,
                          float* __restrict, int ss) {
  const block_q8_0* b = (const block_q8_0*)p;
  block_scales(p, sizeof(block_q8_0), kc / QK, 0, s);
  const __m256i bias = _mm256_set1_epi8((char)0x80);
  for (int i = 0; i < kc / QK; ++i) {
    _mm256_storeu_si256((__m256i*)(u + i * QK),
                        _mm256_xor_si256(_mm256_loadu_si256((const __m256i*)b[i].qs), bias));
  }
}
static void unpack_iq4_nl_v(const uint8_t* __restrict p, int kc, uint8_t* __restrict u, float* __restrict s,
                            float* __restrict, int ss) {
  const block_iq4_nl* b = (const block_iq4_nl*)p;
  block_scales(p, sizeof(block_iq4_nl), kc / QK, 0, s);
  for (int i = 0; i < kc / QK; ++i) {
    _mm256_storeu_si256((__m256i*)(u + i * QK), iq4_lookup(nibbles32(b[i].qs)));
  }
}
static void unpack_iq4_xs_v(const uint8_t* __restrict p, int kc, uint8_t* __restrict u, float* __restrict s,
                            float* __restrict, int ss) {
  const block_iq4_xs* b = (const block_iq4_xs*)p;
  for (int i = 0; i < kc / QK_K; ++i) {
    const float d = _cvtsh_ss(b[i].d);
    for (int g = 0; g < 8; ++g) {
      const int ls = ((b[i].scales_l[g / 2] >> (4 * (g % 2))) & 15) | (((b[i].scales_h >> (2 * g)) & 3) << 4);
      s[(i * 8 + g) * ss] = d * (float)(ls - 32);
      _mm256_storeu_si256((__m256i*)(u + i * QK_K + 32 * g), iq4_lookup(nibbles32(b[i].qs + 16 * g)));
    }
  }
}
// 32 bytes -> low nibbles at o, high nibbles at o + 32
static inline void split_nibbles(const uint8_t* q, uint8_t* o, __m256i hi_lo_bits, __m256i hi_hi_bits) {
  const __m256i v = _mm256_loadu_si256((const __m256i*)q), m4 = _mm256_set1_epi8(15);
  _mm256_storeu_si256((__m256i*)o, _mm256_or_si256(_mm256_and_si256(v, m4), hi_lo_bits));
  _mm256_storeu_si256((__m256i*)(o + 32), _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v, 4), m4), hi_hi_bits));
}
static inline void k4_scales(float d, float dmin, const uint8_t* packed, float* s, float* m, int, int g0) {
  uint8_t sc[16];
  scales_k4(packed, sc);
  const __m512 v = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i*)sc)));
  const __m512 f = _mm512_mul_ps(v, _mm512_set_ps(-dmin, -dmin, -dmin, -dmin, -dmin, -dmin, -dmin, -dmin,
                                                  d, d, d, d, d, d, d, d));
  _mm256_storeu_ps(s + g0, _mm512_castps512_ps256(f));
  _mm256_storeu_ps(m + g0, _mm512_extractf32x8_ps(f, 1));
}
static void unpack_q4_K_v(const uint8_t* __restrict p, int kc, uint8_t* __restrict u, float* __restrict s,
                          float* __restrict m, int ss) {
  const block_q4_K* b = (const block_q4_K*)p;
  const __m256i z = _mm256_setzero_si256();
  for (int i = 0; i < kc / QK_K; ++i) {
    k4_scales(_cvtsh_ss(b[i].d), _cvtsh_ss(b[i].dmin), b[i].scales, s, m, ss, i * 8);
    const __m512i m4 = _mm512_set1_epi8(15);
    for (int j = 0; j < 2; ++j) {  // 64 bytes -> u[128j .. 128j + 127]
      const __m512i v = _mm512_loadu_si512((const void*)(b[i].qs + 64 * j));
      const __m512i lo = _mm512_and_si512(v, m4), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
      _mm512_storeu_si512((void*)(u + i * QK_K + 128 * j), _mm512_shuffle_i64x2(lo, hi, 0x44));
      _mm512_storeu_si512((void*)(u + i * QK_K + 128 * j + 64), _mm512_shuffle_i64x2(lo, hi, 0xEE));
    }
    (void)z;
  }
}
static void unpack_q5_K_v(const uint8_t* __restrict p, int kc, uint8_t* __restrict u, float* __restrict s,
                          float* __restrict m, int ss) {
  const block_q5_K* b = (const block_q5_K*)p;
  const __m256i b16 = _mm256_set1_epi8(16);
  for (int i = 0; i < kc / QK_K; ++i) {
    k4_scales(_cvtsh_ss(b[i].d), _cvtsh_ss(b[i].dmin), b[i].scales, s, m, ss, i * 8);
    const __m256i qh = _mm256_loadu_si256((const __m256i*)b[i].qh);
    for (int j = 0; j < 4; ++j) {
      const __m256i lo = _mm256_maskz_mov_epi8(_mm256_test_epi8_mask(qh, _mm256_set1_epi8((char)(1 << (2 * j)))), b16);
      const __m256i hi = _mm256_maskz_mov_epi8(_mm256_test_epi8_mask(qh, _mm256_set1_epi8((char)(2 << (2 * j)))), b16);
      split_nibbles(b[i].qs + 32 * j, u + i * QK_K + 64 * j, lo, hi);
    }
  }
}
static void unpack_q6_K_v(const uint8_t* __restrict p, int kc, uint8_t* __restrict u, float* __restrict s,
                          float* __restrict, int ss) {
  const block_q6_K* b = (const block_q6_K*)p;
  const __m256i m4 = _mm256_set1_epi8(15), m30 = _mm256_set1_epi8(0x30);
  for (int i = 0; i < kc / QK_K; ++i) {
    _mm512_storeu_ps(s + i * 16, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
                                                   _mm_loadu_si128((const __m128i*)b[i].scales))),
                                               _mm512_set1_ps(_cvtsh_ss(b[i].d))));
    for (int n = 0; n < 2; ++n) {
      const __m256i qa = _mm256_loadu_si256((const __m256i*)(b[i].ql + 64 * n));
      const __m256i qb = _mm256_loadu_si256((const __m256i*)(b[i].ql + 64 * n + 32));
      const __m256i h = _mm256_loadu_si256((const __m256i*)(b[i].qh + 32 * n));
      uint8_t* o = u + i * QK_K + 128 * n;
      _mm256_storeu_si256((__m256i*)o, _mm256_or_si256(_mm256_and_si256(qa, m4), _mm256_and_si256(_mm256_slli_epi16(h, 4), m30)));
      _mm256_storeu_si256((__m256i*)(o + 32), _mm256_or_si256(_mm256_and_si256(qb, m4), _mm256_and_si256(_mm256_slli_epi16(h, 2), m30)));
      _mm256_storeu_si256((__m256i*)(o + 64), _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(qa, 4), m4), _mm256_and_si256(h, m30)));
      _mm256_storeu_si256((__m256i*)(o + 96), _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(qb, 4), m4), _mm256_and_si256(_mm256_srli_epi16(h, 2), m30)));
    }
  }
}

// ---- VNNI micro-kernel: 16 rows x CB columns of one panel, one group of G weights per step -------
constexpr int CB = 8;

template <int G, bool MIN>
static void qgemm_panel(const uint8_t* w, const float* s, const float* m, int ng, const XGroups& X, int p,
                        float* acc) {
  __m512 af[CB];
  for (int j = 0; j < CB; ++j) af[j] = _mm512_loadu_ps(acc + (p * CB + j) * TILE_M);
  for (int g = 0; g < ng; ++g) {
    const size_t gi = (size_t)p * X.ng + X.g0 + g;
    const int8_t* xg = X.xq + gi * CB * G;  // [CB][G]
    const int32_t* xc = X.xc + gi * CB;
    const float* xd = X.xd + gi * CB;
    __m512i ai[CB];
    for (int j = 0; j < CB; ++j) ai[j] = _mm512_set1_epi32(xc[j]);
    for (int q = 0; q < G / 4; ++q) {
      const __m512i wv = _mm512_loadu_si512((const void*)(w + (size_t)(g * (G / 4) + q) * 64));
      for (int j = 0; j < CB; ++j) {
        int32_t xv;
        std::memcpy(&xv, xg + j * G + 4 * q, 4);
        ai[j] = _mm512_dpbusd_epi32(ai[j], wv, _mm512_set1_epi32(xv));
      }
    }
    const __m512 sv = _mm512_loadu_ps(s + g * TILE_M);
    for (int j = 0; j < CB; ++j)
      af[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ai[j]), _mm512_mul_ps(sv, _mm512_set1_ps(xd[j])), af[j]);
    if (MIN) {
      const float* xm = X.xm + gi * CB;
      const __m512 mv = _mm512_loadu_ps(m + g * TILE_M);
      for (int j = 0; j < CB; ++j) af[j] = _mm512_fmadd_ps(mv, _mm512_set1_ps(xm[j]), af[j]);
    }
  }
  for (int j = 0; j < CB; ++j) _mm512_storeu_ps(acc + (p * CB + j) * TILE_M, af[j]);
}

template <int G, bool MIN>
static void qgemm_layout(const uint8_t* w, const float* s, const float* m, int kc, const XGroups& X, float* acc) {
  for (int p = 0; p < X.n_panels; ++p) qgemm_panel<G, MIN>(w, s, m, kc / G, X, p, acc);
}

static void qgemm_chunk_avx512(const QuantLayout& L, const uint8_t* w, const float* s, const float* m, int kc,
                               const XGroups& X, float* acc) {
  if (L.group == 32) {
    if (L.has_min) qgemm_layout<32, true>(w, s, m, kc, X, acc);
    else qgemm_layout<32, false>(w, s, m, kc, X, acc);
  } else {
    if (L.has_min) qgemm_layout<16, true>(w, s, m, kc, X, acc);
    else qgemm_layout<16, false>(w, s, m, kc, X, acc);
  }
}

// the int8 peak loop (kernels.h): vpdpbusd on 512 bits, 64 multiply-adds a chain and step
static uint64_t int8_peak_avx512(int64_t iters) {
  static_assert(PEAK_CHAINS == 12, "the asm below names 12 chains");
  // twelve named locals in one asm statement a step: with intrinsics over an array, GCC stored the array back
  // to the stack every step
  auto bytes = [](int v) { return _mm512_set1_epi8((char)v); };
  const __m512i b = bytes(3);
  __m512i x0 = bytes(1), x1 = bytes(2), x2 = bytes(3), x3 = bytes(4), x4 = bytes(5), x5 = bytes(6), x6 = bytes(7),
          x7 = bytes(8), x8 = bytes(9), x9 = bytes(10), x10 = bytes(11), x11 = bytes(12);
#define LLL_PEAK_STEP(n) "vpdpbusd %[b], %[x" #n "], %[x" #n "]\n\t"
  for (int64_t i = 0; i < iters; ++i)
    asm volatile(LLL_PEAK_STEP(0) LLL_PEAK_STEP(1) LLL_PEAK_STEP(2) LLL_PEAK_STEP(3) LLL_PEAK_STEP(4) LLL_PEAK_STEP(5)
                     LLL_PEAK_STEP(6) LLL_PEAK_STEP(7) LLL_PEAK_STEP(8) LLL_PEAK_STEP(9) LLL_PEAK_STEP(10) LLL_PEAK_STEP(11)
                 : [x0] "+v"(x0), [x1] "+v"(x1), [x2] "+v"(x2), [x3] "+v"(x3), [x4] "+v"(x4), [x5] "+v"(x5),
                   [x6] "+v"(x6), [x7] "+v"(x7), [x8] "+v"(x8), [x9] "+v"(x9), [x10] "+v"(x10), [x11] "+v"(x11)
                 : [b] "v"(b));
#undef LLL_PEAK_STEP
  const __m512i x[PEAK_CHAINS] = {x0, x1, x2, x3, x4, x5, x6, x7, x8, x9, x10, x11};
  return lane_sum<uint32_t>(x, PEAK_CHAINS);
}

}  // namespace avx512

const KernelTable* kernels_avx512() {
  static KernelTable t = [] {
    KernelTable k{};
    avx512::fill_generic(k);
    k.name = "avx512";
    k.interleave16 = avx512::interleave16_avx512;
    k.qgemm_chunk = avx512::qgemm_chunk_avx512;
    k.qgemm_cb = avx512::CB;
    // No small-N kernels (qgemv_chunk and qgemv_fused stay null): every N runs the tile kernel above, which
    // follows the canonical reduction of kernels.h, so results are batch-invariant by construction. The lanes-
    // along-k kernels this path had summed in another order, and a port of the AVX2 ones (kernels_avx2.cpp)
    // could not be run where it was written (no AVX-512 there): decode on this path is slower until one is
    // written and measured on an AVX-512 machine (issue 18).
    k.int8_peak = avx512::int8_peak_avx512;
    k.int8_peak_macs = PEAK_CHAINS * 64;
    k.unpack[(int)QType::Q4_0] = avx512::unpack_rows<avx512::unpack_q4_0_v>;
    k.unpack[(int)QType::Q4_1] = avx512::unpack_rows<avx512::unpack_q4_1_v>;
    k.unpack[(int)QType::Q5_0] = avx512::unpack_rows<avx512::unpack_q5_0_v>;
    k.unpack[(int)QType::Q5_1] = avx512::unpack_rows<avx512::unpack_q5_1_v>;
    k.unpack[(int)QType::Q8_0] = avx512::unpack_rows<avx512::unpack_q8_0_v>;
    k.unpack[(int)QType::IQ4_NL] = avx512::unpack_rows<avx512::unpack_iq4_nl_v>;
    k.unpack[(int)QType::IQ4_XS] = avx512::unpack_rows<avx512::unpack_iq4_xs_v>;
    k.unpack[(int)QType::Q4_K] = avx512::unpack_rows<avx512::unpack_q4_K_v>;
    k.unpack[(int)QType::Q5_K] = avx512::unpack_rows<avx512::unpack_q5_K_v>;
    k.unpack[(int)QType::Q6_K] = avx512::unpack_rows<avx512::unpack_q6_K_v>;
    return k;
  }();
  return &t;
}

}  // namespace lll
