// Paged causal or bidirectional attention (attention.h): tiles of one sequence's rows per kv head, an online softmax over
// the cached keys read in chunks of 16.
#include "attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "ops.h"

// The inner loops run over 16 independent lanes (16 keys, or 16 dims of a head) as two vector-extension values,
// which never reorders a sum; the AVX2 and AVX-512 builds (LLL_VECTOR_CLONES) contract them to FMA.

namespace lll {

namespace {

constexpr int QT = 16;  // query rows (of one sequence) per tile
constexpr int KC = 16;  // keys per chunk; chunks start at multiples of KC, whatever the tile
constexpr int RB = 4;   // query rows whose scores are computed together

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
};

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
  S.kr.assign(D, 0.f);
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
  for (int jc = jlo / KC * KC; jc <= jhi; jc += KC) {
    const int nk = std::min(KC, jhi - jc + 1);
    for (int k = 0; k < nk; ++k) {
      const int j = jc + k;
      if (j < jlo) continue;
      const size_t slot = (size_t)bt[j / bs] * bs + j % bs;
      kv_dequantize_row(k_cache.type, k_cache.data + slot * k_cache.row_bytes + kvh * k_cache.head_bytes, D,
                        S.kr.data());
      for (int d = 0; d < D; ++d) S.kt[(size_t)d * KC + k] = S.kr[d];
      kv_dequantize_row(v_cache.type, v_cache.data + slot * v_cache.row_bytes + kvh * v_cache.head_bytes, D,
                        S.vc.data() + (size_t)k * D);
    }
    // scores of RB rows at a time: each row's sum over d in the same order as alone, the rows' chains
    // independent (one row's chain of head_dim dependent FMAs was latency-bound)
    for (int r0 = 0; r0 < R; r0 += RB) {
      const int nr = std::min(RB, R - r0);
      const float* qr[RB];
      for (int i = 0; i < RB; ++i) {
        const int r = r0 + std::min(i, nr - 1), t = tile.t0 + r / group;
        qr[i] = q + ((size_t)t * a.n_head + (size_t)kvh * group + r % group) * D;
      }
      v8 sv0[RB] = {}, sv1[RB] = {};
      for (int d = 0; d < D; ++d) {
        const float* kd = S.kt.data() + (size_t)d * KC;
        const v8 k0 = *(const v8u*)kd, k1 = *(const v8u*)(kd + 8);
        for (int i = 0; i < RB; ++i) {
          sv0[i] += qr[i][d] * k0;
          sv1[i] += qr[i][d] * k1;
        }
      }
      for (int i = 0; i < nr; ++i) {
        const int r = r0 + i, t = tile.t0 + r / group;
        const int hi = last_visible(t);
        const int lo = a.window > 0 ? std::max(0, hi - a.window + 1) : 0;
        if (jc > hi || jc + KC <= lo) continue;  // no visible key in this chunk
        float s[KC];
        std::memcpy(s, &sv0[i], sizeof(v8));
        std::memcpy(s + 8, &sv1[i], sizeof(v8));
        // keys jc + k for k in [k0, k1) are visible to this row
        const int k0 = std::max(0, lo - jc), k1 = std::min(nk, hi - jc + 1);
        for (int k = 0; k < KC; ++k) s[k] *= a.scale;
        if (a.softcap > 0.f)
          for (int k = k0; k < k1; ++k) s[k] = a.softcap * std::tanh(s[k] / a.softcap);
        float mx = S.m[r];
        for (int k = k0; k < k1; ++k) mx = std::max(mx, s[k]);
        const float corr = S.m[r] == neg_inf ? 0.f : std::exp(S.m[r] - mx);
        float e[KC];
        for (int k = 0; k < KC; ++k) e[k] = exp_poly(s[k] - mx);  // vectorised; invisible lanes dropped below
        float sum = 0.f;
        for (int k = 0; k < KC; ++k) {
          s[k] = (k < k0 || k >= k1) ? 0.f : e[k];
          sum += s[k];
        }
        S.m[r] = mx;
        S.l[r] = S.l[r] * corr + sum;
        // acc = acc * corr + sum_k p_k v_k, in registers 32 dims (four independent chains) at a time
        float* ar = S.acc.data() + (size_t)r * D;
        int d0 = 0;
        for (; d0 + 32 <= D; d0 += 32) {
          v8 o[4];
          for (int c = 0; c < 4; ++c) o[c] = *(const v8u*)(ar + d0 + 8 * c) * corr;
          for (int k = 0; k < nk; ++k) {
            const float* vk = S.vc.data() + (size_t)k * D + d0;
            for (int c = 0; c < 4; ++c) o[c] += s[k] * *(const v8u*)(vk + 8 * c);
          }
          for (int c = 0; c < 4; ++c) *(v8u*)(ar + d0 + 8 * c) = o[c];
        }
        for (; d0 + 8 <= D; d0 += 8) {
          v8 o0 = *(const v8u*)(ar + d0) * corr;
          for (int k = 0; k < nk; ++k) o0 += s[k] * *(const v8u*)(S.vc.data() + (size_t)k * D + d0);
          *(v8u*)(ar + d0) = o0;
        }
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

}  // namespace

void paged_attention(const AttentionShape& a, const AttentionRows& rows, const float* q, const KvView& k_cache,
                     const KvView& v_cache, float* out, ThreadPool& pool) {
  // tiles: runs of up to QT consecutive batch rows of one sequence
  std::vector<Tile> tiles;
  for (int t = 0; t < rows.T; ++t) {
    if (!tiles.empty() && tiles.back().n < QT && rows.seq_index[t] == rows.seq_index[tiles.back().t0])
      ++tiles.back().n;
    else
      tiles.push_back({t, 1});
  }
  std::vector<Scratch> scratch(pool.size());
  const int n_tiles = (int)tiles.size();
  pool.run(n_tiles * a.n_kv_head, [&](int task, int th) {
    tile_attention(a, rows, tiles[task / a.n_kv_head], task % a.n_kv_head, q, k_cache, v_cache, out, scratch[th]);
  });
}

}  // namespace lll
