// Paged causal or bidirectional attention (attention.h): tiles of one sequence's rows per kv head, an online softmax over
// the cached keys read in chunks of 16.
#include "attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "ops.h"

#if defined(LLL_X86)
#include <immintrin.h>
#endif

// The inner loops run over 16 independent lanes (16 keys, or 16 dims of a head) as two vector-extension values,
// which never reorders a sum; the AVX2 and AVX-512 builds (LLL_VECTOR_CLONES) contract them to FMA.

namespace lll {

namespace {

constexpr int QT = 16;  // query rows (of one sequence) per tile, causal
// bidirectional (an encoder): every row of a tile sees every key, so a larger tile reads (dequantizes, transposes)
// each key for more rows at no waste. A row's result does not depend on its tile (the same chunks, in order).
constexpr int QT_BIDI = 64;
constexpr int KC = 16;  // keys per chunk; chunks start at multiples of KC, whatever the tile
constexpr int RB = 4;   // query rows whose scores are computed together
constexpr int MAX_F16_DIM = 512;  // head dims the f16 chunk loader takes (any head_dim of today's models)

// 8 independent float lanes (GCC/Clang vector extension: one ymm or two xmm registers), used in pairs for 16
// lanes; v8u reads and writes float arrays at any float alignment. (A 64-byte vector type is not kept in
// registers by the avx2 clone: GCC spills it in 16-byte pieces and reloads it whole, a store-forwarding stall
// every step.)
typedef float v8 __attribute__((vector_size(32)));
typedef float v8u __attribute__((vector_size(32), aligned(4), may_alias));

struct Tile {
  int t0, n;  // batch rows t0 .. t0 + n - 1, all of one sequence
};

struct Scratch {
  std::vector<float> kt;   // [head_dim][KC]: the chunk's keys, transposed
  std::vector<float> vc;   // [KC][head_dim]
  std::vector<float> kr;   // [head_dim]: one key, dequantized
  std::vector<float> acc;  // [rows][head_dim]: running sum of p * v
  std::vector<float> m, l; // [rows]: running max and running sum of p
  std::vector<float> sc;   // [RB][keys]: bidirectional rows' whole score rows
};

// Pieces both tile kernels run, inlined into each of their clones (always: a call would reach the default clone's
// code, without FMA).
// The query rows r0 .. r0 + RB - 1 of a tile (those past nr repeat the last, so the loops below stay unrolled):
// row r is batch row t0 + r / group, query head kvh * group + r % group.
__attribute__((always_inline)) inline void query_rows(const AttentionShape& a, const Tile& tile, int kvh, int group,
                                                      const float* q, int r0, int nr, const float* qr[RB]) {
  for (int i = 0; i < RB; ++i) {
    const int r = r0 + std::min(i, nr - 1), t = tile.t0 + r / group;
    qr[i] = q + ((size_t)t * a.n_head + (size_t)kvh * group + r % group) * a.head_dim;
  }
}

// The scores of those rows against 16 keys whose dimension d lies at kt + d * stride: each a sum over d in order,
// the rows' chains independent (one row's chain of head_dim dependent FMAs was latency-bound).
__attribute__((always_inline)) inline void scores16(const float* const qr[RB], const float* kt, size_t stride, int D,
                                                    v8 sv0[RB], v8 sv1[RB]) {
  for (int i = 0; i < RB; ++i) sv0[i] = sv1[i] = v8{};
  for (int d = 0; d < D; ++d) {
    const float* kd = kt + (size_t)d * stride;
    const v8 k0 = *(const v8u*)kd, k1 = *(const v8u*)(kd + 8);
    for (int i = 0; i < RB; ++i) {
      sv0[i] += qr[i][d] * k0;
      sv1[i] += qr[i][d] * k1;
    }
  }
}

// One row's running value sum over 8 * C dims: ar[d] = ar[d] * corr + sum_k p[k] * vc[k * D + d], k in order, in C
// independent chains of 8 dims (the FMAs' latency shows with fewer than eight)
template <int C>
__attribute__((always_inline)) inline void value_sum(float* ar, const float* vc, int D, const float* p, int nk,
                                                     float corr) {
  v8 o[C];
  for (int c = 0; c < C; ++c) o[c] = *(const v8u*)(ar + 8 * c) * corr;
  for (int k = 0; k < nk; ++k) {
    const float* vk = vc + (size_t)k * D;
    for (int c = 0; c < C; ++c) o[c] += p[k] * *(const v8u*)(vk + 8 * c);
  }
  for (int c = 0; c < C; ++c) *(v8u*)(ar + 8 * c) = o[c];
}

// kr [KC][D] (the chunk's keys as they lie) -> kt [D][KC], in 8 x 8 blocks of vector shuffles where D is a multiple of 8
// (the same values moved: a key's dims by the scalar loop cost ~30% of decode attention at 4096 tokens, Zen 3)
typedef int v8i __attribute__((vector_size(32)));
const v8i LANE0 = {0, 1, 2, 3, 4, 5, 6, 7}, LANE1 = {8, 9, 10, 11, 12, 13, 14, 15};  // a chunk's key k in lane k % 8
__attribute__((always_inline)) inline void transpose_keys(const float* kr, int D, float* kt) {
  if (D % 8) {
    for (int k = 0; k < KC; ++k)
      for (int d = 0; d < D; ++d) kt[(size_t)d * KC + k] = kr[(size_t)k * D + d];
    return;
  }
  for (int k0 = 0; k0 < KC; k0 += 8)
    for (int d0 = 0; d0 < D; d0 += 8) {
      v8 r[8], t[8];
      for (int i = 0; i < 8; ++i) r[i] = *(const v8u*)(kr + (size_t)(k0 + i) * D + d0);  // key k0 + i
      for (int i = 0; i < 8; i += 2) {  // unpack: [a0 b0 a1 b1 | a4 b4 a5 b5], [a2 b2 a3 b3 | a6 b6 a7 b7]
        t[i] = __builtin_shuffle(r[i], r[i + 1], (v8i){0, 8, 1, 9, 4, 12, 5, 13});
        t[i + 1] = __builtin_shuffle(r[i], r[i + 1], (v8i){2, 10, 3, 11, 6, 14, 7, 15});
      }
      for (int i = 0; i < 8; i += 4)
        for (int h = 0; h < 2; ++h) {  // keys i..i+3: dims 2h (lanes 0..3) and 2h + 1, with 2h + 4, 2h + 5 above
          r[i + 2 * h] = __builtin_shuffle(t[i + h], t[i + 2 + h], (v8i){0, 1, 8, 9, 4, 5, 12, 13});
          r[i + 2 * h + 1] = __builtin_shuffle(t[i + h], t[i + 2 + h], (v8i){2, 3, 10, 11, 6, 7, 14, 15});
        }
      for (int j = 0; j < 4; ++j) {  // dim j and j + 4 of keys k0 .. k0 + 7
        *(v8u*)(kt + (size_t)(d0 + j) * KC + k0) = __builtin_shuffle(r[j], r[4 + j], (v8i){0, 1, 2, 3, 8, 9, 10, 11});
        *(v8u*)(kt + (size_t)(d0 + j + 4) * KC + k0) =
            __builtin_shuffle(r[j], r[4 + j], (v8i){4, 5, 6, 7, 12, 13, 14, 15});
      }
    }
}

#if defined(LLL_X86)
// An f16 chunk straight from the cache (KvType::F16, D a multiple of 8, a CPU with F16C): key k's head slice at
// krow[k], its value's at vrow[k] (k < KC; a key the chunk leaves out points at zeros) -> kt [D][KC] (the keys
// converted 8 dims of 8 keys at a time and transposed in registers) and vc [KC][D]. The values kv_dequantize_row
// and transpose_keys give (the conversion is exact), without the row copies and two calls a key: those were 13% of
// the 0.5B's decode samples at 4096 tokens (Zen 3).
__attribute__((target("avx2,f16c"))) void load_chunk_f16(const uint8_t* const krow[KC], const uint8_t* const vrow[KC],
                                                         int D, float* kt, float* vc) {
  for (int k0 = 0; k0 < KC; k0 += 8)
    for (int d0 = 0; d0 < D; d0 += 8) {
      __m256 r[8], t[8];
      for (int i = 0; i < 8; ++i) r[i] = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(krow[k0 + i] + 2 * d0)));
      for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
      }
      for (int i = 0; i < 8; i += 4) {
        r[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
        r[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xEE);
        r[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
        r[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
      }
      for (int j = 0; j < 4; ++j) {  // dims d0 + j and d0 + j + 4 of keys k0 .. k0 + 7
        _mm256_storeu_ps(kt + (size_t)(d0 + j) * KC + k0, _mm256_permute2f128_ps(r[j], r[4 + j], 0x20));
        _mm256_storeu_ps(kt + (size_t)(d0 + j + 4) * KC + k0, _mm256_permute2f128_ps(r[j], r[4 + j], 0x31));
      }
    }
  for (int k = 0; k < KC; ++k)
    for (int d = 0; d < D; d += 8)
      _mm256_storeu_ps(vc + (size_t)k * D + d, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(vrow[k] + 2 * d))));
}

bool have_f16c() {
  static const bool yes = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
  return yes;
}
#endif

// One tile of query rows against one kv head, online softmax over key chunks (flash-attention order).
LLL_VECTOR_CLONES
void tile_attention(const AttentionShape& a, const AttentionRows& rows, const Tile& tile, int kvh, const float* q,
                    const KvView& k_cache, const KvView& v_cache, float* out, Scratch& S) {
  const int D = a.head_dim, group = a.n_head / a.n_kv_head, bs = a.block_size;
  const float neg_inf = -std::numeric_limits<float>::infinity();
  const int32_t* bt = rows.block_tables + (size_t)rows.seq_index[tile.t0] * rows.max_blocks;
  const int R = tile.n * group;  // row r: batch row t0 + r / group, query head kvh * group + r % group
  S.kt.assign((size_t)D * KC, 0.f);
  S.vc.assign((size_t)KC * D, 0.f);
  S.kr.assign((size_t)KC * D, 0.f);  // keys a chunk leaves out keep earlier (finite) values: their lanes are dropped
  S.acc.assign((size_t)R * D, 0.f);
  S.m.assign(R, neg_inf);
  S.l.assign(R, 0.f);

  // the last key position row t sees: its own (causal), or its sequence's last (bidirectional)
  auto last_visible = [&](int t) {
    return rows.context_lens ? rows.context_lens[rows.seq_index[t]] - 1 : rows.positions[t];
  };
  int jlo = std::numeric_limits<int>::max(), jhi = -1;
  for (int i = 0; i < tile.n; ++i) {
    const int p = last_visible(tile.t0 + i);
    jlo = std::min(jlo, a.window > 0 ? std::max(0, p - a.window + 1) : 0);
    jhi = std::max(jhi, p);
  }
  // this head's K and V rows of keys jc .. jc + n - 1: a chunk (starting at a multiple of KC) lies in one block when the
  // block size is a multiple of KC (16, the engine's), so one division a chunk; key by key otherwise
  const size_t ks = kv_slot_stride(k_cache), vs = kv_slot_stride(v_cache);
  auto chunk_rows = [&](int jc, int n, const uint8_t** kp, const uint8_t** vp) {
    if (bs % KC == 0) {
      const size_t b = (size_t)bt[jc / bs], i = jc % bs;
      const uint8_t *k0 = kv_block_head(k_cache, b, bs, kvh) + i * ks, *v0 = kv_block_head(v_cache, b, bs, kvh) + i * vs;
      for (int k = 0; k < n; ++k) {
        kp[k] = k0 + k * ks;
        vp[k] = v0 + k * vs;
      }
    } else {
      for (int k = 0; k < n; ++k) {
        const size_t s = (size_t)bt[(jc + k) / bs] * bs + (jc + k) % bs;
        kp[k] = kv_slot(k_cache, s, bs, kvh);
        vp[k] = kv_slot(v_cache, s, bs, kvh);
      }
    }
  };
#if defined(LLL_X86)
  // f16 keys and values convert straight into the chunk's layouts (load_chunk_f16); keys a chunk leaves out read
  // zeros (their lanes are dropped; their values are multiplied by 0)
  const bool f16_chunks = k_cache.type == KvType::F16 && v_cache.type == KvType::F16 && D % 8 == 0 &&
                          D <= MAX_F16_DIM && have_f16c();
  static const uint16_t zero_row[MAX_F16_DIM] = {};
  const uint8_t* zeros = (const uint8_t*)zero_row;
#endif
  const uint8_t* krows[2][KC];  // this chunk's rows and the next one's
  const uint8_t* vrows[2][KC];
  int cur = 0;
  if (jlo <= jhi) chunk_rows(jlo / KC * KC, std::min(KC, jhi - jlo / KC * KC + 1), krows[cur], vrows[cur]);
  for (int jc = jlo / KC * KC; jc <= jhi; jc += KC, cur ^= 1) {
    const int nk = std::min(KC, jhi - jc + 1);
    // the next chunk's rows toward the cache (in the CPU's head-major blocks one span per head; in slot-major ones a
    // strided slice of each row, whose loads stalled decode at 4096 tokens: 14% of its samples, Zen 3)
    if (jc + KC <= jhi) {
      const int nn = std::min(KC, jhi - jc - KC + 1);
      chunk_rows(jc + KC, nn, krows[cur ^ 1], vrows[cur ^ 1]);
      for (int k = 0; k < nn; ++k) {
        for (size_t off = 0; off < k_cache.head_bytes; off += 64) __builtin_prefetch(krows[cur ^ 1][k] + off);
        for (size_t off = 0; off < v_cache.head_bytes; off += 64) __builtin_prefetch(vrows[cur ^ 1][k] + off);
      }
    }
#if defined(LLL_X86)
    if (f16_chunks) {
      const uint8_t* kp[KC];
      const uint8_t* vp[KC];
      for (int k = 0; k < KC; ++k) {
        const bool in = k < nk && jc + k >= jlo;
        kp[k] = in ? krows[cur][k] : zeros;
        vp[k] = in ? vrows[cur][k] : zeros;
      }
      load_chunk_f16(kp, vp, D, S.kt.data(), S.vc.data());
    } else
#endif
    {
      for (int k = 0; k < nk; ++k) {
        if (jc + k < jlo) continue;
        kv_dequantize_row(k_cache.type, krows[cur][k], D, S.kr.data() + (size_t)k * D);
        kv_dequantize_row(v_cache.type, vrows[cur][k], D, S.vc.data() + (size_t)k * D);
      }
      transpose_keys(S.kr.data(), D, S.kt.data());
    }
    // scores of RB rows at a time: each row's sum over d in the same order as alone
    for (int r0 = 0; r0 < R; r0 += RB) {
      const int nr = std::min(RB, R - r0);
      const float* qr[RB];
      query_rows(a, tile, kvh, group, q, r0, nr, qr);
      v8 sv0[RB], sv1[RB];
      scores16(qr, S.kt.data(), KC, D, sv0, sv1);
      for (int i = 0; i < nr; ++i) {
        const int r = r0 + i, t = tile.t0 + r / group;
        const int hi = last_visible(t);
        const int lo = a.window > 0 ? std::max(0, hi - a.window + 1) : 0;
        if (jc > hi || jc + KC <= lo) continue;  // no visible key in this chunk
        // keys jc + k for k in [k0, k1) are visible to this row
        const int k0 = std::max(0, lo - jc), k1 = std::min(nk, hi - jc + 1);
        // the scores stay vectors until the sum (a copy to floats, then vector loads of it, stalled on store
        // forwarding: 9% of a 4096-deep prompt's attention samples)
        alignas(32) float s[KC];
        *(v8*)s = sv0[i] * a.scale;
        *(v8*)(s + 8) = sv1[i] * a.scale;
        if (a.softcap > 0.f)
          for (int k = k0; k < k1; ++k) s[k] = a.softcap * std::tanh(s[k] / a.softcap);
        const v8 x0 = *(const v8*)s, x1 = *(const v8*)(s + 8);
        const v8i vis0 = (LANE0 >= k0) & (LANE0 < k1), vis1 = (LANE1 >= k0) & (LANE1 < k1);
        const v8 ninf = v8{} + neg_inf;
        const v8 t0 = vis0 ? x0 : ninf, t1 = vis1 ? x1 : ninf, tm = t0 > t1 ? t0 : t1;
        float mx = S.m[r];  // the largest visible score (any order gives it)
        for (int l = 0; l < 8; ++l) mx = std::max(mx, tm[l]);
        // exp(0) is exactly 1: where the running max holds (most chunks, past the first few) no call (expf was 10% of a
        // 4096-deep prompt's attention samples)
        const float corr = S.m[r] == neg_inf ? 0.f : mx == S.m[r] ? 1.f : std::exp(S.m[r] - mx);
        alignas(32) float e[KC];
        for (int k = 0; k < KC; ++k) e[k] = exp_poly(s[k] - mx);  // vectorised; invisible lanes dropped below
        *(v8*)s = vis0 ? *(const v8*)e : v8{};
        *(v8*)(s + 8) = vis1 ? *(const v8*)(e + 8) : v8{};
        float sum = 0.f;
        for (int k = 0; k < KC; ++k) sum += s[k];
        S.m[r] = mx;
        S.l[r] = S.l[r] * corr + sum;
        // acc = acc * corr + sum_k p_k v_k, 64 dims at a time, then 32, 8, 1 (each dim's sum over k in order)
        float* ar = S.acc.data() + (size_t)r * D;
        int d0 = 0;
        for (; d0 + 64 <= D; d0 += 64) value_sum<8>(ar + d0, S.vc.data() + d0, D, s, nk, corr);
        for (; d0 + 32 <= D; d0 += 32) value_sum<4>(ar + d0, S.vc.data() + d0, D, s, nk, corr);
        for (; d0 + 8 <= D; d0 += 8) value_sum<1>(ar + d0, S.vc.data() + d0, D, s, nk, corr);
        for (int d = d0; d < D; ++d) {
          float o = ar[d] * corr;
          for (int k = 0; k < nk; ++k) o += s[k] * S.vc[(size_t)k * D + d];
          ar[d] = o;
        }
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    const int t = tile.t0 + r / group, h = kvh * group + r % group;
    float* o = out + ((size_t)t * a.n_head + h) * D;
    if (a.sinks) {  // the sink joins the softmax as one more logit: max and sum rescaled to include it
      const float mx = std::max(S.m[r], a.sinks[h]), corr = std::exp(S.m[r] - mx);
      S.l[r] = S.l[r] * corr + std::exp(a.sinks[h] - mx);
      for (int d = 0; d < D; ++d) S.acc[(size_t)r * D + d] *= corr;
    }
    const float inv = 1.f / S.l[r];  // l >= 1: the row's own position is always visible (more with a sink)
    for (int d = 0; d < D; ++d) o[d] = S.acc[(size_t)r * D + d] * inv;
  }
}

// A tile of rows of one bidirectional sequence (an encoder) against one kv head: every row sees the same keys [0, n),
// so a row's scores are computed whole, then one softmax and one weighted sum of the values (no running max, no
// rescaling per chunk), each key read and dequantized once for the tile. A row's result depends on its sequence only.
LLL_VECTOR_CLONES
void tile_attention_bidi(const AttentionShape& a, const AttentionRows& rows, const Tile& tile, int kvh, const float* q,
                         const KvView& k_cache, const KvView& v_cache, float* out, Scratch& S) {
  const int D = a.head_dim, group = a.n_head / a.n_kv_head, bs = a.block_size;
  const int32_t* bt = rows.block_tables + (size_t)rows.seq_index[tile.t0] * rows.max_blocks;
  const int n = rows.context_lens[rows.seq_index[tile.t0]], np = (n + KC - 1) / KC * KC;
  const int R = tile.n * group;  // row r: batch row t0 + r / group, query head kvh * group + r % group
  S.kt.resize((size_t)D * np);  // [D][np]: the keys transposed, zero past n
  S.vc.resize((size_t)n * D);
  S.kr.resize((size_t)KC * D);  // one chunk's keys as they lie, transposed from here
  S.sc.resize((size_t)RB * np);
  for (int jc = 0; jc < np; jc += KC) {
    const int nk = std::min(KC, n - jc);
    for (int k = 0; k < nk; ++k) {
      const int j = jc + k;
      const size_t slot = (size_t)bt[j / bs] * bs + j % bs;
      kv_dequantize_row(k_cache.type, kv_slot(k_cache, slot, bs, kvh), D, S.kr.data() + (size_t)k * D);
      kv_dequantize_row(v_cache.type, kv_slot(v_cache, slot, bs, kvh), D, S.vc.data() + (size_t)j * D);
    }
    for (int d = 0; d < D; ++d) {  // contiguous writes: 16 keys of dimension d
      float* kd = S.kt.data() + (size_t)d * np + jc;
      for (int k = 0; k < KC; ++k) kd[k] = k < nk ? S.kr[(size_t)k * D + d] : 0.f;
    }
  }
  for (int r0 = 0; r0 < R; r0 += RB) {
    const int nr = std::min(RB, R - r0);
    const float* qr[RB];
    query_rows(a, tile, kvh, group, q, r0, nr, qr);
    // scores, 16 keys of RB rows at a time, each a sum over d in order
    for (int jc = 0; jc < np; jc += KC) {
      v8 sv0[RB], sv1[RB];
      scores16(qr, S.kt.data() + jc, np, D, sv0, sv1);
      for (int i = 0; i < RB; ++i) {  // all RB (rows past nr repeat the last one): the loop stays unrolled
        *(v8u*)(S.sc.data() + (size_t)i * np + jc) = sv0[i];
        *(v8u*)(S.sc.data() + (size_t)i * np + jc + 8) = sv1[i];
      }
    }
    float inv[RB];
    for (int i = 0; i < nr; ++i) {
      const int h = kvh * group + (r0 + i) % group;
      float* s = S.sc.data() + (size_t)i * np;
      for (int j = 0; j < n; ++j) s[j] *= a.scale;
      if (a.softcap > 0.f)
        for (int j = 0; j < n; ++j) s[j] = a.softcap * std::tanh(s[j] / a.softcap);
      // the max (any order gives it) and the sum in 8 lanes, then across them in order: no chain of n dependent adds
      v8 m8 = s[0] + v8{};
      int j = 0;
      for (; j + 8 <= n; j += 8) {
        const v8 x = *(const v8u*)(s + j);
        m8 = x > m8 ? x : m8;
      }
      float mx = a.sinks ? a.sinks[h] : s[0];
      for (int l = 0; l < 8; ++l) mx = m8[l] > mx ? m8[l] : mx;
      for (; j < n; ++j) mx = s[j] > mx ? s[j] : mx;
      for (j = 0; j < n; ++j) s[j] = exp_poly(s[j] - mx);  // vectorised
      v8 s8 = {};
      for (j = 0; j + 8 <= n; j += 8) s8 += *(const v8u*)(s + j);
      float sum = a.sinks ? std::exp(a.sinks[h] - mx) : 0.f;
      for (int l = 0; l < 8; ++l) sum += s8[l];
      for (; j < n; ++j) sum += s[j];
      inv[i] = 1.f / sum;
    }
    // o = sum_j p_j v_j for two rows at a time (each value read once for both), 32 dims a row: eight independent
    // chains in registers; a row's sums run over j in order, whichever row it is paired with
    for (int i0 = 0; i0 < nr; i0 += 2) {
      const int pair = std::min(2, nr - i0);
      const float* p0 = S.sc.data() + (size_t)i0 * np;
      const float* p1 = S.sc.data() + (size_t)(i0 + pair - 1) * np;
      float* o[2];
      for (int i = 0; i < 2; ++i) {
        const int r = r0 + i0 + std::min(i, pair - 1), t = tile.t0 + r / group, h = kvh * group + r % group;
        o[i] = out + ((size_t)t * a.n_head + h) * D;
      }
      int d0 = 0;
      for (; d0 + 32 <= D; d0 += 32) {
        v8 a0[4] = {}, a1[4] = {};
        for (int j = 0; j < n; ++j) {
          const float* vj = S.vc.data() + (size_t)j * D + d0;
          const float w0 = p0[j], w1 = p1[j];
          for (int c = 0; c < 4; ++c) {
            const v8 v = *(const v8u*)(vj + 8 * c);
            a0[c] += w0 * v;
            a1[c] += w1 * v;
          }
        }
        for (int c = 0; c < 4; ++c) {
          *(v8u*)(o[1] + d0 + 8 * c) = a1[c] * inv[i0 + pair - 1];
          *(v8u*)(o[0] + d0 + 8 * c) = a0[c] * inv[i0];
        }
      }
      for (; d0 + 8 <= D; d0 += 8) {
        v8 a0 = {}, a1 = {};
        for (int j = 0; j < n; ++j) {
          const v8 v = *(const v8u*)(S.vc.data() + (size_t)j * D + d0);
          a0 += p0[j] * v;
          a1 += p1[j] * v;
        }
        *(v8u*)(o[1] + d0) = a1 * inv[i0 + pair - 1];
        *(v8u*)(o[0] + d0) = a0 * inv[i0];
      }
      for (int d = d0; d < D; ++d) {
        float x0 = 0.f, x1 = 0.f;
        for (int j = 0; j < n; ++j) {
          x0 += p0[j] * S.vc[(size_t)j * D + d];
          x1 += p1[j] * S.vc[(size_t)j * D + d];
        }
        o[1][d] = x1 * inv[i0 + pair - 1];
        o[0][d] = x0 * inv[i0];
      }
    }
  }
}

}  // namespace

void paged_attention(const AttentionShape& a, const AttentionRows& rows, const float* q, const KvView& k_cache,
                     const KvView& v_cache, float* out, ThreadPool& pool) {
  // tiles: runs of up to QT (QT_BIDI) consecutive batch rows of one sequence
  const int qt = rows.context_lens ? QT_BIDI : QT;
  std::vector<Tile> tiles;
  for (int t = 0; t < rows.T; ++t) {
    if (!tiles.empty() && tiles.back().n < qt && rows.seq_index[t] == rows.seq_index[tiles.back().t0])
      ++tiles.back().n;
    else
      tiles.push_back({t, 1});
  }
  std::vector<Scratch> scratch(pool.size());
  const int n_tiles = (int)tiles.size();
  pool.run(n_tiles * a.n_kv_head, [&](int task, int th) {
    const Tile& tile = tiles[task / a.n_kv_head];
    if (rows.context_lens)
      tile_attention_bidi(a, rows, tile, task % a.n_kv_head, q, k_cache, v_cache, out, scratch[th]);
    else
      tile_attention(a, rows, tile, task % a.n_kv_head, q, k_cache, v_cache, out, scratch[th]);
  });
}

}  // namespace lll
