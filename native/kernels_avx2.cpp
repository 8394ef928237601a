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
constexpr int CB = 3;

template <int G, bool MIN, bool SIGNED>
static void qgemm_panel(const uint8_t* w, const float* s, const float* m, int ng, const XGroups& X, int p,
                        float* acc) {
  const __m256i ones = _mm256_set1_epi16(1), flip = _mm256_set1_epi8((char)0x80);
  __m256 af[CB][2];
  for (int j = 0; j < CB; ++j)
    for (int h = 0; h < 2; ++h) af[j][h] = _mm256_loadu_ps(acc + (p * CB + j) * TILE_M + 8 * h);
  for (int g = 0; g < ng; ++g) {
    const size_t gi = (size_t)p * X.ng + X.g0 + g;
    const int8_t* xg = X.xq + gi * CB * G;  // [CB][G]
    __m256i ai[CB][2];
    for (int j = 0; j < CB; ++j) ai[j][0] = ai[j][1] = _mm256_set1_epi32(SIGNED ? 0 : X.xc[gi * CB + j]);
    for (int q = 0; q < G / 4; ++q) {
      const uint8_t* wq = w + (size_t)(g * (G / 4) + q) * 64;
      __m256i wv[2];
      for (int h = 0; h < 2; ++h) {
        wv[h] = _mm256_loadu_si256((const __m256i*)(wq + 32 * h));
        if (SIGNED) wv[h] = _mm256_xor_si256(wv[h], flip);
      }
      for (int j = 0; j < CB; ++j) {
        int32_t xv;
        std::memcpy(&xv, xg + j * G + 4 * q, 4);
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
      for (int j = 0; j < CB; ++j) {
        const __m256 sd = _mm256_mul_ps(sv, _mm256_set1_ps(X.xd[gi * CB + j]));
        af[j][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ai[j][h]), sd, af[j][h]);
      }
      if (MIN) {
        const __m256 mv = _mm256_loadu_ps(m + g * TILE_M + 8 * h);
        for (int j = 0; j < CB; ++j) af[j][h] = _mm256_fmadd_ps(mv, _mm256_set1_ps(X.xm[gi * CB + j]), af[j][h]);
      }
    }
  }
  for (int j = 0; j < CB; ++j)
    for (int h = 0; h < 2; ++h) _mm256_storeu_ps(acc + (p * CB + j) * TILE_M + 8 * h, af[j][h]);
}

template <int G, bool MIN, bool SIGNED>
static void qgemm_layout(const uint8_t* w, const float* s, const float* m, int kc, const XGroups& X, float* acc) {
  for (int p = 0; p < X.n_panels; ++p) qgemm_panel<G, MIN, SIGNED>(w, s, m, kc / G, X, p, acc);
}

static void qgemm_chunk_avx2(const QuantLayout& L, const uint8_t* w, const float* s, const float* m, int kc,
                             const XGroups& X, float* acc) {
  if (L.offset == 128) {
    qgemm_layout<32, false, true>(w, s, m, kc, X, acc);
  } else if (L.group == 32) {
    if (L.has_min) qgemm_layout<32, true, false>(w, s, m, kc, X, acc);
    else qgemm_layout<32, false, false>(w, s, m, kc, X, acc);
  } else {
    if (L.has_min) qgemm_layout<16, true, false>(w, s, m, kc, X, acc);
    else qgemm_layout<16, false, false>(w, s, m, kc, X, acc);
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
    k.qgemm_cb = avx2::CB;
    return k;
  }();
  return &t;
}
}  // namespace lll
