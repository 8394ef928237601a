// AVX2 + FMA path: the generic kernels compiled with -mavx2 -mfma -mf16c (vectorised by the compiler),
// plus a hand-written 16-row micro-kernel on vpmaddubsw.
#define LLL_NS avx2
#include "kernels_generic.inc"

#include <immintrin.h>

#include <algorithm>
#include <cstdlib>
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

// ---- small N: lanes along k, one row at a time, one 32-weight step at a time -----------------------------
// acc: [n][16 rows][8 sets] (kernels.h). Per step, row and column: maddubs + madd (exact int32 sums of 4
// products: unsigned weights are <= 63 here, so int16 pairs never saturate; signed weights use
// |w| * sign(x, w)); per 8 groups the lanes are summed into one exact int32 per group by a transpose-add
// (gemv_row), lane j holding set j of the canonical reduction of kernels.h, as the tile kernel above sums.
static inline __m256i nibbles32(const uint8_t* qs) {  // 16 bytes -> [lo nibbles (16) | hi nibbles (16)]
  const __m256i v = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i*)qs));
  return _mm256_and_si256(_mm256_blend_epi32(v, _mm256_srli_epi16(v, 4), 0xF0), _mm256_set1_epi8(15));
}
static inline __m256i high_bit5(const uint8_t* qh) {  // bit j of a little-endian u32 -> 0x10 in byte j
  int32_t h;
  std::memcpy(&h, qh, 4);  // broadcast straight from memory (a load, no ALU slot)
  // byte j takes byte j/8 of h, keeps bit j%8, and becomes 0x10 where that bit is set (a variant taking the
  // fifth bit with min(., 16) needs h << 4 moved in from a general register: one instruction more)
  const __m256i rep = _mm256_shuffle_epi8(_mm256_set1_epi32(h),
                                          _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202,
                                                            0x0101010101010101, 0x0000000000000000));
  const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
  return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(rep, bit), bit), _mm256_set1_epi8(16));
}
static inline __m256i iq4_values(__m256i idx) {  // nibbles -> kvalues_iq4nl (signed bytes)
  return _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(_mm_load_si128((const __m128i*)kvalues_iq4nl)), idx);
}
static inline __m256i mxfp4_values(__m256i idx) {  // nibbles -> kvalues_mxfp4 (signed bytes)
  return _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(_mm_load_si128((const __m128i*)kvalues_mxfp4)), idx);
}
// 8 x int32: sums of 4 products of the weight bytes u (unsigned, or signed where SIGNED) and x (signed)
template <bool SIGNED>
static inline __m256i dot4(__m256i u, __m256i x) {
  const __m256i p = SIGNED ? _mm256_maddubs_epi16(_mm256_sign_epi8(u, u), _mm256_sign_epi8(x, u))
                           : _mm256_maddubs_epi16(u, x);
  return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
}
// the f16 at byte `off` of nb <= 8 consecutive blocks of `bs` bytes -> 8 floats (zeros past nb), built in
// general registers (no store and wider reload)
static inline __m256 halves8(const uint8_t* p, int bs, int nb, int off) {
  uint64_t lo = 0, hi = 0;
  for (int i = 0; i < nb && i < 4; ++i) {
    uint16_t h;
    std::memcpy(&h, p + i * bs + off, 2);
    lo |= (uint64_t)h << (16 * i);
    asm("" : "+r"(lo));  // keeps a partial span's loop scalar (GCC vectorizes it into some 40 shuffles)
  }
  for (int i = 4; i < nb; ++i) {
    uint16_t h;
    std::memcpy(&h, p + i * bs + off, 2);
    hi |= (uint64_t)h << (16 * (i - 4));
    asm("" : "+r"(hi));
  }
  return _mm256_cvtph_ps(_mm_insert_epi64(_mm_cvtsi64_si128((long long)lo), (long long)hi, 1));
}
// the E8M0 byte at the start of nb <= 8 consecutive blocks of `bs` bytes -> 8 floats 2^(e - 128) (e8m0_half,
// subnormal for e < 2; zeros past nb), the bytes gathered in a general register as halves8 gathers its halves
static inline __m256 e8m0_halves8(const uint8_t* p, int bs, int nb) {
  uint64_t e8 = 0;
  for (int i = 0; i < nb; ++i) {
    e8 |= (uint64_t)p[i * bs] << (8 * i);
    asm("" : "+r"(e8));  // as in halves8: keeps a partial span's loop scalar
  }
  const __m256i e = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)e8));
  const __m256i sub = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), e);             // e < 2
  const __m256i nrm = _mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(1)), 23);  // e >= 2
  const __m256i bits = _mm256_blendv_epi8(sub, nrm, _mm256_cmpgt_epi32(e, _mm256_set1_epi32(1)));
  const __m256i live = _mm256_cmpgt_epi32(_mm256_set1_epi32(nb), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  return _mm256_castsi256_ps(_mm256_and_si256(bits, live));
}
// always inlined: GCC otherwise finds the function free of side effects (a prefetch has none it models) and drops
// its calls, as it did from every small-N kernel here
__attribute__((always_inline)) static inline void prefetch_span(const void* p, size_t bytes, size_t ahead) {
  if (!ahead) return;
  for (size_t o = 0; o < bytes; o += 64) _mm_prefetch((const char*)p + ahead + o, _MM_HINT_T1);
}

// A weight source yields a row's weights a span of up to 8 steps (256 weights) at a time:
//   G: weights per scale group (32 or 16); MIN: w = s*u + m; OFF: w = s*(u - offset), the offset folded into
//   each group's int32 sum from X.xc;
//   SIGNED: w = s*u with u signed (offset 128 types: no correction); FULL: spans are always 8 steps (K-quants)
//   offset(): the OFF types' offset (w = s*(u - offset))
//   prep(r, s0, ns, pf, s, m): s[h] lane g = scale of group 8h + g of steps s0 .. s0+ns-1 (zeros past them),
//     m likewise for MIN; prefetches the span's bytes pf bytes ahead (fused sources)
//   weights(r, s0, q, ns): the 32 weights of step s0 + q (of the span of ns steps from s0) in activation order
template <class D>  // simple 32-weight blocks: D gives Block, MIN, OFF, SIGNED, weights(const Block&)
struct BlockSource {
  static constexpr int G = 32;
  static constexpr bool MIN = D::MIN, OFF = D::OFF, SIGNED = D::SIGNED, FULL = false;
  using Block = typename D::Block;
  const uint8_t* w;
  size_t row_bytes;
  static constexpr int offset() { return D::OFFSET; }
  const Block* blk(int r, int step) const { return (const Block*)(w + (size_t)r * row_bytes) + step; }
  void prep(int r, int s0, int ns, size_t pf, __m256* s, __m256* m) const {
    const uint8_t* p = (const uint8_t*)blk(r, s0);
    prefetch_span(p, ns * sizeof(Block), pf);
    s[0] = halves8(p, sizeof(Block), ns, 0);  // d is the first field of every block
    if (MIN) m[0] = halves8(p, sizeof(Block), ns, 2);  // then m
  }
  __m256i weights(int r, int s0, int q, int) const { return D::weights(*blk(r, s0 + q)); }
};
struct DQ4_0 {
  using Block = block_q4_0;
  static constexpr bool MIN = false, OFF = true, SIGNED = false;
  static constexpr int OFFSET = 8;
  static __m256i weights(const Block& b) { return nibbles32(b.qs); }
};
struct DQ4_1 {
  using Block = block_q4_1;
  static constexpr bool MIN = true, OFF = false, SIGNED = false;
  static constexpr int OFFSET = 0;
  static __m256i weights(const Block& b) { return nibbles32(b.qs); }
};
struct DQ5_0 {
  using Block = block_q5_0;
  static constexpr bool MIN = false, OFF = true, SIGNED = false;
  static constexpr int OFFSET = 16;
  static __m256i weights(const Block& b) { return _mm256_or_si256(nibbles32(b.qs), high_bit5(b.qh)); }
};
struct DQ5_1 {
  using Block = block_q5_1;
  static constexpr bool MIN = true, OFF = false, SIGNED = false;
  static constexpr int OFFSET = 0;
  static __m256i weights(const Block& b) { return _mm256_or_si256(nibbles32(b.qs), high_bit5(b.qh)); }
};
struct DQ8_0 {
  using Block = block_q8_0;
  static constexpr bool MIN = false, OFF = false, SIGNED = true;
  static constexpr int OFFSET = 0;
  static __m256i weights(const Block& b) { return _mm256_loadu_si256((const __m256i*)b.qs); }
};
struct DIQ4_NL {
  using Block = block_iq4_nl;
  static constexpr bool MIN = false, OFF = false, SIGNED = true;
  static constexpr int OFFSET = 0;
  static __m256i weights(const Block& b) { return iq4_values(nibbles32(b.qs)); }
};
struct DMXFP4 {
  using Block = block_mxfp4;
  static constexpr bool MIN = false, OFF = false, SIGNED = true;
  static constexpr int OFFSET = 0;
  static __m256i weights(const Block& b) { return mxfp4_values(nibbles32(b.qs)); }
};
// MXFP4: blocks as BlockSource reads them, each scale an E8M0 byte (2^(e - 128)) where the others hold an f16
struct MXFP4Source : BlockSource<DMXFP4> {
  void prep(int r, int s0, int ns, size_t pf, __m256* s, __m256*) const {
    const uint8_t* p = (const uint8_t*)blk(r, s0);
    prefetch_span(p, ns * sizeof(Block), pf);
    s[0] = e8m0_halves8(p, sizeof(Block), ns);  // e is the first field
  }
};

template <class Block>  // Q4_K and Q4_Kx super-blocks: 8 groups of 32, step q is group q
struct Q4KBlocks {
  static constexpr int G = 32;
  static constexpr bool MIN = true, OFF = false, SIGNED = false, FULL = true;
  const uint8_t* w;
  size_t row_bytes;
  static constexpr int offset() { return 0; }
  const Block* sb(int r, int s0) const { return (const Block*)(w + (size_t)r * row_bytes) + s0 / 8; }
  __m256i weights(int r, int s0, int q, int) const {  // 32 bytes hold groups 2j (low nibbles) and 2j + 1 (high)
    const __m256i v = _mm256_loadu_si256((const __m256i*)(sb(r, s0)->qs + 32 * (q >> 1)));
    return _mm256_and_si256(q & 1 ? _mm256_srli_epi16(v, 4) : v, _mm256_set1_epi8(15));
  }
};
struct Q4KSource : Q4KBlocks<block_q4_K> {
  void prep(int r, int s0, int, size_t pf, __m256* s, __m256* m) const {
    const block_q4_K& b = *sb(r, s0);
    prefetch_span(&b, sizeof(b), pf);
    const __m128i sc = q4k_scales(b);
    s[0] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(sc)), _mm256_set1_ps(fp16(b.d)));
    m[0] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(sc, 8))),
                         _mm256_set1_ps(-fp16(b.dmin)));
  }
};
// Q4_Kx (repack.h): the scales as bytes and d, -dmin as floats, so a super-block's scales take two widening loads and
// two broadcasts where Q4_K's take about 16 instructions (11-14% more weights a second at N = 1: docs/performance.md)
struct Q4KxSource : Q4KBlocks<block_q4_kx> {
  void prep(int r, int s0, int, size_t pf, __m256* s, __m256* m) const {
    const block_q4_kx& b = *sb(r, s0);
    prefetch_span(&b, sizeof(b), pf);
    const auto bytes8 = [](const uint8_t* p) {
      return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i*)p)));
    };
    s[0] = _mm256_mul_ps(bytes8(b.sc), _mm256_broadcast_ss(&b.d));
    m[0] = _mm256_mul_ps(bytes8(b.mn), _mm256_broadcast_ss(&b.mdmin));
  }
};
struct Q6KSource {  // 16 groups of 16 a super-block: step q is groups 2q, 2q + 1
  static constexpr int G = 16;
  static constexpr bool MIN = false, OFF = true, SIGNED = false, FULL = true;
  const uint8_t* w;
  size_t row_bytes;
  static constexpr int offset() { return 32; }
  const block_q6_K* sb(int r, int s0) const { return (const block_q6_K*)(w + (size_t)r * row_bytes) + s0 / 8; }
  void prep(int r, int s0, int, size_t pf, __m256* s, __m256*) const {
    const block_q6_K& b = *sb(r, s0);
    prefetch_span(&b, sizeof(b), pf);
    const __m256 d = _mm256_set1_ps(fp16(b.d));
    const __m128i sc = _mm_loadu_si128((const __m128i*)b.scales);
    s[0] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(sc)), d);
    s[1] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(sc, 8))), d);
  }
  // weights 128n + 32l + i: low 4 bits from ql[64n + 32(l&1) + i] (high nibble for l >= 2), bits 4..5 from
  // bits 2l..2l+1 of qh[32n + i]
  __m256i weights(int r, int s0, int q, int) const {
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
};

// The X8 layouts (quant_formats.h): Q4_0, Q4_1, Q5_0, Q5_1 regrouped at load (repack.h). A span's scales (and mins)
// are one load; step q: the low nibbles of a pair vector (q even) or its high nibbles, and for 5-bit weights the
// fifth bits from the span's bit plane, bit q of each byte shifted to bit 4. Q5_0 takes 4-5 instructions a step
// where its file layout takes 8 (the fifth bits spread from a 32-bit word), Q4_0 1-2 where it takes 3, and neither
// gathers its scales from 8 blocks.
template <bool Min, bool Hi, int Offset>
struct X8Source {
  static constexpr int G = 32;
  static constexpr bool MIN = Min, OFF = !Min, SIGNED = false, FULL = false;
  static constexpr int BB = 2 * (Min ? 2 : 1) + 16 + (Hi ? 4 : 0);  // bytes per block
  const uint8_t* w;
  size_t row_bytes;
  static constexpr int offset() { return Offset; }
  const uint8_t* span(int r, int s0) const { return w + (size_t)r * row_bytes + (size_t)s0 * BB; }
  static __m256 halves(const uint8_t* p, int ns) {
    return _mm256_cvtph_ps(ns == 8 ? _mm_loadu_si128((const __m128i*)p) : _mm_loadl_epi64((const __m128i*)p));
  }
  void prep(int r, int s0, int ns, size_t pf, __m256* s, __m256* m) const {
    const uint8_t* p = span(r, s0);
    prefetch_span(p, ns * BB, pf);
    s[0] = halves(p, ns);
    if (Min) m[0] = halves(p + 2 * ns, ns);
  }
  __m256i weights(int r, int s0, int q, int ns) const {  // ns: 8, or 4 (a row's last span)
    const uint8_t* qs = span(r, s0) + 2 * ns * (Min ? 2 : 1);
    const __m256i v = _mm256_loadu_si256((const __m256i*)(qs + 32 * (q >> 1)));
    const __m256i nib = _mm256_and_si256(q & 1 ? _mm256_srli_epi16(v, 4) : v, _mm256_set1_epi8(15));
    if (!Hi) return nib;
    __m256i h;
    if (ns == 8) {
      h = _mm256_loadu_si256((const __m256i*)(qs + 16 * ns));
    } else {  // 16 bytes: bits 0..3 weights 0..15, bits 4..7 weights 16..31 -> bits 0..3 of 32 bytes
      const __m256i b = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i*)(qs + 16 * ns)));
      h = _mm256_blend_epi32(b, _mm256_srli_epi16(b, 4), 0xF0);
    }
    // bit q of each byte to bit 4 (16-bit shifts by at most 4: bit 4 of a byte comes from the same byte)
    switch (q) {
      case 0: h = _mm256_slli_epi16(h, 4); break;
      case 1: h = _mm256_slli_epi16(h, 3); break;
      case 2: h = _mm256_slli_epi16(h, 2); break;
      case 3: h = _mm256_slli_epi16(h, 1); break;
      case 4: break;
      case 5: h = _mm256_srli_epi16(h, 1); break;
      case 6: h = _mm256_srli_epi16(h, 2); break;
      default: h = _mm256_srli_epi16(h, 3); break;
    }
    return _mm256_or_si256(nib, _mm256_and_si256(h, _mm256_set1_epi8(16)));
  }
};

template <bool Min, bool Off, bool Signed, int Group>  // rows from unpack: u [16][kc], s and m [16][sw]
struct UnpackedSource {
  static constexpr int G = Group;
  static constexpr bool MIN = Min, OFF = Off, SIGNED = Signed, FULL = false;
  const uint8_t* u;
  const float* s;
  const float* m;
  int sw, kc, off;
  int offset() const { return off; }
  void prep(int r, int s0, int ns, size_t, __m256* so, __m256* mo) const {
    const int g0 = s0 * 32 / G, ng = ns * 32 / G;
    for (int h = 0; h < 32 / G; ++h) {
      const __m256i gm = _mm256_cmpgt_epi32(_mm256_set1_epi32(ng - 8 * h), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
      so[h] = _mm256_maskload_ps(s + (size_t)r * sw + g0 + 8 * h, gm);
      if (MIN) mo[h] = _mm256_maskload_ps(m + (size_t)r * sw + g0 + 8 * h, gm);
    }
  }
  __m256i weights(int r, int s0, int q, int) const {
    const __m256i v = _mm256_loadu_si256((const __m256i*)(u + (size_t)r * kc + 32 * (s0 + q)));
    return SIGNED ? _mm256_xor_si256(v, _mm256_set1_epi8((char)0x80)) : v;  // u = q + 128 -> q
  }
};

// Transpose-adds of int32 lane vectors v[0..7] (exact), built from unpacks and adds: on Zen 3 vphaddd issues one
// per two cycles, an unpack two per cycle (loops of each, measured); at N = 1 the unpacks gained 1-6% over hadds.
// pair_sums(v0, v1): [v0 02, v1 02, v0 13, v1 13 | v0 46, v1 46, v0 57, v1 57] (v0 02: lanes 0 + 2)
static inline __m256i pair_sums(__m256i v0, __m256i v1) {
  return _mm256_add_epi32(_mm256_unpacklo_epi32(v0, v1), _mm256_unpackhi_epi32(v0, v1));
}
// the int16 pairs of v0 and v1 (dwords) as pair_sums arranges int32 lanes, added as int16 (wrapping)
static inline __m256i pair_sums16(__m256i v0, __m256i v1) {
  return _mm256_add_epi16(_mm256_unpacklo_epi32(v0, v1), _mm256_unpackhi_epi32(v0, v1));
}
// quad_sums(pair_sums(v0, v1), pair_sums(v2, v3)): [v0 0123, v1 0123, v2 0123, v3 0123 | the same of lanes 4..7]
static inline __m256i quad_sums(__m256i t01, __m256i t23) {
  return _mm256_add_epi32(_mm256_unpacklo_epi64(t01, t23), _mm256_unpackhi_epi64(t01, t23));
}
// t[i] = pair_sums(v[2i], v[2i + 1]) -> lane j: the sum of v[j]'s lanes
static inline __m256i lane_sums8(const __m256i t[4]) {
  const __m256i lo = quad_sums(t[0], t[1]), hi = quad_sums(t[2], t[3]);  // v0..v3 and v4..v7, halves apart
  return _mm256_add_epi32(_mm256_blend_epi32(lo, hi, 0xF0), _mm256_permute2x128_si256(lo, hi, 0x21));
}
// G = 16: v[0..3] hold groups 2q (lanes 0..3) and 2q + 1 (lanes 4..7); t0, t1 their pair_sums -> lane j: the
// sum of group j
static inline __m256i group_sums16(__m256i t0, __m256i t1) {
  // quad_sums: [g0 g2 g4 g6 | g1 g3 g5 g7]
  return _mm256_permutevar8x32_epi32(quad_sums(t0, t1), _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

// Row r, columns c0 .. c0 + C - 1 (a compile-time count: the accumulators stay in registers), streamed front to
// back (the hardware prefetchers follow one row at a time; eight rows read side by side ran the 0.5B's Q8_0
// output product at half the bandwidth). Per step and column one dot4 (maddubs + madd: exact int32 sums of 4
// products); per 8 groups and column a transpose-add (lane_sums8, group_sums16) gives one exact int32 sum per
// group, lane j holding group g0 + j, which is set j of the canonical order (kernels.h, AVX2): one conversion,
// one multiply (scale * dx, 8 groups at once) and one multiply-add (one more for the min) into the row's acc8,
// whose lane j is set j. A span shorter than 8 groups (a row of 896: 28 groups) leaves the other sets as they
// were (a blend: the padded lanes add zeros, which would turn a set's -0 into +0).
template <class S, int C>
static inline void gemv_row(const S& src, size_t pf, int r, int kc, const XLanes& X, int c0, bool init, float* acc) {
  constexpr int G = S::G, GS = 32 / G;  // groups per step (and scale vectors per span)
  __m256 a[C];
  for (int j = 0; j < C; ++j)
    a[j] = init ? _mm256_setzero_ps() : _mm256_loadu_ps(acc + ((size_t)(c0 + j) * TILE_M + r) * ACC_SETS);
  const int nsteps = kc / 32;
  const int8_t* xr[C];  // the row's activations, column j
  for (int j = 0; j < C; ++j) xr[j] = X.xq + (size_t)(c0 + j) * X.ldx;
  // one span of steps s0 .. s0 + ns - 1; NS: ns at compile time (8: whole, 4: the tail of a row of 896), 0: ns_
  auto span = [&](int s0, int ns_, auto NSC) {
    constexpr int NS = decltype(NSC)::value;
    constexpr bool F = NS == 8;
    const int ns = NS ? NS : ns_, ng = ns * GS;
    const __m256i gmask = _mm256_cmpgt_epi32(_mm256_set1_epi32(ng), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    auto xload = [&](const float* p) { return F ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, gmask); };
    __m256 sv[GS], mv[GS];
    src.prep(r, s0, ns, pf, sv, mv);
    __m256i t[C][4];  // t[j][i]: pair_sums of the dot4 lanes of steps 2i and 2i + 1, column j
    auto pair = [&](int i) {
      const int q = 2 * i;
      const __m256i u0 = src.weights(r, s0, q, ns);
      const bool two = NS ? q + 1 < NS : q + 1 < ns;
      const __m256i u1 = two ? src.weights(r, s0, q + 1, ns) : _mm256_setzero_si256();
      for (int j = 0; j < C; ++j) {
        const int8_t* x = xr[j] + 32 * (s0 + q);
        const __m256i x0 = _mm256_loadu_si256((const __m256i*)x);
        if (S::SIGNED) {
          const __m256i d0 = dot4<true>(u0, x0);
          const __m256i d1 = two ? dot4<true>(u1, _mm256_loadu_si256((const __m256i*)(x + 32))) : _mm256_setzero_si256();
          t[j][i] = pair_sums(d0, d1);
        } else {
          // unsigned weights u <= 63: maddubs gives int16 pair sums of at most 2 * 63 * 127 = 16002, so two of them
          // add up in int16; pair_sums in int16 then one madd: the same int32 lanes as pair_sums of two dot4s, one
          // multiply fewer
          const __m256i p0 = _mm256_maddubs_epi16(u0, x0);
          const __m256i p1 = two ? _mm256_maddubs_epi16(u1, _mm256_loadu_si256((const __m256i*)(x + 32)))
                                 : _mm256_setzero_si256();
          t[j][i] = _mm256_madd_epi16(pair_sums16(p0, p1), _mm256_set1_epi16(1));
        }
      }
    };
    if (F) {
#pragma GCC unroll 4
      for (int i = 0; i < 4; ++i) pair(i);
    } else if (NS == 4) {
      pair(0);
      pair(1);
      for (int j = 0; j < C; ++j) t[j][2] = t[j][3] = _mm256_setzero_si256();
    } else {
      for (int i = 0; i < 4; ++i) {
        if (2 * i < ns) pair(i);
        else
          for (int j = 0; j < C; ++j) t[j][i] = _mm256_setzero_si256();
      }
    }
    for (int j = 0; j < C; ++j) {
      __m256i isum[GS];
      if constexpr (G == 32) {
        isum[0] = lane_sums8(t[j]);
      } else {
        isum[0] = group_sums16(t[j][0], t[j][1]);
        isum[GS - 1] = group_sums16(t[j][2], t[j][3]);
      }
      const __m256 a0 = a[j];
      for (int h = 0; h < GS; ++h) {  // groups g0 .. g0 + 7, g0 = s0 * GS + 8h: sets 0 .. 7
        const size_t xo = (size_t)(c0 + j) * X.ldg + (size_t)s0 * GS + 8 * h;
        if (S::OFF)
          isum[h] = _mm256_add_epi32(isum[h], F ? _mm256_loadu_si256((const __m256i*)(X.xc + xo))
                                                : _mm256_maskload_epi32(X.xc + xo, gmask));
        a[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[h]), _mm256_mul_ps(sv[h], xload(X.xd + xo)), a[j]);
        if (S::MIN) a[j] = _mm256_fmadd_ps(mv[h], xload(X.xm + xo), a[j]);
      }
      if (!F) a[j] = _mm256_blendv_ps(a0, a[j], _mm256_castsi256_ps(gmask));
    }
  };
  int s0 = 0;
  for (; s0 + 8 <= nsteps; s0 += 8) span(s0, 8, std::integral_constant<int, 8>{});
  if (!S::FULL && nsteps - s0 == 4) span(s0, 4, std::integral_constant<int, 4>{});
  else if (!S::FULL && s0 < nsteps) span(s0, nsteps - s0, std::integral_constant<int, 0>{});
  for (int j = 0; j < C; ++j) _mm256_storeu_ps(acc + ((size_t)(c0 + j) * TILE_M + r) * ACC_SETS, a[j]);
}

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

// unpack (kernels.h contract) through a weight source: the tile path and dequantize get the fused decoders too
template <class S>
static void unpack_source(const uint8_t* w, size_t row_bytes, int nrows, int kc, uint8_t* u, float* s, float* m,
                          int sw) {
  constexpr int GS = 32 / S::G;
  const S src{w, row_bytes};
  const int nsteps = kc / 32;
  for (int r = 0; r < nrows; ++r)
    for (int s0 = 0; s0 < nsteps; s0 += 8) {
      const int ns = S::FULL ? 8 : std::min(8, nsteps - s0);
      __m256 sv[GS], mv[GS];
      src.prep(r, s0, ns, 0, sv, mv);
      for (int h = 0; h < GS; ++h) {  // whole vectors: sw >= the chunk's groups rounded up to 8
        _mm256_storeu_ps(s + (size_t)r * sw + s0 * GS + 8 * h, sv[h]);
        if (S::MIN) _mm256_storeu_ps(m + (size_t)r * sw + s0 * GS + 8 * h, mv[h]);
      }
      for (int q = 0; q < ns; ++q) {
        __m256i v = src.weights(r, s0, q, ns);
        if (S::SIGNED) v = _mm256_xor_si256(v, _mm256_set1_epi8((char)0x80));  // u = q + 128
        _mm256_storeu_si256((__m256i*)(u + (size_t)r * kc + 32 * (s0 + q)), v);
      }
    }
  for (int r = nrows; r < TILE_M; ++r) {
    std::memset(u + (size_t)r * kc, 0, kc);
    std::memset(s + (size_t)r * sw, 0, sizeof(float) * sw);
    std::memset(m + (size_t)r * sw, 0, sizeof(float) * sw);
  }
}

// rows one at a time (each streamed front to back), columns four at a time, then three, two or one: each pass over
// the weights decodes them once for its columns (the 1.5B's decode step at N = 3, 4: 77, 93 ms in pairs -> 65, 79,
// Zen 3, 2 threads; a column's sums are the same whatever its neighbours)
template <class S>
static void gemv_source(const S& src, size_t row_bytes, int nr, int kc, int n, const XLanes& X, bool init, float* acc) {
  const size_t pf = 8 * row_bytes;  // prefetch distance: 8 rows ahead
  auto cols = [&](int c0, auto CC) {
    constexpr int C = decltype(CC)::value;
    for (int r = 0; r < nr; ++r) gemv_row<S, C>(src, pf, r, kc, X, c0, init, acc);
  };
  int c = 0;
  for (; c + 4 <= n; c += 4) cols(c, std::integral_constant<int, 4>{});
  if (n - c == 3) cols(c, std::integral_constant<int, 3>{});
  else if (n - c == 2) cols(c, std::integral_constant<int, 2>{});
  else if (n - c == 1) cols(c, std::integral_constant<int, 1>{});
}

template <class S>
static void qgemv_fused_avx2(const uint8_t* w, size_t row_bytes, int nr, int kc, int n, const XLanes& X, bool init,
                             float* acc) {
  gemv_source(S{w, row_bytes}, row_bytes, nr, kc, n, X, init, acc);
}

template <bool Min, bool Off, bool Signed, int Group>
static void gemv_unpacked(const QuantLayout& L, const uint8_t* u, const float* s, const float* m, int sw, int kc, int nr, int n,
                          const XLanes& X, bool init, float* acc) {
  gemv_source(UnpackedSource<Min, Off, Signed, Group>{u, s, m, sw, kc, L.offset}, 0, nr, kc, n, X, init, acc);
}

static void qgemv_chunk_avx2(const QuantLayout& L, const uint8_t* u_rows, const float* s, const float* m, int sw,
                             int kc, int nr, int n, const XLanes& X, bool init, float* acc) {
  if (L.offset == 128) gemv_unpacked<false, false, true, 32>(L, u_rows, s, m, sw, kc, nr, n, X, init, acc);
  else if (L.group == 32 && L.has_min) gemv_unpacked<true, false, false, 32>(L, u_rows, s, m, sw, kc, nr, n, X, init, acc);
  else if (L.group == 32) gemv_unpacked<false, true, false, 32>(L, u_rows, s, m, sw, kc, nr, n, X, init, acc);
  else if (L.has_min) gemv_unpacked<true, false, false, 16>(L, u_rows, s, m, sw, kc, nr, n, X, init, acc);
  else gemv_unpacked<false, true, false, 16>(L, u_rows, s, m, sw, kc, nr, n, X, init, acc);
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
    k.qgemv_chunk = avx2::qgemv_chunk_avx2;
    // up to 8 activation rows the fused lanes-along-k kernels beat the tile path from memory (the 1.5B's decode step,
    // N = 5, 6, 8: 152, 156, 191 ms -> 107, 127, 154, Zen 3, 2 threads); over unpack's copy only up to 4 (Q5_K, Q3_K
    // at N = 8, in cache: 20-30% slower than the tile path)
    k.gemv_max_n = 8;
    k.gemv_max_n_unpacked = 4;
    k.reduce_rows = avx2::reduce_rows_avx2;
    k.quantize_row_x = avx2::quantize_row_x_avx2;
    k.interleave16 = avx2::interleave16_avx2;
    using namespace avx2;
    auto source = [&](QType t, auto src) {  // a weight source serves both the small-N kernel and unpack
      using S = decltype(src);
      k.qgemv_fused[(int)t] = qgemv_fused_avx2<S>;
      k.unpack[(int)t] = unpack_source<S>;
    };
    source(QType::Q4_0, BlockSource<DQ4_0>{});
    source(QType::Q4_1, BlockSource<DQ4_1>{});
    source(QType::Q5_0, BlockSource<DQ5_0>{});
    source(QType::Q4_0X8, X8Source<false, false, 8>{});
    source(QType::Q4_1X8, X8Source<true, false, 0>{});
    source(QType::Q5_0X8, X8Source<false, true, 16>{});
    source(QType::Q5_1X8, X8Source<true, true, 0>{});
    // measured: these types' products at N = 1 (docs/performance.md)
    for (QType t : {QType::Q4_0, QType::Q4_1, QType::Q5_0, QType::Q5_1}) k.repack[(int)t] = true;
    source(QType::Q5_1, BlockSource<DQ5_1>{});
    source(QType::Q8_0, BlockSource<DQ8_0>{});
    source(QType::IQ4_NL, BlockSource<DIQ4_NL>{});
    source(QType::MXFP4, MXFP4Source{});
    source(QType::Q4_K, Q4KSource{});
    source(QType::Q4_KX, Q4KxSource{});
    k.repack[(int)QType::Q4_K] = true;  // measured: docs/performance.md
    source(QType::Q6_K, Q6KSource{});
    k.int8_peak = avx2::int8_peak_avx2;
    k.int8_peak_macs = PEAK_CHAINS * 32;
    return k;
  }();
  return &t;
}
}  // namespace lll
