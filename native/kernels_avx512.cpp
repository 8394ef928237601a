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

// ---- small N: shared pieces ------------------------------------------------------------------------
// Activation lanes l .. l + 15 (64 weights) of columns c0 .. c0 + C - 1: xq bytes, the offset correction
// and dx per lane. m8 / m32 mask the second half away for a last step of 32 weights.
template <int C>
struct XStep {
  __m512i xv[C], xc[C];
  __m512 d[C];
};
template <int C>
static inline void load_x(const XLanes& X, int c0, size_t l, __mmask64 m8, __mmask16 m32, XStep<C>& x) {
  for (int j = 0; j < C; ++j) {
    const size_t c = c0 + j;
    x.xv[j] = _mm512_maskz_loadu_epi8(m8, X.xq + c * X.ldx + 4 * l);
    x.xc[j] = _mm512_maskz_loadu_epi32(m32, X.xce + c * X.ldl + l);
    x.d[j] = _mm512_maskz_loadu_ps(m32, X.dxe + c * X.ldl + l);
  }
}
// cols(c0, C) for column pairs, then a last single column: C is a std::integral_constant
template <class F>
static inline void by_column_pairs(int n, F&& cols) {
  int c = 0;
  for (; c + 2 <= n; c += 2) cols(c, std::integral_constant<int, 2>{});
  if (c < n) cols(c, std::integral_constant<int, 1>{});
}

// ---- small N: one row at a time, lanes along k --------------------------------------------------
template <int G, bool MIN, int C>
static void qgemv_cols(const uint8_t* u_rows, const float* s_rows, const float* m_rows, int sw, int kc, int,
                       const XLanes& X, int c0, bool init, float* acc) {
  constexpr int GPZ = 64 / G;  // groups per 64 weights
  constexpr int R = 4;         // rows per pass: activation loads are shared by R rows
  const __m512i base = G == 32 ? _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0)
                               : _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
  const int nz = (kc + 63) / 64, ng = kc / G;
  for (int r0 = 0; r0 < TILE_M; r0 += R) {  // rows past nr were zero-filled by unpack
    __m512 af[C][R];
    for (int j = 0; j < C; ++j)
      for (int i = 0; i < R; ++i)
        af[j][i] = init ? _mm512_setzero_ps() : _mm512_loadu_ps(acc + ((size_t)(c0 + j) * TILE_M + r0 + i) * 16);
    for (int z = 0; z < nz; ++z) {
      const bool half = 64 * z + 64 > kc;  // a last 32 weights
      const __mmask64 m8 = half ? (__mmask64)0xFFFFFFFFull : ~(__mmask64)0;
      const __mmask16 m32 = half ? (__mmask16)0xFF : (__mmask16)0xFFFF;
      const int g = GPZ * z;
      const __m512i idx = _mm512_add_epi32(base, _mm512_set1_epi32(g & 15));
      XStep<C> x;
      load_x(X, c0, (size_t)16 * z, m8, m32, x);
      for (int i = 0; i < R; ++i) {
        const __m512i w = _mm512_maskz_loadu_epi8(m8, u_rows + (size_t)(r0 + i) * kc + 64 * z);
        const __m512 se = _mm512_permutexvar_ps(idx, _mm512_loadu_ps(s_rows + (size_t)(r0 + i) * sw + (g & ~15)));
        for (int j = 0; j < C; ++j) {
          const __m512i a = _mm512_dpbusd_epi32(x.xc[j], w, x.xv[j]);
          af[j][i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(a), _mm512_mul_ps(se, x.d[j]), af[j][i]);
        }
      }
    }
    if (MIN) {
      for (int g0 = 0; g0 < ng; g0 += 16) {
        const __mmask16 gm = ng - g0 >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (ng - g0)) - 1);
        for (int j = 0; j < C; ++j) {
          const __m512 xm = _mm512_maskz_loadu_ps(gm, X.xm + (size_t)(c0 + j) * X.ldg + g0);
          for (int i = 0; i < R; ++i)
            af[j][i] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(gm, m_rows + (size_t)(r0 + i) * sw + g0), xm, af[j][i]);
        }
      }
    }
    for (int j = 0; j < C; ++j)
      for (int i = 0; i < R; ++i) _mm512_storeu_ps(acc + ((size_t)(c0 + j) * TILE_M + r0 + i) * 16, af[j][i]);
  }
}

// ---- small N, fused with the block decoding (Q8_0, Q5_0): 64 weights = two blocks per step ----------
struct LoadQ8_0 {
  using Block = block_q8_0;
  static __m512i weights(const Block* b) {  // q + 128 of blocks b[0], b[1]
    const __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i*)b[0].qs)),
                                         _mm256_loadu_si256((const __m256i*)b[1].qs), 1);
    return _mm512_xor_si512(v, _mm512_set1_epi8((char)0x80));
  }
  static __m256i weights32(const Block* b) {
    return _mm256_xor_si256(_mm256_loadu_si256((const __m256i*)b[0].qs), _mm256_set1_epi8((char)0x80));
  }
};
struct LoadQ5_0 {
  using Block = block_q5_0;
  static __m512i weights(const Block* b) {
    uint32_t ha, hb;
    std::memcpy(&ha, b[0].qh, 4);
    std::memcpy(&hb, b[1].qh, 4);
    return _mm512_or_si512(nibbles64(b[0].qs, b[1].qs),
                           _mm512_maskz_set1_epi8((__mmask64)ha | (__mmask64)hb << 32, 16));
  }
  static __m256i weights32(const Block* b) { return _mm256_or_si256(nibbles32(b[0].qs), high_bit5(b[0].qh)); }
};

// se: [d(b0) x 8, d(b1) x 8] as floats
static inline __m512 pair_scales(f16_t d0, f16_t d1) {
  const __m128 d = _mm_cvtph_ps(_mm_cvtsi32_si128((int)d0 | (int)d1 << 16));
  return _mm512_permutexvar_ps(_mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0),
                               _mm512_castps128_ps512(d));
}

// RN rows r0 .. r0 + RN - 1 (RN a compile-time count, so the accumulators stay in registers)
template <class LD, int C, int RN>
static inline void qgemv_fused_pass(const uint8_t* w, size_t row_bytes, int r0, int kc, const XLanes& X, int c0,
                                    bool init, float* acc) {
  using Block = typename LD::Block;
  constexpr int PF = 8;  // rows ahead to prefetch: the next pass of 4 rows (or the next tile)
  const int nz = kc / 64;
  __m512 af[C][RN];
  for (int j = 0; j < C; ++j)
    for (int i = 0; i < RN; ++i)
      af[j][i] = init ? _mm512_setzero_ps() : _mm512_loadu_ps(acc + ((size_t)(c0 + j) * TILE_M + r0 + i) * 16);
  const Block* rows[RN];
  for (int i = 0; i < RN; ++i) rows[i] = (const Block*)(w + (size_t)(r0 + i) * row_bytes);
  for (int z = 0; z <= nz; ++z) {
    const bool half = z == nz;  // a last 32 weights
    if (half && kc % 64 == 0) break;
    const __mmask64 m8 = half ? (__mmask64)0xFFFFFFFFull : ~(__mmask64)0;
    const __mmask16 m32 = half ? (__mmask16)0xFF : (__mmask16)0xFFFF;
    XStep<C> x;
    load_x(X, c0, (size_t)16 * z, m8, m32, x);
    for (int i = 0; i < RN; ++i) {
      const Block* b = rows[i] + 2 * z;
      _mm_prefetch((const char*)b + PF * row_bytes, _MM_HINT_T1);
      if (sizeof(Block) * 2 > 64) _mm_prefetch((const char*)b + PF * row_bytes + 64, _MM_HINT_T1);
      const __m512i wv = half ? _mm512_castsi256_si512(LD::weights32(b)) : LD::weights(b);
      const __m512 se = pair_scales(b[0].d, half ? b[0].d : b[1].d);
      for (int j = 0; j < C; ++j) {
        const __m512i a = _mm512_dpbusd_epi32(x.xc[j], wv, x.xv[j]);
        af[j][i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(a), _mm512_mul_ps(se, x.d[j]), af[j][i]);
      }
    }
  }
  for (int j = 0; j < C; ++j)
    for (int i = 0; i < RN; ++i) _mm512_storeu_ps(acc + ((size_t)(c0 + j) * TILE_M + r0 + i) * 16, af[j][i]);
}

template <class LD, int C>
static void qgemv_fused_cols(const uint8_t* w, size_t row_bytes, int nr, int kc, const XLanes& X, int c0, bool init,
                             float* acc) {
  constexpr int R = 4;  // rows per pass: activation loads are shared by R rows
  int r0 = 0;
  for (; r0 + R <= nr; r0 += R) qgemv_fused_pass<LD, C, R>(w, row_bytes, r0, kc, X, c0, init, acc);
  for (; r0 < nr; ++r0) qgemv_fused_pass<LD, C, 1>(w, row_bytes, r0, kc, X, c0, init, acc);
}

template <class LD>
static void qgemv_fused(const uint8_t* w, size_t row_bytes, int nr, int kc, int n, const XLanes& X, bool init,
                        float* acc) {
  by_column_pairs(n, [&](int c, auto C) {
    qgemv_fused_cols<LD, decltype(C)::value>(w, row_bytes, nr, kc, X, c, init, acc);
  });
}

// ---- small N over per-256 activations (Q8_K-style), K-quants --------------------------------------
// The AVX2 kernels' arithmetic (kernels_avx2.cpp works out the int32 bounds) with 64 weights a step:
// vpmaddubsw gives int16 pair sums, vpdpwssd multiplies them by the group's integer scale and accumulates in
// int32, exactly; one float multiply-add per super-block and column (the per-32 kernels these replaced paid a
// conversion, a scale permute and a float multiply-add per 64 weights, and unpacked the scales in scalar code:
// N = 1 on the Xeon, Q4_K 13-16 -> 16-18 GB/s, Q6_K 15-19 -> 19-20 on the 0.5B's matrices).
// The mins (Q4_K) and the offset 32 (Q6_K) come off once per super-block through the sums per 16 of x.
struct SuperQ4_K {
  using Block = block_q4_K;
  static constexpr int G = 32;
  // sc: words 0..7 the group scales; corr: the correction's multiplier against the 16 sums per 16 (m_g twice)
  static void scales(const Block& b, __m512i& sc, __m256i& corr, __m128& dm) {
    const __m256i w = _mm256_cvtepu8_epi16(q4k_scales(b));  // words 0..7 sc_g, 8..15 m_g
    sc = _mm512_zextsi256_si512(w);
    corr = _mm256_permutexvar_epi16(_mm256_setr_epi16(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15), w);
    int32_t dd;
    std::memcpy(&dd, &b.d, 4);  // d and dmin, adjacent halves
    dm = _mm_cvtph_ps(_mm_cvtsi32_si128(dd));
  }
  static __m512i weights(const Block& b, int z) {  // groups 2z (low nibbles) and 2z + 1 (high nibbles)
    const __m256i v = _mm256_loadu_si256((const __m256i*)(b.qs + 32 * z)), m4 = _mm256_set1_epi8(15);
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_and_si256(v, m4)),
                              _mm256_and_si256(_mm256_srli_epi16(v, 4), m4), 1);
  }
  // sum_k w_k x_k / dx = d * sum_g sc_g dot(u_g, xq_g) - dmin * sum_g m_g sum(xq_g)
  static __m512 finish(__m512i ai, __m256i corr, __m256i bs, __m128 dm, float dx, __m512 af) {
    const __m128 s = _mm_mul_ps(dm, _mm_set1_ps(dx));  // d * dx, dmin * dx
    af = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ai), _mm512_broadcastss_ps(s), af);
    return _mm512_fnmadd_ps(_mm512_cvtepi32_ps(_mm512_zextsi256_si512(_mm256_madd_epi16(corr, bs))),
                            _mm512_broadcastss_ps(_mm_movehdup_ps(s)), af);
  }
};
struct SuperQ6_K {
  using Block = block_q6_K;
  static constexpr int G = 16;
  static void scales(const Block& b, __m512i& sc, __m256i& corr, __m128& dm) {
    corr = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i*)b.scales));  // words 0..15: sc_g
    sc = _mm512_zextsi256_si512(corr);
    dm = _mm_set_ss(_cvtsh_ss(b.d));
  }
  static __m512i weights(const Block& b, int z) {  // weights 64z .. 64z + 63
    const int n = z >> 1;
    const __m256i qa = _mm256_loadu_si256((const __m256i*)(b.ql + 64 * n));
    const __m256i qb = _mm256_loadu_si256((const __m256i*)(b.ql + 64 * n + 32));
    const __m256i h = _mm256_loadu_si256((const __m256i*)(b.qh + 32 * n));
    const __m256i m4 = _mm256_set1_epi8(15), m30 = _mm256_set1_epi8(0x30);
    __m256i lo, hi;
    if ((z & 1) == 0) {
      lo = _mm256_or_si256(_mm256_and_si256(qa, m4), _mm256_and_si256(_mm256_slli_epi16(h, 4), m30));
      hi = _mm256_or_si256(_mm256_and_si256(qb, m4), _mm256_and_si256(_mm256_slli_epi16(h, 2), m30));
    } else {
      lo = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(qa, 4), m4), _mm256_and_si256(h, m30));
      hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(qb, 4), m4),
                           _mm256_and_si256(_mm256_srli_epi16(h, 2), m30));
    }
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
  }
  // sum_k w_k x_k / dx = d * (sum_g sc_g dot(u_g, xq_g) - 32 sum_g sc_g sum(xq_g))
  static __m512 finish(__m512i ai, __m256i corr, __m256i bs, __m128 dm, float dx, __m512 af) {
    const __m512i t = _mm512_sub_epi32(ai, _mm512_zextsi256_si512(_mm256_slli_epi32(_mm256_madd_epi16(corr, bs), 5)));
    return _mm512_fmadd_ps(_mm512_cvtepi32_ps(t), _mm512_set1_ps(_mm_cvtss_f32(dm) * dx), af);
  }
};
// step z's multiplier: word i = the scale of group (64 / G) * z + i / (G / 2) (the group of int16 pair sum i)
template <int G>
struct SuperIndex {
  alignas(64) int16_t ix[4][32];
  constexpr SuperIndex() : ix{} {
    for (int z = 0; z < 4; ++z)
      for (int i = 0; i < 32; ++i) ix[z][i] = (int16_t)(64 / G * z + i / (G / 2));
  }
};
template <int G>
inline constexpr SuperIndex<G> super_index{};

template <class SQ, int C>
static inline void kq_super_row(const uint8_t* row, size_t pf, int nsb, const XSuper& X, int c0, bool init,
                                float* acc) {
  using Block = typename SQ::Block;
  __m512i sidx[4];
  for (int z = 0; z < 4; ++z) sidx[z] = _mm512_load_si512((const void*)super_index<SQ::G>.ix[z]);
  __m512 af[C];
  for (int j = 0; j < C; ++j) af[j] = init ? _mm512_setzero_ps() : _mm512_loadu_ps(acc + (size_t)(c0 + j) * TILE_M * 16);
  for (int sb = 0; sb < nsb; ++sb) {
    const Block& b = ((const Block*)row)[sb];
    for (size_t o = 0; o < sizeof(Block); o += 64) _mm_prefetch((const char*)&b + pf + o, _MM_HINT_T1);
    __m512i sc;
    __m256i corr;
    __m128 dm;
    SQ::scales(b, sc, corr, dm);
    __m512i ai[C];
    for (int j = 0; j < C; ++j) ai[j] = _mm512_setzero_si512();
    for (int z = 0; z < 4; ++z) {
      const __m512i u = SQ::weights(b, z);
      const __m512i mult = _mm512_permutexvar_epi16(sidx[z], sc);
      for (int j = 0; j < C; ++j) {
        const __m512i xv = _mm512_loadu_si512((const void*)(X.xq + (size_t)(c0 + j) * X.ldx + 256 * sb + 64 * z));
        ai[j] = _mm512_dpwssd_epi32(ai[j], _mm512_maddubs_epi16(u, xv), mult);
      }
    }
    for (int j = 0; j < C; ++j) {
      const __m256i bs = _mm256_loadu_si256((const __m256i*)(X.bsum + (size_t)(c0 + j) * X.ldb + 16 * sb));
      af[j] = SQ::finish(ai[j], corr, bs, dm, X.d[(size_t)(c0 + j) * X.ldd + sb], af[j]);
    }
  }
  for (int j = 0; j < C; ++j) _mm512_storeu_ps(acc + (size_t)(c0 + j) * TILE_M * 16, af[j]);
}

// rows one at a time, each streamed front to back; columns four at a time (each step's weights decoded once
// for four: N = 4 ran at 100-154 GFLOP/s on the Xeon against 58-131 in pairs), then a pair, then one
template <class SQ>
static void qgemv_super_avx512(const uint8_t* w, size_t row_bytes, int nr, int kc, int n, const XSuper& X, bool init,
                               float* acc) {
  const size_t pf = 8 * row_bytes;
  const int nsb = kc / QK_K;
  for (int r = 0; r < nr; ++r) {
    const uint8_t* row = w + (size_t)r * row_bytes;
    float* a = acc + (size_t)r * 16;
    int c = 0;
    for (; n - c >= 4; c += 4) kq_super_row<SQ, 4>(row, pf, nsb, X, c, init, a);
    if (n - c >= 2) kq_super_row<SQ, 2>(row, pf, nsb, X, c, init, a), c += 2;
    if (n - c >= 1) kq_super_row<SQ, 1>(row, pf, nsb, X, c, init, a);
  }
}

template <int G, bool MIN>
static void qgemv_layout(const uint8_t* u_rows, const float* s, const float* m, int sw, int kc, int nr, int n,
                         const XLanes& X, bool init, float* acc) {
  by_column_pairs(n, [&](int c, auto C) {
    qgemv_cols<G, MIN, decltype(C)::value>(u_rows, s, m, sw, kc, nr, X, c, init, acc);
  });
}

static void qgemv_chunk_avx512(const QuantLayout& L, const uint8_t* u_rows, const float* s, const float* m, int sw,
                               int kc, int nr, int n, const XLanes& X, bool init, float* acc) {
  if (L.group == 32) {
    if (L.has_min) qgemv_layout<32, true>(u_rows, s, m, sw, kc, nr, n, X, init, acc);
    else qgemv_layout<32, false>(u_rows, s, m, sw, kc, nr, n, X, init, acc);
  } else {
    if (L.has_min) qgemv_layout<16, true>(u_rows, s, m, sw, kc, nr, n, X, init, acc);
    else qgemv_layout<16, false>(u_rows, s, m, sw, kc, nr, n, X, init, acc);
  }
}

// 16 rows at once: transpose the 16 x 16 block (row r's lanes become lane r of 16 vectors), then add the
// vectors in lane order from zero, which is each row's sequential sum exactly
static void reduce16_avx512(const float* acc, int nr, float* y) {
  if (nr != 16) {
    for (int r = 0; r < nr; ++r) {
      float t = 0.f;
      for (int l = 0; l < 16; ++l) t += acc[r * 16 + l];
      y[r] = t;
    }
    return;
  }
  __m512 v[16], u[16];
  for (int r = 0; r < 16; ++r) v[r] = _mm512_loadu_ps(acc + r * 16);
  for (int i = 0; i < 16; i += 2) {  // pairs of rows: 32-bit interleave
    u[i] = _mm512_unpacklo_ps(v[i], v[i + 1]);
    u[i + 1] = _mm512_unpackhi_ps(v[i], v[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {  // 64-bit interleave
    v[i] = _mm512_shuffle_ps(u[i], u[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
    v[i + 1] = _mm512_shuffle_ps(u[i], u[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
    v[i + 2] = _mm512_shuffle_ps(u[i + 1], u[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
    v[i + 3] = _mm512_shuffle_ps(u[i + 1], u[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int i = 0; i < 8; ++i) {  // 128-bit lanes
    const int a = i < 4 ? i : i + 4, b = a + 4;
    u[i] = _mm512_shuffle_f32x4(v[a], v[b], _MM_SHUFFLE(2, 0, 2, 0));
    u[i + 8] = _mm512_shuffle_f32x4(v[a], v[b], _MM_SHUFFLE(3, 1, 3, 1));
  }
  for (int i = 0; i < 8; ++i) {
    const int a = i < 4 ? i : i + 4, b = a + 4;
    v[i] = _mm512_shuffle_f32x4(u[a], u[b], _MM_SHUFFLE(2, 0, 2, 0));
    v[i + 8] = _mm512_shuffle_f32x4(u[a], u[b], _MM_SHUFFLE(3, 1, 3, 1));
  }
  // now v[l] lane r = acc[r][l]
  __m512 t = _mm512_setzero_ps();
  for (int l = 0; l < 16; ++l) t = _mm512_add_ps(t, v[l]);
  _mm512_storeu_ps(y, t);
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
    k.qgemv_chunk = avx512::qgemv_chunk_avx512;
    k.reduce16 = avx512::reduce16_avx512;
    k.fused_chunk_k = 1024;  // measured with chunks of 1024 on the Zen 4 machine
    k.lane4_tables = true;
    k.qgemv_fused[(int)QType::Q8_0] = avx512::qgemv_fused<avx512::LoadQ8_0>;
    k.qgemv_fused[(int)QType::Q5_0] = avx512::qgemv_fused<avx512::LoadQ5_0>;
    k.qgemv_super[(int)QType::Q4_K] = avx512::qgemv_super_avx512<avx512::SuperQ4_K>;
    k.qgemv_super[(int)QType::Q6_K] = avx512::qgemv_super_avx512<avx512::SuperQ6_K>;
    // not past GEMV_MAX_N: at N = 8, four columns at a time ran within the noise of the tile path on the Xeon
    // (83-156 GFLOP/s against 79-159)
    k.super_max_n = 4;
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
