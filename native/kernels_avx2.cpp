// AVX2 + FMA path: the generic kernels compiled with -mavx2 -mfma -mf16c (vectorised by the compiler),
// plus a hand-written 16-row micro-kernel on vpmaddubsw.
#define LLL_NS avx2
#include "kernels_generic.inc"

#include <immintrin.h>

namespace lll {
namespace avx2 {

// 16 rows x C columns: lanes are rows (two 8-row halves). vpmaddubsw multiplies unsigned weight bytes by
// signed activation bytes into saturating int16 pairs, so it is used only where it cannot saturate:
// u <= 127 (2 * 127 * 127 < 32768). Types with offset 128 (Q8_0, IQ4) use the signed value u - 128 with
// the sign trick |w| * sign(x, w) and skip the offset correction, which is exactly that shift.
template <int G, bool MIN, bool SIGNED, int C>
static inline void qgemm_cols(const uint8_t* w, const float* s, const float* m, int ng, const XGroups& X, int c0,
                              float* acc) {
  const __m256i ones = _mm256_set1_epi16(1), flip = _mm256_set1_epi8((char)0x80);
  __m256 af[C][2];
  for (int j = 0; j < C; ++j)
    for (int h = 0; h < 2; ++h) af[j][h] = _mm256_loadu_ps(acc + (c0 + j) * TILE_M + 8 * h);
  for (int g = 0; g < ng; ++g) {
    __m256i ai[C][2];
    for (int j = 0; j < C; ++j) {
      const __m256i corr = _mm256_set1_epi32(SIGNED ? 0 : X.xc[(size_t)(c0 + j) * X.ldg + g]);
      ai[j][0] = ai[j][1] = corr;
    }
    for (int q = 0; q < G / 4; ++q) {
      const uint8_t* wq = w + (size_t)(g * (G / 4) + q) * 64;
      __m256i wv[2];
      for (int h = 0; h < 2; ++h) {
        wv[h] = _mm256_loadu_si256((const __m256i*)(wq + 32 * h));
        if (SIGNED) wv[h] = _mm256_xor_si256(wv[h], flip);
      }
      for (int j = 0; j < C; ++j) {
        int32_t xv;
        std::memcpy(&xv, X.xq + (size_t)(c0 + j) * X.ldx + g * G + 4 * q, 4);
        const __m256i xb = _mm256_set1_epi32(xv);
        for (int h = 0; h < 2; ++h) {
          const __m256i p16 = SIGNED ? _mm256_maddubs_epi16(_mm256_sign_epi8(wv[h], wv[h]), _mm256_sign_epi8(xb, wv[h]))
                                     : _mm256_maddubs_epi16(wv[h], xb);
          ai[j][h] = _mm256_add_epi32(ai[j][h], _mm256_madd_epi16(p16, ones));
        }
      }
    }
    for (int h = 0; h < 2; ++h) {
      const __m256 sv = _mm256_loadu_ps(s + g * TILE_M + 8 * h);
      for (int j = 0; j < C; ++j) {
        const __m256 sd = _mm256_mul_ps(sv, _mm256_set1_ps(X.xd[(size_t)(c0 + j) * X.ldg + g]));
        af[j][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ai[j][h]), sd, af[j][h]);
      }
      if (MIN) {
        const __m256 mv = _mm256_loadu_ps(m + g * TILE_M + 8 * h);
        for (int j = 0; j < C; ++j)
          af[j][h] = _mm256_fmadd_ps(mv, _mm256_set1_ps(X.xm[(size_t)(c0 + j) * X.ldg + g]), af[j][h]);
      }
    }
  }
  for (int j = 0; j < C; ++j)
    for (int h = 0; h < 2; ++h) _mm256_storeu_ps(acc + (c0 + j) * TILE_M + 8 * h, af[j][h]);
}

template <int G, bool MIN, bool SIGNED>
static void qgemm_layout(const uint8_t* w, const float* s, const float* m, int kc, int n, const XGroups& X,
                         float* acc) {
  constexpr int CB = 3;
  const int ng = kc / G;
  int c = 0;
  for (; c + CB <= n; c += CB) qgemm_cols<G, MIN, SIGNED, CB>(w, s, m, ng, X, c, acc);
  if (n - c == 2) qgemm_cols<G, MIN, SIGNED, 2>(w, s, m, ng, X, c, acc);
  else if (n - c == 1) qgemm_cols<G, MIN, SIGNED, 1>(w, s, m, ng, X, c, acc);
}

static void qgemm_chunk_avx2(const QuantLayout& L, const uint8_t* w, const float* s, const float* m, int kc, int n,
                             const XGroups& X, float* acc) {
  if (L.offset == 128) {
    qgemm_layout<32, false, true>(w, s, m, kc, n, X, acc);
  } else if (L.group == 32) {
    if (L.has_min) qgemm_layout<32, true, false>(w, s, m, kc, n, X, acc);
    else qgemm_layout<32, false, false>(w, s, m, kc, n, X, acc);
  } else {
    if (L.has_min) qgemm_layout<16, true, false>(w, s, m, kc, n, X, acc);
    else qgemm_layout<16, false, false>(w, s, m, kc, n, X, acc);
  }
}

}  // namespace avx2
}  // namespace lll

namespace lll {
const KernelTable* kernels_avx2() {
  static KernelTable t = [] {
    KernelTable k{};
    avx2::fill_generic(k);
    k.name = "avx2";
    k.qgemm_chunk = avx2::qgemm_chunk_avx2;
    return k;
  }();
  return &t;
}
}  // namespace lll
