// AVX2 + FMA path: the generic kernels compiled with -mavx2 -mfma -mf16c (vectorised by the compiler),
// plus a hand-written 16-row micro-kernel on vpmaddubsw and the small-N kernels (gemv_avx2.inc).
#define LLL_NS avx2
#include "kernels_generic.inc"

#include <immintrin.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <vector>

namespace lll {
namespace avx2 {

// 16 rows x C columns: lanes are rows (two 8-row halves). vpmaddubsw multiplies unsigned weight bytes by
// signed activation bytes into saturating int16 pairs, so it is used only where it cannot saturate:
// u <= 127 (2 * 127 * 127 < 32768). Types with offset 128 (Q8_0, IQ4) use the signed value u - 128 with
// the sign trick |w| * sign(x, w) and skip the offset correction, which is exactly that shift. Unsigned
// types sum NSUM int16 products before widening (bounded by the largest u of the type).
constexpr int CB = 3;
// accumulator sets per output (kernels.h, the canonical order on this path): group g goes to set g % 8
constexpr int ACC_SETS = 8;

template <int G, bool MIN, bool SIGNED, int NSUM>
static void qgemm_panel(const uint8_t* w, const float* s, const float* m, int ng, const XGroups& X, int p,
                        float* acc) {
  const __m256i ones = _mm256_set1_epi16(1), flip = _mm256_set1_epi8((char)0x80);
  // X's fields in locals: the stores to acc below would otherwise have them reloaded after each
  const int8_t* const xq = X.xq;
  const float *const xd = X.xd, *const xm = X.xm;
  const int32_t* const xc = X.xc;
  const int g0 = X.g0;
  const size_t gp = (size_t)p * X.ng + g0;
  float* const ap = acc + (size_t)p * CB * ACC_SETS * TILE_M;  // [CB][ACC_SETS][16]
  for (int g = 0; g < ng; ++g) {
    const size_t gi = gp + g;
    const int8_t* xg = xq + gi * CB * G;  // [CB][G]
    __m256i ai[CB][2];
    // xc is 0 for types with a min: starting from zero lets the compiler drop the first add
    for (int j = 0; j < CB; ++j)
      ai[j][0] = ai[j][1] = SIGNED || MIN ? _mm256_setzero_si256() : _mm256_set1_epi32(xc[gi * CB + j]);
    if (SIGNED) {
      for (int q = 0; q < G / 4; ++q) {
        const uint8_t* wq = w + (size_t)(g * (G / 4) + q) * 64;
        __m256i wv[2];
        for (int h = 0; h < 2; ++h) wv[h] = _mm256_xor_si256(_mm256_loadu_si256((const __m256i*)(wq + 32 * h)), flip);
        for (int j = 0; j < CB; ++j) {
          int32_t xv;
          std::memcpy(&xv, xg + j * G + 4 * q, 4);
          const __m256i xb = _mm256_set1_epi32(xv);
          for (int h = 0; h < 2; ++h) {
            const __m256i p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(wv[h], wv[h]), _mm256_sign_epi8(xb, wv[h]));
            ai[j][h] = _mm256_add_epi32(ai[j][h], _mm256_madd_epi16(p16, ones));
          }
        }
      }
    } else if (G == 32 && NSUM == G / 4) {
      // 4-bit weights (Q4_0, Q4_1, Q4_K: u <= 15, NSUM 8), the whole group in int16 (so are Q2_K's and
      // Q3_K's groups of 16, left on the loop below: not measured, no model here has them). A step's two weight
      // vectors are loaded once and its activation word broadcast once per column, into CB * 2 int16 sums,
      // which with the float sums just fit the 16 registers; the loop below reloads both for every column and
      // half and keeps one int16 sum live at a time. Here 221 -> 180 instructions per group of 48 maddubs
      // (48 -> 16 weight loads), Q4_K at N = 512 on one thread 109-137 -> 124-172 GFLOP/s (README, session 9).
      // Not for 5- and 6-bit weights: their int16 sums cover part of a group, and the int32 sums besides would
      // not fit the registers (with the float sums in memory instead, or rows' halves in turn, no faster).
      __m256i p16[CB][2];
      for (int q = 0; q < G / 4; ++q) {
        const uint8_t* wq = w + (size_t)(g * (G / 4) + q) * 64;
        const __m256i w0 = _mm256_loadu_si256((const __m256i*)wq), w1 = _mm256_loadu_si256((const __m256i*)(wq + 32));
        for (int j = 0; j < CB; ++j) {
          int32_t xv;
          std::memcpy(&xv, xg + j * G + 4 * q, 4);
          const __m256i xb = _mm256_set1_epi32(xv);
          const __m256i m0 = _mm256_maddubs_epi16(w0, xb), m1 = _mm256_maddubs_epi16(w1, xb);
          p16[j][0] = q == 0 ? m0 : _mm256_add_epi16(p16[j][0], m0);
          p16[j][1] = q == 0 ? m1 : _mm256_add_epi16(p16[j][1], m1);
          // keeps each sum a chain in step order: GCC otherwise reassociates the adds into a tree and computes
          // every product of the group first, spilling them to the stack
          asm("" : "+x"(p16[j][0]), "+x"(p16[j][1]));
        }
      }
      for (int j = 0; j < CB; ++j)
        for (int h = 0; h < 2; ++h) ai[j][h] = _mm256_add_epi32(ai[j][h], _mm256_madd_epi16(p16[j][h], ones));
    } else {
      // unsigned weights u <= 7 or 31 (NSUM 4) or <= 63 (NSUM 2): NSUM int16 pair sums of at most
      // 2 * u * 127 each add up without saturating, so one madd widens NSUM steps
      for (int q0 = 0; q0 < G / 4; q0 += NSUM)
        for (int j = 0; j < CB; ++j)
          for (int h = 0; h < 2; ++h) {
            __m256i p16 = _mm256_setzero_si256();
            for (int q = q0; q < q0 + NSUM; ++q) {
              int32_t xv;
              std::memcpy(&xv, xg + j * G + 4 * q, 4);
              const __m256i wv = _mm256_loadu_si256((const __m256i*)(w + (size_t)(g * (G / 4) + q) * 64 + 32 * h));
              p16 = _mm256_add_epi16(p16, _mm256_maddubs_epi16(wv, _mm256_set1_epi32(xv)));
            }
            ai[j][h] = _mm256_add_epi32(ai[j][h], _mm256_madd_epi16(p16, ones));
          }
    }
    // the group's set: (X.g0 + g) % 8 (chunks start at multiples of 256 weights)
    float* as = ap + ((g0 + g) & (ACC_SETS - 1)) * TILE_M;
    for (int h = 0; h < 2; ++h) {
      const __m256 sv = _mm256_loadu_ps(s + g * TILE_M + 8 * h);
      const __m256 mv = MIN ? _mm256_loadu_ps(m + g * TILE_M + 8 * h) : _mm256_setzero_ps();
      for (int j = 0; j < CB; ++j) {
        float* aj = as + (size_t)j * ACC_SETS * TILE_M + 8 * h;
        const __m256 sd = _mm256_mul_ps(sv, _mm256_set1_ps(xd[gi * CB + j]));
        // a row's first 8 groups start their sets: +0 (acc is not zeroed beforehand)
        const __m256 a0 = g0 + g < ACC_SETS ? _mm256_setzero_ps() : _mm256_loadu_ps(aj);
        __m256 af = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ai[j][h]), sd, a0);
        if (MIN) af = _mm256_fmadd_ps(mv, _mm256_set1_ps(xm[gi * CB + j]), af);
        _mm256_storeu_ps(aj, af);
      }
    }
  }
}

template <int G, bool MIN, bool SIGNED, int NSUM = 4>
static void qgemm_layout(const uint8_t* w, const float* s, const float* m, int kc, const XGroups& X, float* acc) {
  const int ng = kc / G;
  for (int p = 0; p < X.n_panels; ++p) {
    qgemm_panel<G, MIN, SIGNED, NSUM>(w, s, m, ng, X, p, acc);
    if (X.g0 == 0 && ng < ACC_SETS)  // a row shorter than 8 groups: the sets it leaves empty
      for (int j = 0; j < CB; ++j)
        std::memset(acc + (((size_t)p * CB + j) * ACC_SETS + ng) * TILE_M, 0, sizeof(float) * (ACC_SETS - ng) * TILE_M);
  }
}

static void qgemm_chunk_avx2(const QuantLayout& L, const uint8_t* w, const float* s, const float* m, int kc,
                             const XGroups& X, float* acc) {
  if (L.offset == 128) {
    qgemm_layout<32, false, true>(w, s, m, kc, X, acc);
  } else if (L.group == 32) {  // NSUM * 2 * umax * 127 <= 32767
    if (L.umax <= 15) {
      if (L.has_min) qgemm_layout<32, true, false, 8>(w, s, m, kc, X, acc);  // Q4_1, Q4_K
      else qgemm_layout<32, false, false, 8>(w, s, m, kc, X, acc);          // Q4_0
    } else {
      if (L.has_min) qgemm_layout<32, true, false>(w, s, m, kc, X, acc);    // Q5_1, Q5_K
      else qgemm_layout<32, false, false>(w, s, m, kc, X, acc);            // Q5_0
    }
  } else {
    if (L.has_min) qgemm_layout<16, true, false>(w, s, m, kc, X, acc);        // Q2_K: u <= 3
    else if (L.offset == 32) qgemm_layout<16, false, false, 2>(w, s, m, kc, X, acc);  // Q6_K: u <= 63
    else qgemm_layout<16, false, false>(w, s, m, kc, X, acc);                  // Q3_K: u <= 7
  }
}


// ---- interleave: u_rows [16][kc] -> u_il [kc/4][16][4] ------------------------------------------------
// Per 32 weights, each half of 8 rows is an 8 x 8 dword transpose (unpack 32, unpack 64, swap 128-bit lanes).
static inline void transpose8_epi32(__m256i r[8]) {
  __m256i t[8], u[8];
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_epi32(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4)
    for (int h = 0; h < 2; ++h) {
      u[i + h] = _mm256_unpacklo_epi64(t[i + h], t[i + 2 + h]);
      u[i + 2 + h] = _mm256_unpackhi_epi64(t[i + h], t[i + 2 + h]);
    }
  // u[0..3]: rows 0..3, dwords (0,4) (2,6)... in lane halves; u[4..7]: rows 4..7
  // after the two unpacks, u[i] for i < 4 holds dword d(i) of rows 0..3 in its low lane and d(i) + 4 in its high
  // lane, with d = {0, 1, 2, 3} ordered as {0, 2, 1, 3} by the unpack pattern
  const int dw[4] = {0, 2, 1, 3};
  for (int i = 0; i < 4; ++i) {
    r[dw[i]] = _mm256_permute2x128_si256(u[i], u[i + 4], 0x20);
    r[dw[i] + 4] = _mm256_permute2x128_si256(u[i], u[i + 4], 0x31);
  }
}
static void interleave16_avx2(const uint8_t* u_rows, int kc, uint8_t* u_il) {
  for (int k0 = 0; k0 < kc; k0 += 32) {
    uint8_t* out = u_il + (k0 >> 2) * 64;
    for (int h = 0; h < 2; ++h) {  // rows 8h .. 8h + 7
      __m256i r[8];
      for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_si256((const __m256i*)(u_rows + (size_t)(8 * h + i) * kc + k0));
      transpose8_epi32(r);
      for (int j = 0; j < 8; ++j) _mm256_storeu_si256((__m256i*)(out + j * 64 + 32 * h), r[j]);
    }
  }
}

#define LLL_GEMV_VNNI 0
#include "gemv_avx2.inc"

// KernelTable::quantize_row_x, 32 values a block as vectors: the generic loop's arithmetic (amax of |x|, d = amax / 127,
// id = 127 / amax, x * id rounded to nearest even, the MXCSR default that nearbyint follows), so the same bytes for
// finite x. On decode's critical path: the generic loop was 0.5% of the 0.5B's samples, on one thread while the
// other waited
static void quantize_row_x_avx2(const float* x, int k, int8_t* xq, float* dx, int32_t* sum16) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  for (int b = 0; b < k / 32; ++b) {
    const float* xb = x + (size_t)b * 32;
    __m256 v[4];
    for (int i = 0; i < 4; ++i) v[i] = _mm256_loadu_ps(xb + 8 * i);
    // max(a, m) gives m where a is NaN: NaNs are skipped, as the generic loop's a > amax skips them
    __m256 m8 = _mm256_setzero_ps();
    for (int i = 0; i < 4; ++i) m8 = _mm256_max_ps(_mm256_and_ps(v[i], abs_mask), m8);
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m8), _mm256_extractf128_ps(m8, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1));
    const float amax = _mm_cvtss_f32(m4);
    const float d = amax / 127.f, id = d > 0.f && 127.f / amax <= FLT_MAX ? 127.f / amax : 0.f;
    dx[b] = d;
    const __m256 idv = _mm256_set1_ps(id);
    __m256i q[4];
    for (int i = 0; i < 4; ++i) q[i] = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], idv));
    for (int h = 0; h < 2; ++h) {
      const __m256i s8 = _mm256_add_epi32(q[2 * h], q[2 * h + 1]);
      __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s8), _mm256_extracti128_si256(s8, 1));
      s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4E));
      s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xB1));
      sum16[(size_t)b * 2 + h] = _mm_cvtsi128_si32(s4);
    }
    // |q| <= 127, so the saturating packs are plain narrowing; they interleave 128-bit halves, the permute restores order
    const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
    _mm256_storeu_si256((__m256i*)(xq + (size_t)b * 32),
                        _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
  }
}

// KernelTable::reduce_rows: eight rows at a time, their set vectors transposed (lane i: row i) and added set by set,
// (((s0 + s1) + s2) + ...) + s7 in every lane: the caller's scalar loop, as lanes
static void reduce_rows_avx2(const float* acc, int nr, int n, float* y, size_t ldy) {
  for (int c = 0; c < n; ++c) {
    const float* a = acc + (size_t)c * TILE_M * ACC_SETS;
    for (int r0 = 0; r0 < nr; r0 += 8) {
      __m256 v[8], t[8];
      for (int i = 0; i < 8; ++i) v[i] = _mm256_loadu_ps(a + (size_t)(r0 + i) * ACC_SETS);  // past nr: not stored
      for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(v[i], v[i + 1]);      // [a0 b0 a1 b1 | a4 b4 a5 b5]
        t[i + 1] = _mm256_unpackhi_ps(v[i], v[i + 1]);  // [a2 b2 a3 b3 | a6 b6 a7 b7]
      }
      for (int i = 0; i < 8; i += 4)
        for (int h = 0; h < 2; ++h) {  // rows i..i+3: sets 2h (lanes 0..3) and 2h + 1, in both halves
          v[i + 2 * h] = _mm256_shuffle_ps(t[i + h], t[i + 2 + h], 0x44);
          v[i + 2 * h + 1] = _mm256_shuffle_ps(t[i + h], t[i + 2 + h], 0xEE);
        }
      // v[0..3]: rows 0..3, sets 0, 1, 2, 3 (low half) and 4, 5, 6, 7 (high); v[4..7] rows 4..7 likewise
      for (int j = 0; j < 4; ++j) {
        t[j] = _mm256_permute2f128_ps(v[j], v[4 + j], 0x20);      // set j, rows 0..7
        t[4 + j] = _mm256_permute2f128_ps(v[j], v[4 + j], 0x31);  // set j + 4
      }
      __m256 s = _mm256_add_ps(t[0], t[1]);
      for (int j = 2; j < 8; ++j) s = _mm256_add_ps(s, t[j]);
      float* out = y + (size_t)c * ldy + r0;
      if (nr - r0 >= 8) {
        _mm256_storeu_ps(out, s);
      } else {
        alignas(32) float tmp[8];
        _mm256_store_ps(tmp, s);
        for (int i = 0; i < nr - r0; ++i) out[i] = tmp[i];
      }
    }
  }
}

// the int8 peak loop (kernels.h): vpmaddubsw and vpaddw, 32 multiply-adds a chain and step
static uint64_t int8_peak_avx2(int64_t iters) {
  static_assert(PEAK_CHAINS == 12, "the asm below names 12 chains");
  // twelve named locals in one asm statement a step: with intrinsics over an array, GCC stored the array back
  // to the stack every step
  auto bytes = [](int v) { return _mm256_set1_epi8((char)v); };
  const __m256i b = bytes(3);
  __m256i x0 = bytes(1), x1 = bytes(2), x2 = bytes(3), x3 = bytes(4), x4 = bytes(5), x5 = bytes(6), x6 = bytes(7),
          x7 = bytes(8), x8 = bytes(9), x9 = bytes(10), x10 = bytes(11), x11 = bytes(12);
#define LLL_PEAK_STEP(n) "vpmaddubsw %[b], %[x" #n "], %%ymm15\n\tvpaddw %%ymm15, %[x" #n "], %[x" #n "]\n\t"
  for (int64_t i = 0; i < iters; ++i)
    asm volatile(LLL_PEAK_STEP(0) LLL_PEAK_STEP(1) LLL_PEAK_STEP(2) LLL_PEAK_STEP(3) LLL_PEAK_STEP(4) LLL_PEAK_STEP(5)
                     LLL_PEAK_STEP(6) LLL_PEAK_STEP(7) LLL_PEAK_STEP(8) LLL_PEAK_STEP(9) LLL_PEAK_STEP(10) LLL_PEAK_STEP(11)
                 : [x0] "+x"(x0), [x1] "+x"(x1), [x2] "+x"(x2), [x3] "+x"(x3), [x4] "+x"(x4), [x5] "+x"(x5),
                   [x6] "+x"(x6), [x7] "+x"(x7), [x8] "+x"(x8), [x9] "+x"(x9), [x10] "+x"(x10), [x11] "+x"(x11)
                 : [b] "x"(b)
                 : "xmm15");
#undef LLL_PEAK_STEP
  const __m256i x[PEAK_CHAINS] = {x0, x1, x2, x3, x4, x5, x6, x7, x8, x9, x10, x11};
  return lane_sum<uint16_t>(x, PEAK_CHAINS);
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
    k.acc_sets = avx2::ACC_SETS;
    k.qgemv_chunk = avx2::qgemv_chunk_small;
    // up to 8 activation rows the fused lanes-along-k kernels beat the tile path from memory (the 1.5B's decode step,
    // N = 5, 6, 8: 152, 156, 191 ms -> 107, 127, 154, Zen 3, 2 threads); over unpack's copy only up to 4 (Q5_K, Q3_K
    // at N = 8, in cache: 20-30% slower than the tile path), a path no quantized type takes here since every one
    // has its weight source (gemv_avx2.inc's for_each_source)
    k.gemv_max_n = 8;
    k.gemv_max_n_unpacked = 4;
    k.reduce_rows = avx2::reduce_rows_avx2;
    k.quantize_row_x = avx2::quantize_row_x_avx2;
    k.interleave16 = avx2::interleave16_avx2;
    // a weight source serves both the small-N kernel and unpack
    avx2::for_each_source([&](QType t, auto src) {
      using S = decltype(src);
      k.qgemv_fused[(int)t] = avx2::qgemv_fused_small<S>;
      k.unpack[(int)t] = avx2::unpack_source<S>;
    });
    // measured: these types' products at N = 1 (docs/performance.md)
    for (QType t : {QType::Q4_0, QType::Q4_1, QType::Q5_0, QType::Q5_1, QType::Q4_K}) k.repack[(int)t] = true;
    k.int8_peak = avx2::int8_peak_avx2;
    k.int8_peak_macs = PEAK_CHAINS * 32;
    return k;
  }();
  return &t;
}
}  // namespace lll
