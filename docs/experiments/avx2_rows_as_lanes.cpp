// An experiment behind docs/performance.md ("AVX2 steps of 2-8 rows"), not part of the build: the AVX2 small-N
// product's integer and float stage two ways, on unpacked 5-bit weights (u in 0..31, groups of 32, the X8 Q5_0 form:
// isum + offset, then fma(cvt, s * dx, set g % 8)), both giving the same float bits per (row, column, set):
//  per-row: what kernels_avx2.cpp's gemv_row does (a row at a time, lanes = groups, transpose-adds);
//  rows as lanes: 8 rows interleaved by 4 bytes, lanes = rows, no transposes; accumulators in registers or in L1.
// Build and run (one thread, on an otherwise idle core; M rows of K weights):
//   g++ -O3 -march=native -std=c++17 docs/experiments/avx2_rows_as_lanes.cpp -o /tmp/ral
//   taskset -c 1 /tmp/ral 256 1024     # in L2
//   taskset -c 1 /tmp/ral 4864 768     # in L3
#include <immintrin.h>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <type_traits>
#include <vector>

// columns 0 .. n - 1 four at a time, then three, two or one, as kernels' gemv_source takes them: f(c0, C) with C a
// std::integral_constant
template <class F>
static void by_columns(int n, F f) {
  int c = 0;
  for (; c + 4 <= n; c += 4) f(c, std::integral_constant<int, 4>{});
  if (n - c == 3) f(c, std::integral_constant<int, 3>{});
  else if (n - c == 2) f(c, std::integral_constant<int, 2>{});
  else if (n - c == 1) f(c, std::integral_constant<int, 1>{});
}

static inline __m256i pair_sums16(__m256i v0, __m256i v1) {
  return _mm256_add_epi16(_mm256_unpacklo_epi32(v0, v1), _mm256_unpackhi_epi32(v0, v1));
}
static inline __m256i quad_sums(__m256i t01, __m256i t23) {
  return _mm256_add_epi32(_mm256_unpacklo_epi64(t01, t23), _mm256_unpackhi_epi64(t01, t23));
}
static inline __m256i lane_sums8(const __m256i t[4]) {
  const __m256i lo = quad_sums(t[0], t[1]), hi = quad_sums(t[2], t[3]);
  return _mm256_add_epi32(_mm256_blend_epi32(lo, hi, 0xF0), _mm256_permute2x128_si256(lo, hi, 0x21));
}

struct X {  // n columns of activations: xq [n][k] int8, xd [n][k/32], xc [n][k/32] (offset correction)
  std::vector<int8_t> q;
  std::vector<float> d;
  std::vector<int32_t> c;
  int k;
};

// per-row: rows one at a time, C columns; acc [col][row][8]
template <int C>
static void per_row(const uint8_t* u, const float* s, int m, int k, const X& x, int c0, float* acc) {
  const int ng = k / 32;
  for (int r = 0; r < m; ++r) {
    __m256 a[C];
    for (int j = 0; j < C; ++j) a[j] = _mm256_setzero_ps();
    const uint8_t* ur = u + (size_t)r * k;
    for (int s0 = 0; s0 < ng; s0 += 8) {  // k multiple of 256 here
      __m256i t[C][4];
      for (int i = 0; i < 4; ++i) {
        const __m256i u0 = _mm256_loadu_si256((const __m256i*)(ur + 32 * (s0 + 2 * i)));
        const __m256i u1 = _mm256_loadu_si256((const __m256i*)(ur + 32 * (s0 + 2 * i + 1)));
        for (int j = 0; j < C; ++j) {
          const int8_t* xr = x.q.data() + (size_t)(c0 + j) * k + 32 * (s0 + 2 * i);
          const __m256i p0 = _mm256_maddubs_epi16(u0, _mm256_loadu_si256((const __m256i*)xr));
          const __m256i p1 = _mm256_maddubs_epi16(u1, _mm256_loadu_si256((const __m256i*)(xr + 32)));
          t[j][i] = _mm256_madd_epi16(pair_sums16(p0, p1), _mm256_set1_epi16(1));
        }
      }
      const __m256 sv = _mm256_loadu_ps(s + (size_t)r * ng + s0);
      for (int j = 0; j < C; ++j) {
        const size_t xo = (size_t)(c0 + j) * ng + s0;
        __m256i isum = _mm256_add_epi32(lane_sums8(t[j]), _mm256_loadu_si256((const __m256i*)(x.c.data() + xo)));
        a[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(sv, _mm256_loadu_ps(x.d.data() + xo)), a[j]);
      }
    }
    for (int j = 0; j < C; ++j) _mm256_storeu_ps(acc + ((size_t)(c0 + j) * m + r) * 8, a[j]);
  }
}

// rows as lanes, accumulators in registers: w8 [m/8][ng][8 dwords][8 rows x 4 bytes] (row-interleaved by 4 bytes), s8 [m/8][ng][8 rows]; acc8 [col][m/8][set][8 rows]
template <int C>
static void rows_as_lanes(const uint8_t* w8, const float* s8, int m, int k, const X& x, int c0, float* acc8) {
  const int ng = k / 32;
  const __m256i ones = _mm256_set1_epi16(1);
  for (int rb = 0; rb < m / 8; ++rb) {
    __m256 a[C][8];
    for (int j = 0; j < C; ++j)
      for (int t = 0; t < 8; ++t) a[j][t] = _mm256_setzero_ps();
    const uint8_t* wb = w8 + (size_t)rb * ng * 256;
    for (int g = 0; g < ng; ++g) {
      const uint8_t* wg = wb + (size_t)g * 256;
      __m256i wv[8];
      for (int d = 0; d < 8; ++d) wv[d] = _mm256_loadu_si256((const __m256i*)(wg + 32 * d));
      const __m256 sv = _mm256_loadu_ps(s8 + ((size_t)rb * ng + g) * 8);
      for (int j = 0; j < C; ++j) {
        const int8_t* xg = x.q.data() + (size_t)(c0 + j) * k + 32 * g;
        int32_t xw[8];
        std::memcpy(xw, xg, 32);
        __m256i h0 = _mm256_maddubs_epi16(wv[0], _mm256_set1_epi32(xw[0]));
        h0 = _mm256_add_epi16(h0, _mm256_maddubs_epi16(wv[1], _mm256_set1_epi32(xw[1])));
        h0 = _mm256_add_epi16(h0, _mm256_maddubs_epi16(wv[2], _mm256_set1_epi32(xw[2])));
        h0 = _mm256_add_epi16(h0, _mm256_maddubs_epi16(wv[3], _mm256_set1_epi32(xw[3])));
        __m256i h1 = _mm256_maddubs_epi16(wv[4], _mm256_set1_epi32(xw[4]));
        h1 = _mm256_add_epi16(h1, _mm256_maddubs_epi16(wv[5], _mm256_set1_epi32(xw[5])));
        h1 = _mm256_add_epi16(h1, _mm256_maddubs_epi16(wv[6], _mm256_set1_epi32(xw[6])));
        h1 = _mm256_add_epi16(h1, _mm256_maddubs_epi16(wv[7], _mm256_set1_epi32(xw[7])));
        __m256i isum = _mm256_add_epi32(_mm256_madd_epi16(h0, ones), _mm256_madd_epi16(h1, ones));
        const size_t xo = (size_t)(c0 + j) * ng + g;
        isum = _mm256_add_epi32(isum, _mm256_set1_epi32(x.c[xo]));
        a[j][g & 7] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(sv, _mm256_set1_ps(x.d[xo])), a[j][g & 7]);
      }
    }
    for (int j = 0; j < C; ++j)
      for (int t = 0; t < 8; ++t) _mm256_storeu_ps(acc8 + (((size_t)(c0 + j) * (m / 8) + rb) * 8 + t) * 8, a[j][t]);
  }
}


// rows as lanes, the accumulators in acc8 itself (L1), columns four at a time
template <int C>
static void rows_as_lanes_mem(const uint8_t* w8, const float* s8, int m, int k, const X& x, int c0, float* acc8) {
  const int ng = k / 32;
  const __m256i ones = _mm256_set1_epi16(1);
  for (int rb = 0; rb < m / 8; ++rb) {
    float* ac[C];
    for (int j = 0; j < C; ++j) {
      ac[j] = acc8 + ((size_t)(c0 + j) * (m / 8) + rb) * 64;
      for (int t = 0; t < 8; ++t) _mm256_storeu_ps(ac[j] + 8 * t, _mm256_setzero_ps());
    }
    const uint8_t* wb = w8 + (size_t)rb * ng * 256;
    for (int g = 0; g < ng; ++g) {
      const uint8_t* wg = wb + (size_t)g * 256;
      const __m256 sv = _mm256_loadu_ps(s8 + ((size_t)rb * ng + g) * 8);
      __m256i h0[C], h1[C];
      for (int d = 0; d < 4; ++d) {
        const __m256i w0 = _mm256_loadu_si256((const __m256i*)(wg + 32 * d));
        const __m256i w1 = _mm256_loadu_si256((const __m256i*)(wg + 32 * (d + 4)));
        for (int j = 0; j < C; ++j) {
          const int32_t* xg = (const int32_t*)(x.q.data() + (size_t)(c0 + j) * k + 32 * g);
          const __m256i p0 = _mm256_maddubs_epi16(w0, _mm256_set1_epi32(xg[d]));
          const __m256i p1 = _mm256_maddubs_epi16(w1, _mm256_set1_epi32(xg[d + 4]));
          h0[j] = d ? _mm256_add_epi16(h0[j], p0) : p0;
          h1[j] = d ? _mm256_add_epi16(h1[j], p1) : p1;
        }
      }
      for (int j = 0; j < C; ++j) {
        __m256i isum = _mm256_add_epi32(_mm256_madd_epi16(h0[j], ones), _mm256_madd_epi16(h1[j], ones));
        const size_t xo = (size_t)(c0 + j) * ng + g;
        isum = _mm256_add_epi32(isum, _mm256_set1_epi32(x.c[xo]));
        float* p = ac[j] + 8 * (g & 7);
        _mm256_storeu_ps(p, _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(sv, _mm256_set1_ps(x.d[xo])), _mm256_loadu_ps(p)));
      }
    }
  }
}

template <class F>
static double best_ms(F f, int reps) {
  double best = 1e30;
  for (int i = 0; i < reps; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    f();
    best = std::min(best, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

int main(int argc, char** argv) {
  const int m = argc > 1 ? atoi(argv[1]) : 4864, k = argc > 2 ? atoi(argv[2]) : 768;  // m: a multiple of 8
  const int K = (k / 256) * 256, ng = K / 32;
  std::mt19937 rng(1);
  std::vector<uint8_t> u((size_t)m * K);
  for (auto& v : u) v = rng() % 32;
  std::vector<float> s((size_t)m * ng);
  for (auto& v : s) v = (rng() % 1000) / 997.0f + 0.01f;
  const int NMAX = 8;
  X x{std::vector<int8_t>((size_t)NMAX * K), std::vector<float>((size_t)NMAX * ng), std::vector<int32_t>((size_t)NMAX * ng), K};
  for (auto& v : x.q) v = (int8_t)(rng() % 255 - 127);
  for (auto& v : x.d) v = (rng() % 1000) / 1001.0f + 0.001f;
  for (auto& v : x.c) v = (int32_t)(rng() % 4000) - 2000;
  // interleave
  std::vector<uint8_t> w8((size_t)m * K);
  std::vector<float> s8((size_t)m * ng);
  for (int rb = 0; rb < m / 8; ++rb)
    for (int g = 0; g < ng; ++g) {
      for (int d = 0; d < 8; ++d)
        for (int r = 0; r < 8; ++r)
          std::memcpy(&w8[(((size_t)rb * ng + g) * 8 + d) * 32 + 4 * r], &u[(size_t)(rb * 8 + r) * K + 32 * g + 4 * d], 4);
      for (int r = 0; r < 8; ++r) s8[((size_t)rb * ng + g) * 8 + r] = s[(size_t)(rb * 8 + r) * ng + g];
    }
  std::vector<float> accA((size_t)NMAX * m * 8), accB((size_t)NMAX * m * 8);
  auto runA = [&](int n) {
    by_columns(n, [&](int c, auto C) { per_row<decltype(C)::value>(u.data(), s.data(), m, K, x, c, accA.data()); });
  };
  auto runB = [&](int n) {
    int c = 0;
    for (; c + 2 <= n; c += 2) rows_as_lanes<2>(w8.data(), s8.data(), m, K, x, c, accB.data());
    if (n - c == 1) rows_as_lanes<1>(w8.data(), s8.data(), m, K, x, c, accB.data());
  };
  auto runC = [&](int n) {
    by_columns(n, [&](int c, auto C) {
      rows_as_lanes_mem<decltype(C)::value>(w8.data(), s8.data(), m, K, x, c, accB.data());
    });
  };
  // bits
  runA(NMAX);
  runB(NMAX);
  auto differing = [&] {  // sets of accB (rows as lanes) whose bits are not accA's (per row)
    long bad = 0;
    for (int c = 0; c < NMAX; ++c)
      for (int r = 0; r < m; ++r)
        for (int t = 0; t < 8; ++t) {
          const float a = accA[((size_t)c * m + r) * 8 + t];
          const float b = accB[(((size_t)c * (m / 8) + r / 8) * 8 + t) * 8 + r % 8];
          if (std::memcmp(&a, &b, 4)) ++bad;
        }
    return bad;
  };
  printf("m %d k %d: rows as lanes, accumulators in registers: %ld of %ld sets differ\n", m, K, differing(),
         (long)NMAX * m * 8);
  std::fill(accB.begin(), accB.end(), 0.0f);
  runC(NMAX);
  printf("rows as lanes, accumulators in L1: %ld differ\n", differing());
  const double mb = (double)m * K / 1e6;
  for (int n : {1, 2, 3, 4, 6, 8}) {
    const double ta = best_ms([&] { runA(n); }, 30), tb = best_ms([&] { runB(n); }, 30), tc = best_ms([&] { runC(n); }, 30);
    printf("N=%d per-row %.3f ms (%.1f Gw/s)  rows-as-lanes %.3f ms (B/A %.2f)  in-memory acc %.3f ms (C/A %.2f)\n", n, ta, mb / ta, tb, tb / ta, tc, tc / ta);
  }
}
