// AVX-512 (F, BW, VL, VNNI) path: the generic kernels compiled for AVX-512, with the two hot tile
// kernels written by hand: the 16-row interleave (a 16x8 dword transpose per 32 weights) and the
// VNNI micro-kernel, whose 16 int32 lanes are the 16 weight rows of the tile (no horizontal sums).
#define LLL_NS avx512
#include "kernels_generic.inc"

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstring>
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

// the 16 rows a tile reads: row r at p[r] (rows past nr repeat row nr - 1, so every load stays inside the tensor)
struct Rows16 {
  const uint8_t* p[TILE_M];
  __m512i off;  // int32 lanes: p[r] - p[0], for gathers
  Rows16(const uint8_t* w, size_t row_bytes, int nr) {
    alignas(64) int32_t o[TILE_M];
    for (int r = 0; r < TILE_M; ++r) {
      const size_t rr = (size_t)(r < nr ? r : nr - 1);
      p[r] = w + rr * row_bytes;
      o[r] = (int32_t)(rr * row_bytes);
    }
    off = _mm512_load_si512(o);
  }
  // lanes = rows: the dword at byte b of each row
  __m512i dword(size_t b) const { return _mm512_i32gather_epi32(off, (const void*)(p[0] + b), 1); }
};

// 32 bytes at byte b of each of the 16 rows -> T[j], j < 8: lane r = bytes 4j .. 4j + 3 of row r
static inline void t16x32(const Rows16& R, size_t b, const TransposeIdx& X, __m512i T[8]) {
  __m512i A[8], C[8], D[8];
  for (int i = 0; i < 8; ++i) {
    const __m256i lo = _mm256_loadu_si256((const __m256i*)(R.p[2 * i] + b));
    const __m256i hi = _mm256_loadu_si256((const __m256i*)(R.p[2 * i + 1] + b));
    A[i] = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
  }
  // C[2p + h]: rows 4p..4p+3, dwords 4h..4h+3
  for (int p = 0; p < 4; ++p)
    for (int h = 0; h < 2; ++h) C[2 * p + h] = _mm512_permutex2var_epi32(A[2 * p], X.s1[h], A[2 * p + 1]);
  // D[4q + 2h + e]: rows 8q..8q+7, dwords 4h+2e..4h+2e+1
  for (int q = 0; q < 2; ++q)
    for (int h = 0; h < 2; ++h)
      for (int e = 0; e < 2; ++e)
        D[4 * q + 2 * h + e] = _mm512_permutex2var_epi32(C[4 * q + h], X.s2[e], C[4 * q + 2 + h]);
  for (int h = 0; h < 2; ++h)
    for (int e = 0; e < 2; ++e)
      for (int f = 0; f < 2; ++f)
        T[4 * h + 2 * e + f] = _mm512_permutex2var_epi32(D[2 * h + e], X.s3[f], D[4 + 2 * h + e]);
}

// the same for 16 bytes a row: T[j], j < 4
struct TransposeIdx16 {
  __m512i s1[2], s2[2];
};
static const TransposeIdx16& transpose16_idx() {
  static TransposeIdx16 t = [] {
    TransposeIdx16 x;
    // stage 1: A (rows 0..3 | j 0..3, by row) + B (rows 4..7) -> C_h: rows 0..7, j 2h..2h+1, by j
    auto A = lanes_of(0, 4, 0, 4, true), B = lanes_of(4, 4, 0, 4, true);
    for (int h = 0; h < 2; ++h) x.s1[h] = index_for(A, B, lanes_of(0, 8, 2 * h, 2, false));
    // stage 2: C (rows 0..7, j 0..1 by j) + C' (rows 8..15) -> T_f: rows 0..15, j f, by row
    auto C0 = lanes_of(0, 8, 0, 2, false), C1 = lanes_of(8, 8, 0, 2, false);
    for (int f = 0; f < 2; ++f) x.s2[f] = index_for(C0, C1, lanes_of(0, 16, f, 1, true));
    return x;
  }();
  return t;
}
static inline void t16x16(const Rows16& R, size_t b, const TransposeIdx16& X, __m512i T[4]) {
  __m512i A[4], C[4];
  for (int i = 0; i < 4; ++i) {
    __m512i a = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i*)(R.p[4 * i] + b)));
    a = _mm512_inserti32x4(a, _mm_loadu_si128((const __m128i*)(R.p[4 * i + 1] + b)), 1);
    a = _mm512_inserti32x4(a, _mm_loadu_si128((const __m128i*)(R.p[4 * i + 2] + b)), 2);
    A[i] = _mm512_inserti32x4(a, _mm_loadu_si128((const __m128i*)(R.p[4 * i + 3] + b)), 3);
  }
  // C[2p + h]: rows 8p..8p+7, dwords 2h..2h+1
  for (int p = 0; p < 2; ++p)
    for (int h = 0; h < 2; ++h) C[2 * p + h] = _mm512_permutex2var_epi32(A[2 * p], X.s1[h], A[2 * p + 1]);
  for (int h = 0; h < 2; ++h)
    for (int f = 0; f < 2; ++f) T[2 * h + f] = _mm512_permutex2var_epi32(C[h], X.s2[f], C[2 + h]);
}

static void interleave16_avx512(const uint8_t* u_rows, int kc, uint8_t* u_il) {
  const TransposeIdx& X = transpose_idx();
  const Rows16 R(u_rows, (size_t)kc, TILE_M);
  for (int k0 = 0; k0 < kc; k0 += 32) {
    __m512i T[8];
    t16x32(R, (size_t)k0, X, T);
    for (int j = 0; j < 8; ++j) _mm512_storeu_si512((void*)(u_il + (size_t)(k0 / 4 + j) * 64), T[j]);
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

// ---- unpack straight to the tile layout (UnpackIlFn, kernels.h) ------------------------------------
// The 16 rows' packed bytes are transposed as they are (a 4-bit type moves half the bytes of its unpacked
// weights) and split into weights with rows as lanes. The results equal unpack + interleave16 bit for bit.
static inline __m512 f16_lo(__m512i v) { return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(v)); }
static inline __m512 f16_hi(__m512i v) { return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(v, 16))); }
static inline __m512i lo4(__m512i v) { return _mm512_and_si512(v, _mm512_set1_epi8(15)); }
static inline __m512i hi4(__m512i v) { return _mm512_and_si512(_mm512_srli_epi16(v, 4), _mm512_set1_epi8(15)); }
static inline void put(uint8_t* u, size_t v, __m512i x) { _mm512_storeu_si512((void*)(u + v * 64), x); }
// bits 4i .. 4i+3 of each lane's u32 -> 0x10 in bytes 0..3 (the fifth bit of four consecutive weights)
static inline __m512i bit5x4(__m512i qh, int i) {
  alignas(64) static const int32_t spread[16] = {  // entry n: 0x10 in byte t where bit t of n is set
      0x00000000, 0x00000010, 0x00001000, 0x00001010, 0x00100000, 0x00100010, 0x00101000, 0x00101010,
      0x10000000, 0x10000010, 0x10001000, 0x10001010, 0x10100000, 0x10100010, 0x10101000, 0x10101010};
  const __m512i lut = _mm512_load_si512(spread);
  return _mm512_permutexvar_epi32(_mm512_and_si512(_mm512_srli_epi32(qh, 4 * i), _mm512_set1_epi32(15)), lut);
}

// 32-weight blocks with 16 bytes of nibbles at QS, the f16 scale at 0 (and the f16 min at 2: MIN), the 32 fifth
// bits at QH (QH >= 0); LUT: the iq4_nl code book
template <class Block, int QS, int QH, bool MIN, bool LUT>
static void unpack_il_nibbles(const uint8_t* w, size_t rb, int nr, int kc, uint8_t* u, float* s, float* m) {
  const Rows16 R(w, rb, nr);
  const TransposeIdx16& X = transpose16_idx();
  const __m512i tbl = _mm512_broadcast_i32x4(
      _mm_add_epi8(_mm_load_si128((const __m128i*)kvalues_iq4nl), _mm_set1_epi8((char)128)));
  for (int i = 0; i < kc / QK; ++i) {
    const size_t b = (size_t)i * sizeof(Block);
    const __m512i dm = R.dword(b);
    _mm512_storeu_ps(s + i * 16, f16_lo(dm));
    if (MIN) _mm512_storeu_ps(m + i * 16, f16_hi(dm));
    __m512i T[4];
    t16x16(R, b + QS, X, T);
    __m512i qh = _mm512_setzero_si512();
    if constexpr (QH >= 0) qh = R.dword(b + QH);
    for (int j = 0; j < 4; ++j) {
      __m512i lo = lo4(T[j]), hi = hi4(T[j]);  // weights 4j.. and 16 + 4j..
      if constexpr (LUT) {
        lo = _mm512_shuffle_epi8(tbl, lo);
        hi = _mm512_shuffle_epi8(tbl, hi);
      }
      if constexpr (QH >= 0) {
        lo = _mm512_or_si512(lo, bit5x4(qh, j));
        hi = _mm512_or_si512(hi, bit5x4(qh, 4 + j));
      }
      put(u, (size_t)i * 8 + j, lo);
      put(u, (size_t)i * 8 + 4 + j, hi);
    }
  }
}

static void unpack_il_q8_0(const uint8_t* w, size_t rb, int nr, int kc, uint8_t* u, float* s, float*) {
  const Rows16 R(w, rb, nr);
  const TransposeIdx& X = transpose_idx();
  for (int i = 0; i < kc / QK; ++i) {
    const size_t b = (size_t)i * sizeof(block_q8_0);
    _mm512_storeu_ps(s + i * 16, f16_lo(R.dword(b)));
    __m512i T[8];
    t16x32(R, b + 2, X, T);
    for (int j = 0; j < 8; ++j) put(u, (size_t)i * 8 + j, _mm512_xor_si512(T[j], _mm512_set1_epi8((char)0x80)));
  }
}

// byte j of each lane as a float (SIGNED: int8)
template <bool SIGNED>
static inline __m512 byte_f(__m512i v, int j) {
  if (SIGNED) return _mm512_cvtepi32_ps(_mm512_srai_epi32(_mm512_slli_epi32(v, 24 - 8 * j), 24));
  return _mm512_cvtepi32_ps(_mm512_and_si512(_mm512_srli_epi32(v, 8 * j), _mm512_set1_epi32(255)));
}

static void unpack_il_q4_K(const uint8_t* w, size_t rb, int nr, int kc, uint8_t* u, float* s, float* m) {
  const Rows16 R(w, rb, nr);
  const TransposeIdx& X = transpose_idx();
  const TransposeIdx16& X16 = transpose16_idx();
  for (int i = 0; i < kc / QK_K; ++i) {
    const size_t b = (size_t)i * sizeof(block_q4_K);
    for (int jj = 0; jj < 4; ++jj) {  // qs[32 jj ..]: weights 64 jj .. (low nibbles), 64 jj + 32 .. (high)
      __m512i T[8];
      t16x32(R, b + 16 + 32 * jj, X, T);
      for (int j = 0; j < 8; ++j) {
        put(u, (size_t)i * 64 + jj * 16 + j, lo4(T[j]));
        put(u, (size_t)i * 64 + jj * 16 + 8 + j, hi4(T[j]));
      }
    }
    // the 12 scale bytes as dwords D0 D1 D2 (ggml's get_scale_min_k4 on 16 rows at once)
    __m512i D[4];
    t16x16(R, b + 4, X16, D);
    const __m512i k63 = _mm512_set1_epi8(63), k15 = _mm512_set1_epi8(15), k3 = _mm512_set1_epi8(3);
    const __m512i sc03 = _mm512_and_si512(D[0], k63), mn03 = _mm512_and_si512(D[1], k63);
    const __m512i sc47 = _mm512_or_si512(_mm512_and_si512(D[2], k15),
                                         _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(D[0], 6), k3), 4));
    const __m512i mn47 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(D[2], 4), k15),
                                         _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(D[1], 6), k3), 4));
    const __m512i dd = R.dword(b);
    const __m512 d = f16_lo(dd), ndmin = _mm512_xor_ps(f16_hi(dd), _mm512_set1_ps(-0.f));
    for (int g = 0; g < 8; ++g) {
      const __m512i sc = g < 4 ? sc03 : sc47, mn = g < 4 ? mn03 : mn47;
      _mm512_storeu_ps(s + (i * 8 + g) * 16, _mm512_mul_ps(d, byte_f<false>(sc, g % 4)));
      _mm512_storeu_ps(m + (i * 8 + g) * 16, _mm512_mul_ps(ndmin, byte_f<false>(mn, g % 4)));
    }
  }
}

// Q4_Kx (quant_formats.h, AVX2's repacked Q4_K): the nibbles as unpack_il_q4_K moves them, the scales and mins
// already bytes and d, -dmin already floats (the products unpack_q4_kx forms)
static void unpack_il_q4_kx(const uint8_t* w, size_t rb, int nr, int kc, uint8_t* u, float* s, float* m) {
  const Rows16 R(w, rb, nr);
  const TransposeIdx& X = transpose_idx();
  for (int i = 0; i < kc / QK_K; ++i) {
    const size_t b = (size_t)i * sizeof(block_q4_kx);
    for (int jj = 0; jj < 4; ++jj) {
      __m512i T[8];
      t16x32(R, b + offsetof(block_q4_kx, qs) + 32 * jj, X, T);
      for (int j = 0; j < 8; ++j) {
        put(u, (size_t)i * 64 + jj * 16 + j, lo4(T[j]));
        put(u, (size_t)i * 64 + jj * 16 + 8 + j, hi4(T[j]));
      }
    }
    const __m512 d = _mm512_castsi512_ps(R.dword(b + offsetof(block_q4_kx, d)));
    const __m512 mdmin = _mm512_castsi512_ps(R.dword(b + offsetof(block_q4_kx, mdmin)));
    for (int g = 0; g < 8; ++g) {
      const __m512i sc = R.dword(b + offsetof(block_q4_kx, sc) + 4 * (g / 4));
      const __m512i mn = R.dword(b + offsetof(block_q4_kx, mn) + 4 * (g / 4));
      _mm512_storeu_ps(s + (i * 8 + g) * 16, _mm512_mul_ps(d, byte_f<false>(sc, g % 4)));
      _mm512_storeu_ps(m + (i * 8 + g) * 16, _mm512_mul_ps(mdmin, byte_f<false>(mn, g % 4)));
    }
  }
}

static void unpack_il_q6_K(const uint8_t* w, size_t rb, int nr, int kc, uint8_t* u, float* s, float*) {
  const Rows16 R(w, rb, nr);
  const TransposeIdx& X = transpose_idx();
  const TransposeIdx16& X16 = transpose16_idx();
  const __m512i m30 = _mm512_set1_epi8(0x30);
  // (a & 15) | (h & 0x30), as one ternary-logic op: bits of a where the mask is set, else of h
  auto merge = [&](__m512i a, __m512i h) {
    return _mm512_ternarylogic_epi32(_mm512_set1_epi8(15), a, _mm512_and_si512(h, m30), 0xCA);
  };
  for (int i = 0; i < kc / QK_K; ++i) {
    const size_t b = (size_t)i * sizeof(block_q6_K);
    for (int n = 0; n < 2; ++n) {  // weights 128 n .. 128 n + 127
      __m512i QA[8], QB[8], QH[8];
      t16x32(R, b + 64 * n, X, QA);
      t16x32(R, b + 64 * n + 32, X, QB);
      t16x32(R, b + 128 + 32 * n, X, QH);
      const size_t v = (size_t)i * 64 + n * 32;
      for (int j = 0; j < 8; ++j) {
        put(u, v + j, merge(QA[j], _mm512_slli_epi16(QH[j], 4)));
        put(u, v + 8 + j, merge(QB[j], _mm512_slli_epi16(QH[j], 2)));
        put(u, v + 16 + j, merge(_mm512_srli_epi16(QA[j], 4), QH[j]));
        put(u, v + 24 + j, merge(_mm512_srli_epi16(QB[j], 4), _mm512_srli_epi16(QH[j], 2)));
      }
    }
    __m512i SC[4];
    t16x16(R, b + 192, X16, SC);
    const __m512 d = f16_hi(R.dword(b + 206));  // bytes 206..209: scales[14..15], d
    for (int g = 0; g < 16; ++g) _mm512_storeu_ps(s + (i * 16 + g) * 16, _mm512_mul_ps(d, byte_f<true>(SC[g / 4], g % 4)));
  }
}

// any type: unpack + interleave (for the types without a hand-written unpack_il), kc <= CHUNK_K
template <UnpackFn U, bool MIN>
static void unpack_il_rows(const uint8_t* w, size_t rb, int nr, int kc, uint8_t* u, float* s, float* m) {
  alignas(64) uint8_t ur[TILE_M * CHUNK_K];
  alignas(64) float sr[TILE_M * 16], mr[TILE_M * 16];
  U(w, rb, nr, kc, ur, sr, mr, 16);
  interleave16_avx512(ur, kc, u);
  interleave16_avx512((const uint8_t*)sr, 64, (uint8_t*)s);
  if (MIN) interleave16_avx512((const uint8_t*)mr, 64, (uint8_t*)m);
}

// ---- VNNI micro-kernel: 16 rows x NC activation columns, one group of G weights per step ------------
// The canonical order of this path (kernels.h, S = 1): per output, groups in k order,
//   acc = fma((float)isum_g, s_g * dx_g, acc), then acc = fma(m_g, xm_g, acc) for types with a min.
// Both the tile path (activations packed in panels: XGroups) and the small-N path (activation rows as they are:
// XLanes) run group_madd, so a row's result does not depend on which ran it.
constexpr int CB = 8;

// X: for column j of this group, q(j) -> its G int8 activations, c(j) -> -offset * sum, d(j) -> dx, m(j) -> xm
template <int G, bool MIN, int NC, class XG>
__attribute__((always_inline)) static inline void group_madd(const uint8_t* w, const float* s, const float* m, int g,
                                                             const XG& X, __m512* af) {
  __m512i ai[NC];
  for (int j = 0; j < NC; ++j) ai[j] = _mm512_set1_epi32(X.c(j));
  for (int q = 0; q < G / 4; ++q) {
    const __m512i wv = _mm512_loadu_si512((const void*)(w + (size_t)(g * (G / 4) + q) * 64));
    for (int j = 0; j < NC; ++j) {
      int32_t xv;
      std::memcpy(&xv, X.q(j) + 4 * q, 4);
      ai[j] = _mm512_dpbusd_epi32(ai[j], wv, _mm512_set1_epi32(xv));
    }
  }
  const __m512 sv = _mm512_loadu_ps(s + g * TILE_M);
  for (int j = 0; j < NC; ++j)
    af[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ai[j]), _mm512_mul_ps(sv, _mm512_set1_ps(X.d(j))), af[j]);
  if (MIN) {
    const __m512 mv = _mm512_loadu_ps(m + g * TILE_M);
    for (int j = 0; j < NC; ++j) af[j] = _mm512_fmadd_ps(mv, _mm512_set1_ps(X.m(j)), af[j]);
  }
}

// the tile path's activations: group gi of panel column j
template <int G>
struct PanelX {
  const XGroups& X;
  size_t gi;
  const int8_t* q(int j) const { return X.xq + (gi * CB + j) * G; }
  int32_t c(int j) const { return X.xc[gi * CB + j]; }
  float d(int j) const { return X.xd[gi * CB + j]; }
  float m(int j) const { return X.xm[gi * CB + j]; }
};

// acc: [n_panels * CB][S][16]. S = 1 (this path's order): the chunk's groups in k order into the one set (acc zeroed
// by the caller). S = 8 (the avx2 order, the avx512s8 path): group g into set g % 8, each set loaded and stored once;
// a row's first chunk starts every set at +0 (acc is not zeroed beforehand), a short last chunk leaves the sets it
// has no group for as they are.
template <int G, bool MIN, int S, int NC>
static void qgemm_panel(const uint8_t* w, const float* s, const float* m, int ng, const XGroups& X, int p,
                        float* acc) {
  float* const ap = acc + (size_t)p * CB * S * TILE_M;
  const size_t gp = (size_t)p * X.ng + X.g0;
  const bool start = S > 1 && X.g0 == 0;
  for (int set = 0; set < S; ++set) {
    if (set >= ng && !start) continue;
    __m512 af[NC];
    for (int j = 0; j < NC; ++j)
      af[j] = start ? _mm512_setzero_ps() : _mm512_loadu_ps(ap + ((size_t)j * S + set) * TILE_M);
    for (int g = set; g < ng; g += S) group_madd<G, MIN, NC>(w, s, m, g, PanelX<G>{X, gp + g}, af);
    for (int j = 0; j < NC; ++j) _mm512_storeu_ps(ap + ((size_t)j * S + set) * TILE_M, af[j]);
  }
}

// fn<NC>() for NC = nc (1 .. CB)
template <template <int> class F, class... A>
static inline void with_nc(int nc, A&&... a) {
  switch (nc) {
    case 1: F<1>::run(a...); break;
    case 2: F<2>::run(a...); break;
    case 3: F<3>::run(a...); break;
    case 4: F<4>::run(a...); break;
    case 5: F<5>::run(a...); break;
    case 6: F<6>::run(a...); break;
    case 7: F<7>::run(a...); break;
    default: F<8>::run(a...); break;
  }
}

template <int G, bool MIN, int S>
struct Panel {
  template <int NC>
  struct K {
    static void run(const uint8_t* w, const float* s, const float* m, int ng, const XGroups& X, int p, float* acc) {
      qgemm_panel<G, MIN, S, NC>(w, s, m, ng, X, p, acc);
    }
  };
};

template <int G, bool MIN, int S>
static void qgemm_layout(const uint8_t* w, const float* s, const float* m, int kc, const XGroups& X, float* acc) {
  for (int p = 0; p < X.n_panels; ++p) {  // the padding columns of the last panel are skipped
    const int nc = p + 1 == X.n_panels ? X.last_cols : CB;
    with_nc<Panel<G, MIN, S>::template K>(nc, w, s, m, kc / G, X, p, acc);
  }
}

// S accumulator sets per output: 1 (kernels_avx512) or 8 (kernels_avx512s8)
template <int S>
static void qgemm_chunk_avx512(const QuantLayout& L, const uint8_t* w, const float* s, const float* m, int kc,
                               const XGroups& X, float* acc) {
  if (L.group == 32) {
    if (L.has_min) qgemm_layout<32, true, S>(w, s, m, kc, X, acc);
    else qgemm_layout<32, false, S>(w, s, m, kc, X, acc);
  } else {
    if (L.has_min) qgemm_layout<16, true, S>(w, s, m, kc, X, acc);
    else qgemm_layout<16, false, S>(w, s, m, kc, X, acc);
  }
}

// ---- AVX2's order on AVX-512 (the avx512s8 path, kernels.h) -------------------------------------------
// qgemm_chunk_avx512<8>: group g of a row goes to set g % 8, a set's groups in k order, each step group_madd's
// fma((float)isum_g, s_g * dx_g, acc) then fma(m_g, xm_g, acc): the float operations of the AVX2 tile kernel, on
// the same exact isum_g (vpdpbusd from xc, where AVX2 sums |w| * sign(x, w) or widens int16 pairs). So this tile
// kernel gives the avx2 path's bits, and avx512s8 pairs it with the AVX2 small-N kernels, which decode 2.4x faster
// than the rows-as-lanes kernel on a Zen 4 (issue 31), while a prompt keeps vpdpbusd.
constexpr int SETS = 8;

// ---- small N: the same micro-kernel over activation rows as they are (qgemv_fused, kernels.h) -------
// Per 256 weights of the 16 rows: unpack_il into L1, then every column (up to CB at a time) multiplies it. No
// activation packing, and the products of one step share one dispatch (matmul.cpp, gemv_jobs).
template <int G>
struct LaneX {
  const XLanes& X;
  int c0, g;  // first column, group within the row
  const int8_t* q(int j) const { return X.xq + (size_t)(c0 + j) * X.ldx + (size_t)g * G; }
  int32_t c(int j) const { return X.xc[(size_t)(c0 + j) * X.ldg + g]; }
  float d(int j) const { return X.xd[(size_t)(c0 + j) * X.ldg + g]; }
  float m(int j) const { return X.xm[(size_t)(c0 + j) * X.ldg + g]; }
};

template <int G, bool MIN>
struct Lanes {
  template <int NC>
  struct K {
    // groups g0 .. g0 + ng - 1 of the row (unpacked from the chunk's first group), columns c0 .. c0 + NC - 1
    static void run(const uint8_t* u, const float* s, const float* m, int ng, int g0, const XLanes& X, int c0,
                    float* acc) {
      __m512 af[NC];
      for (int j = 0; j < NC; ++j) af[j] = _mm512_loadu_ps(acc + (size_t)(c0 + j) * TILE_M);
      for (int g = 0; g < ng; ++g) group_madd<G, MIN, NC>(u, s, m, g, LaneX<G>{X, c0, g0 + g}, af);
      for (int j = 0; j < NC; ++j) _mm512_storeu_ps(acc + (size_t)(c0 + j) * TILE_M, af[j]);
    }
  };
};

// always inlined: GCC otherwise finds the function free of side effects and drops its calls (kernels_avx2.cpp)
__attribute__((always_inline)) static inline void prefetch_span(const uint8_t* p, size_t bytes) {
  for (size_t o = 0; o < bytes; o += 64) _mm_prefetch((const char*)p + o, _MM_HINT_T0);
}

// Block: the type's block struct (BW weights); U its unpack_il; acc: [n][16] (kernels.h, qgemv_fused)
template <class Block, int BW, UnpackIlFn U, int G, bool MIN>
static void qgemv_fused_il(const uint8_t* w, size_t rb, int nr, int kc, int n, const XLanes& X, bool init, float* acc) {
  alignas(64) uint8_t u[CHUNK_K / 4 * 64];
  alignas(64) float s[CHUNK_K / G * TILE_M], m[MIN ? CHUNK_K / G * TILE_M : TILE_M];
  if (init) std::memset(acc, 0, sizeof(float) * TILE_M * n);
  for (int k0 = 0; k0 < kc; k0 += CHUNK_K) {
    const int kcc = std::min(CHUNK_K, kc - k0);
    const uint8_t* wc = w + (size_t)(k0 / BW) * sizeof(Block);
    // the next tile's rows of this chunk (a prefetch past the tensor is harmless; into L1 measured a little
    // faster than into L2 here)
    const size_t cb = (size_t)(kcc / BW) * sizeof(Block);
    for (int r = 0; r < TILE_M; ++r) prefetch_span(wc + (TILE_M + r) * rb, cb);
    U(wc, rb, nr, kcc, u, s, m);
    for (int c0 = 0; c0 < n; c0 += CB)
      with_nc<Lanes<G, MIN>::template K>(std::min(CB, n - c0), u, s, m, kcc / G, k0 / G, X, c0, acc);
  }
}

#if !defined(LLL_EMULATED_AVX512)  // inline asm on zmm registers: a real AVX-512 build only
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
#endif

// a hand-written unpack_il for type t: the tile path's unpack and the small-N kernel over it
template <class Block, int BW, UnpackIlFn U, int G, bool MIN>
static void use_il(KernelTable& k, QType t) {
  k.unpack_il[(int)t] = U;
  k.qgemv_fused[(int)t] = qgemv_fused_il<Block, BW, U, G, MIN>;
}

// the avx512s8 path's small-N kernels: AVX2's, with one 256-bit vpdpbusd for each vpmaddubsw + vpmaddwd
namespace vnni {
constexpr int ACC_SETS = 8;  // the avx2 order
#define LLL_GEMV_VNNI 1
#include "gemv_avx2.inc"
#undef LLL_GEMV_VNNI
}  // namespace vnni

}  // namespace avx512

const KernelTable* kernels_avx512() {
  static KernelTable t = [] {
    KernelTable k{};
    avx512::fill_generic(k);
    k.name = "avx512";
    k.interleave16 = avx512::interleave16_avx512;
    k.qgemm_chunk = avx512::qgemm_chunk_avx512<1>;
    k.qgemm_cb = avx512::CB;
    // small N: qgemv_fused_il for every quantized type (the tile micro-kernel without activation packing)
    k.fused_chunk_k = 0;
    // a step of 9-16 rows 1-11% faster than by the tile path (bench kernels --step-n, 2 runs)
    k.gemv_max_n = k.gemv_max_n_unpacked = 16;
#if !defined(LLL_EMULATED_AVX512)
    k.int8_peak = avx512::int8_peak_avx512;
    k.int8_peak_macs = PEAK_CHAINS * 64;
#endif
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
    using namespace avx512;
    use_il<block_q4_0, QK, unpack_il_nibbles<block_q4_0, 2, -1, false, false>, 32, false>(k, QType::Q4_0);
    use_il<block_q4_1, QK, unpack_il_nibbles<block_q4_1, 4, -1, true, false>, 32, true>(k, QType::Q4_1);
    use_il<block_q5_0, QK, unpack_il_nibbles<block_q5_0, 6, 2, false, false>, 32, false>(k, QType::Q5_0);
    use_il<block_q5_1, QK, unpack_il_nibbles<block_q5_1, 8, 4, true, false>, 32, true>(k, QType::Q5_1);
    use_il<block_iq4_nl, QK, unpack_il_nibbles<block_iq4_nl, 2, -1, false, true>, 32, false>(k, QType::IQ4_NL);
    use_il<block_q8_0, QK, unpack_il_q8_0, 32, false>(k, QType::Q8_0);
    use_il<block_q4_K, QK_K, unpack_il_q4_K, 32, true>(k, QType::Q4_K);
    use_il<block_q6_K, QK_K, unpack_il_q6_K, 16, false>(k, QType::Q6_K);
    k.qgemv_fused[(int)QType::Q2_K] =
        qgemv_fused_il<block_q2_K, QK_K, unpack_il_rows<unpack_rows<unpack_q2_K>, true>, 16, true>;
    k.qgemv_fused[(int)QType::Q3_K] =
        qgemv_fused_il<block_q3_K, QK_K, unpack_il_rows<unpack_rows<unpack_q3_K>, false>, 16, false>;
    k.qgemv_fused[(int)QType::Q5_K] =
        qgemv_fused_il<block_q5_K, QK_K, unpack_il_rows<unpack_rows<unpack_q5_K_v>, true>, 32, true>;
    k.qgemv_fused[(int)QType::IQ4_XS] =
        qgemv_fused_il<block_iq4_xs, QK_K, unpack_il_rows<unpack_rows<unpack_iq4_xs_v>, false>, 32, false>;
    // MXFP4 through the generic unpack (fill_generic), not run on a machine with AVX-512 yet
    k.qgemv_fused[(int)QType::MXFP4] =
        qgemv_fused_il<block_mxfp4, QK, unpack_il_rows<unpack_rows<unpack_mxfp4>, false>, 32, false>;
    return k;
  }();
  return &t;
}

// AVX2's table (its order, S = 8, its small-N kernels on vpdpbusd, its repacked layouts) with this file's tile path: the
// same bits as kernels_avx2() at every N (tests/native/test_batch_invariance.py)
const KernelTable* kernels_avx512s8() {
  static KernelTable t = [] {
    KernelTable k = *kernels_avx2();
    const KernelTable& a = *kernels_avx512();
    k.name = "avx512s8";
    k.qgemm_chunk = avx512::qgemm_chunk_avx512<avx512::SETS>;
    k.qgemm_cb = avx512::CB;
    static_assert(avx512::SETS == 8, "the avx2 order's sets");
    k.interleave16 = a.interleave16;
    // the tile layout straight from the rows: the types AVX2 reads as they lie in the file (Q8_0, Q6_K, ...) and
    // its Q4_Kx; its X8 layouts go through its unpack and interleave16
    for (int i = 0; i < N_TYPE_IDS; ++i) k.unpack_il[i] = a.unpack_il[i];
    k.unpack_il[(int)QType::Q4_KX] = avx512::unpack_il_q4_kx;
    k.int8_peak = a.int8_peak;
    k.int8_peak_macs = a.int8_peak_macs;
    // small N: AVX2's kernels and weight sources, the products by 256-bit vpdpbusd (the same exact int32 sums)
    avx512::vnni::for_each_source(
        [&](QType t, auto src) { k.qgemv_fused[(int)t] = avx512::vnni::qgemv_fused_small<decltype(src)>; });
    k.qgemv_chunk = avx512::vnni::qgemv_chunk_small;
    return k;
  }();
  return &t;
}

}  // namespace lll
