// AVX2 + FMA path: the generic kernels compiled with -mavx2 -mfma -mf16c (vectorised by the compiler),
// plus a hand-written 16-row micro-kernel on vpmaddubsw.
#define LLL_NS avx2
#include "kernels_generic.inc"

#include <immintrin.h>

#include <algorithm>
#include <type_traits>

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


// ---- small N: lanes along k, one 32-weight activation block a step ---------------------------------
// acc: [n][16 rows][16 lanes] (kernels.h); lane l < 8 of a row sums int32 lane l of every step (4 weights a
// lane); lanes 8..15 keep the caller's zeros. Per step and column: maddubs + madd (exact int32 sums of 4
// products: unsigned weights are <= 63 here, so int16 pairs never saturate; signed weights use
// |w| * sign(x, w)), the offset correction from X.xce, one float multiply-add by the group scale times dx.
static inline __m256i nibbles32(const uint8_t* qs) {  // 16 bytes -> [lo nibbles (16) | hi nibbles (16)]
  const __m128i q = _mm_loadu_si128((const __m128i*)qs), m4 = _mm_set1_epi8(15);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), m4), _mm_and_si128(q, m4));
}
static inline __m256i high_bit5(const uint8_t* qh) {  // bit j of a little-endian u32 -> 0x10 in byte j
  uint32_t h;
  std::memcpy(&h, qh, 4);
  // byte j takes byte j/8 of h, keeps bit j%8, and becomes 0x10 where that bit is set
  const __m256i rep = _mm256_shuffle_epi8(_mm256_set1_epi32((int)h),
                                          _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202,
                                                            0x0101010101010101, 0x0000000000000000));
  const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
  return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(rep, bit), bit), _mm256_set1_epi8(16));
}
static inline __m256i iq4_values(__m256i idx) {  // nibbles -> kvalues_iq4nl (signed bytes)
  return _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(_mm_load_si128((const __m128i*)kvalues_iq4nl)), idx);
}
// 8 x int32: sums of 4 products of the weight bytes u (unsigned, or signed where SIGNED) and x (signed)
template <bool SIGNED>
static inline __m256i dot4(__m256i u, __m256i x) {
  const __m256i p = SIGNED ? _mm256_maddubs_epi16(_mm256_sign_epi8(u, u), _mm256_sign_epi8(x, u))
                           : _mm256_maddubs_epi16(u, x);
  return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
}
// f16 at byte `off` of nb <= 8 consecutive blocks of `bs` bytes -> s[0..8) (zeros past nb)
static inline void halves8(const uint8_t* p, int bs, int nb, int off, float* s) {
  alignas(16) uint16_t h[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int i = 0; i < nb; ++i) std::memcpy(&h[i], p + i * bs + off, 2);
  _mm256_storeu_ps(s, _mm256_cvtph_ps(_mm_load_si128((const __m128i*)h)));
}

// A weight source yields a row's weights a span of up to 8 steps (256 weights) at a time:
//   G: weights per scale group (32 or 16); MIN: w = s*u + m; OFF: w = s*(u - offset), corrected by X.xce;
//   SIGNED: w = s*u with u signed (offset 128 types: no correction)
//   prep(r, s0, ns, s, m): s[g] (and m[g] for MIN) for the ns*32/G groups of steps s0 .. s0+ns-1, zeros after
//     them up to 8*32/G (s and m hold 16 floats)
//   weights(r, s0, q): the 32 weights of step s0 + q in activation order
//   addr(r, s0, q): an address inside that step's bytes (for prefetching rows ahead), or nullptr
template <class D>  // simple 32-weight blocks: D gives Block, MIN, OFF, SIGNED, weights(const Block&)
struct BlockSource {
  static constexpr int G = 32;
  static constexpr bool MIN = D::MIN, OFF = D::OFF, SIGNED = D::SIGNED;
  using Block = typename D::Block;
  const uint8_t* w;
  size_t row_bytes;
  const Block* blk(int r, int step) const { return (const Block*)(w + (size_t)r * row_bytes) + step; }
  void prep(int r, int s0, int ns, float* s, float* m) const {
    halves8((const uint8_t*)blk(r, s0), sizeof(Block), ns, 0, s);  // d is the first field of every block
    if (MIN) halves8((const uint8_t*)blk(r, s0), sizeof(Block), ns, 2, m);  // then m
  }
  __m256i weights(int r, int s0, int q) const { return D::weights(*blk(r, s0 + q)); }
  const void* addr(int r, int s0, int q) const { return blk(r, s0 + q); }
};
struct DQ4_0 {
  using Block = block_q4_0;
  static constexpr bool MIN = false, OFF = true, SIGNED = false;
  static __m256i weights(const Block& b) { return nibbles32(b.qs); }
};
struct DQ4_1 {
  using Block = block_q4_1;
  static constexpr bool MIN = true, OFF = false, SIGNED = false;
  static __m256i weights(const Block& b) { return nibbles32(b.qs); }
};
struct DQ5_0 {
  using Block = block_q5_0;
  static constexpr bool MIN = false, OFF = true, SIGNED = false;
  static __m256i weights(const Block& b) { return _mm256_or_si256(nibbles32(b.qs), high_bit5(b.qh)); }
};
struct DQ5_1 {
  using Block = block_q5_1;
  static constexpr bool MIN = true, OFF = false, SIGNED = false;
  static __m256i weights(const Block& b) { return _mm256_or_si256(nibbles32(b.qs), high_bit5(b.qh)); }
};
struct DQ8_0 {
  using Block = block_q8_0;
  static constexpr bool MIN = false, OFF = false, SIGNED = true;
  static __m256i weights(const Block& b) { return _mm256_loadu_si256((const __m256i*)b.qs); }
};
struct DIQ4_NL {
  using Block = block_iq4_nl;
  static constexpr bool MIN = false, OFF = false, SIGNED = true;
  static __m256i weights(const Block& b) { return iq4_values(nibbles32(b.qs)); }
};

struct Q4KSource {  // 8 groups of 32 a super-block: step q is group q
  static constexpr int G = 32;
  static constexpr bool MIN = true, OFF = false, SIGNED = false;
  const uint8_t* w;
  size_t row_bytes;
  const block_q4_K* sb(int r, int s0) const { return (const block_q4_K*)(w + (size_t)r * row_bytes) + s0 / 8; }
  void prep(int r, int s0, int, float* s, float* m) const {
    const block_q4_K& b = *sb(r, s0);
    uint8_t sc[16];
    scales_k4(b.scales, sc);
    const __m256 v = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i*)sc)));
    const __m256 mn = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i*)(sc + 8))));
    _mm256_storeu_ps(s, _mm256_mul_ps(v, _mm256_set1_ps(fp16(b.d))));
    _mm256_storeu_ps(m, _mm256_mul_ps(mn, _mm256_set1_ps(-fp16(b.dmin))));
  }
  __m256i weights(int r, int s0, int q) const {  // 32 bytes hold groups 2j (low nibbles) and 2j + 1 (high)
    const __m256i v = _mm256_loadu_si256((const __m256i*)(sb(r, s0)->qs + 32 * (q >> 1)));
    return _mm256_and_si256(q & 1 ? _mm256_srli_epi16(v, 4) : v, _mm256_set1_epi8(15));
  }
  const void* addr(int r, int s0, int q) const { return (const uint8_t*)sb(r, s0) + q * 18; }
};
struct Q6KSource {  // 16 groups of 16 a super-block: step q is groups 2q, 2q + 1
  static constexpr int G = 16;
  static constexpr bool MIN = false, OFF = true, SIGNED = false;
  const uint8_t* w;
  size_t row_bytes;
  const block_q6_K* sb(int r, int s0) const { return (const block_q6_K*)(w + (size_t)r * row_bytes) + s0 / 8; }
  void prep(int r, int s0, int, float* s, float*) const {
    const block_q6_K& b = *sb(r, s0);
    const __m256 d = _mm256_set1_ps(fp16(b.d));
    const __m128i sc = _mm_loadu_si128((const __m128i*)b.scales);
    _mm256_storeu_ps(s, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(sc)), d));
    _mm256_storeu_ps(s + 8, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(sc, 8))), d));
  }
  // weights 128n + 32l + i: low 4 bits from ql[64n + 32(l&1) + i] (high nibble for l >= 2), bits 4..5 from
  // bits 2l..2l+1 of qh[32n + i]
  __m256i weights(int r, int s0, int q) const {
    const block_q6_K& b = *sb(r, s0);
    const int n = q >> 2, l = q & 3;
    const __m256i ql = _mm256_loadu_si256((const __m256i*)(b.ql + 64 * n + 32 * (l & 1)));
    const __m256i qh = _mm256_loadu_si256((const __m256i*)(b.qh + 32 * n));
    const __m256i lo = _mm256_and_si256(l >= 2 ? _mm256_srli_epi16(ql, 4) : ql, _mm256_set1_epi8(15));
    __m256i hi;
    switch (l) {
      case 0: hi = _mm256_slli_epi16(qh, 4); break;
      case 1: hi = _mm256_slli_epi16(qh, 2); break;
      case 2: hi = qh; break;
      default: hi = _mm256_srli_epi16(qh, 2); break;
    }
    return _mm256_or_si256(lo, _mm256_and_si256(hi, _mm256_set1_epi8(0x30)));
  }
  const void* addr(int r, int s0, int q) const { return (const uint8_t*)sb(r, s0) + q * 26; }
};

template <bool Min, bool Off, bool Signed, int Group>  // rows from unpack: u [16][kc], s and m [16][sw]
struct UnpackedSource {
  static constexpr int G = Group;
  static constexpr bool MIN = Min, OFF = Off, SIGNED = Signed;
  const uint8_t* u;
  const float* s;
  const float* m;
  int sw, kc;
  void prep(int r, int s0, int ns, float* so, float* mo) const {
    const int g0 = s0 * 32 / G, ng = ns * 32 / G;
    for (int g = 0; g < 16; ++g) so[g] = g < ng ? s[(size_t)r * sw + g0 + g] : 0.f;
    if (MIN)
      for (int g = 0; g < 16; ++g) mo[g] = g < ng ? m[(size_t)r * sw + g0 + g] : 0.f;
  }
  __m256i weights(int r, int s0, int q) const {
    const __m256i v = _mm256_loadu_si256((const __m256i*)(u + (size_t)r * kc + 32 * (s0 + q)));
    return SIGNED ? _mm256_xor_si256(v, _mm256_set1_epi8((char)0x80)) : v;  // u = q + 128 -> q
  }
  const void* addr(int, int, int) const { return nullptr; }
};

// RN rows r0 .. r0 + RN - 1, C columns c0 .. c0 + C - 1 (compile-time counts: accumulators stay in registers)
template <class S, int C, int RN>
static inline void gemv_pass(const S& src, size_t pf_bytes, int r0, int kc, const XLanes& X, int c0, float* acc) {
  constexpr int G = S::G, GS = 32 / G;  // groups per step
  __m256 af[C][RN];
  for (int j = 0; j < C; ++j)
    for (int i = 0; i < RN; ++i) af[j][i] = _mm256_loadu_ps(acc + ((size_t)(c0 + j) * TILE_M + r0 + i) * 16);
  const int nsteps = kc / 32;
  for (int s0 = 0; s0 < nsteps; s0 += 8) {
    const int ns = std::min(8, nsteps - s0), ng = ns * GS;
    alignas(32) float sx[RN][C][16];  // group scale * dx of the group's activation block
    __m256i gmask[GS];                // the span's groups among each 8
    for (int h = 0; h < GS; ++h)
      gmask[h] = _mm256_cmpgt_epi32(_mm256_set1_epi32(ng - 8 * h), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    for (int i = 0; i < RN; ++i) {
      alignas(32) float s[16], m[16];
      src.prep(r0 + i, s0, ns, s, m);
      for (int j = 0; j < C; ++j) {
        const size_t xo = (size_t)(c0 + j) * X.ldg + (size_t)s0 * GS;
        for (int h = 0; h < GS; ++h) {
          _mm256_store_ps(&sx[i][j][8 * h],
                          _mm256_mul_ps(_mm256_load_ps(s + 8 * h), _mm256_maskload_ps(X.xd + xo + 8 * h, gmask[h])));
          if (S::MIN)
            af[j][i] = _mm256_fmadd_ps(_mm256_load_ps(m + 8 * h), _mm256_maskload_ps(X.xm + xo + 8 * h, gmask[h]),
                                       af[j][i]);
        }
      }
    }
    for (int q = 0; q < ns; ++q) {
      __m256i xv[C], xc[C];
      for (int j = 0; j < C; ++j) {
        xv[j] = _mm256_loadu_si256((const __m256i*)(X.xq + (size_t)(c0 + j) * X.ldx + 32 * (s0 + q)));
        if (S::OFF) xc[j] = _mm256_loadu_si256((const __m256i*)(X.xce + (size_t)(c0 + j) * X.ldl + 8 * (s0 + q)));
      }
      for (int i = 0; i < RN; ++i) {
        if (const void* a = src.addr(r0 + i, s0, q)) _mm_prefetch((const char*)a + pf_bytes, _MM_HINT_T1);
        const __m256i u = src.weights(r0 + i, s0, q);
        for (int j = 0; j < C; ++j) {
          __m256i v = dot4<S::SIGNED>(u, xv[j]);
          if (S::OFF) v = _mm256_add_epi32(v, xc[j]);
          const __m256 sc = G == 32 ? _mm256_broadcast_ss(&sx[i][j][q])
                                    : _mm256_set_m128(_mm_broadcast_ss(&sx[i][j][2 * q + 1]),
                                                      _mm_broadcast_ss(&sx[i][j][2 * q]));
          af[j][i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(v), sc, af[j][i]);
        }
      }
    }
  }
  for (int j = 0; j < C; ++j)
    for (int i = 0; i < RN; ++i) _mm256_storeu_ps(acc + ((size_t)(c0 + j) * TILE_M + r0 + i) * 16, af[j][i]);
}

template <class S>
static void gemv_source(const S& src, size_t row_bytes, int nr, int kc, int n, const XLanes& X, float* acc) {
  const size_t pf = 8 * row_bytes;  // prefetch distance: the next pass (or tile) of rows
  auto cols = [&](int c0, auto CC) {
    constexpr int C = decltype(CC)::value, R = C == 1 ? 4 : 2;  // 16 ymm registers
    int r0 = 0;
    for (; r0 + R <= nr; r0 += R) gemv_pass<S, C, R>(src, pf, r0, kc, X, c0, acc);
    for (; r0 < nr; ++r0) gemv_pass<S, C, 1>(src, pf, r0, kc, X, c0, acc);
  };
  int c = 0;
  for (; c + 2 <= n; c += 2) cols(c, std::integral_constant<int, 2>{});
  if (c < n) cols(c, std::integral_constant<int, 1>{});
}

template <class S>
static void qgemv_fused_avx2(const uint8_t* w, size_t row_bytes, int nr, int kc, int n, const XLanes& X, float* acc) {
  gemv_source(S{w, row_bytes}, row_bytes, nr, kc, n, X, acc);
}

template <bool Min, bool Off, bool Signed, int Group>
static void gemv_unpacked(const uint8_t* u, const float* s, const float* m, int sw, int kc, int nr, int n,
                          const XLanes& X, float* acc) {
  gemv_source(UnpackedSource<Min, Off, Signed, Group>{u, s, m, sw, kc}, 0, nr, kc, n, X, acc);
}

static void qgemv_chunk_avx2(const QuantLayout& L, const uint8_t* u_rows, const float* s, const float* m, int sw,
                             int kc, int nr, int n, const XLanes& X, float* acc) {
  if (L.offset == 128) gemv_unpacked<false, false, true, 32>(u_rows, s, m, sw, kc, nr, n, X, acc);
  else if (L.group == 32 && L.has_min) gemv_unpacked<true, false, false, 32>(u_rows, s, m, sw, kc, nr, n, X, acc);
  else if (L.group == 32) gemv_unpacked<false, true, false, 32>(u_rows, s, m, sw, kc, nr, n, X, acc);
  else if (L.has_min) gemv_unpacked<true, false, false, 16>(u_rows, s, m, sw, kc, nr, n, X, acc);
  else gemv_unpacked<false, true, false, 16>(u_rows, s, m, sw, kc, nr, n, X, acc);
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
    k.qgemv_chunk = avx2::qgemv_chunk_avx2;
    k.qgemv_fused[(int)QType::Q4_0] = avx2::qgemv_fused_avx2<avx2::BlockSource<avx2::DQ4_0>>;
    k.qgemv_fused[(int)QType::Q4_1] = avx2::qgemv_fused_avx2<avx2::BlockSource<avx2::DQ4_1>>;
    k.qgemv_fused[(int)QType::Q5_0] = avx2::qgemv_fused_avx2<avx2::BlockSource<avx2::DQ5_0>>;
    k.qgemv_fused[(int)QType::Q5_1] = avx2::qgemv_fused_avx2<avx2::BlockSource<avx2::DQ5_1>>;
    k.qgemv_fused[(int)QType::Q8_0] = avx2::qgemv_fused_avx2<avx2::BlockSource<avx2::DQ8_0>>;
    k.qgemv_fused[(int)QType::IQ4_NL] = avx2::qgemv_fused_avx2<avx2::BlockSource<avx2::DIQ4_NL>>;
    k.qgemv_fused[(int)QType::Q4_K] = avx2::qgemv_fused_avx2<avx2::Q4KSource>;
    k.qgemv_fused[(int)QType::Q6_K] = avx2::qgemv_fused_avx2<avx2::Q6KSource>;
    return k;
  }();
  return &t;
}
}  // namespace lll
