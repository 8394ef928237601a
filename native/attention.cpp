#include "attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "ops.h"

namespace lll {

void paged_attention(const AttentionShape& a, const AttentionRows& rows, const float* q, const f16_t* k_cache,
                     const f16_t* v_cache, float* out, ThreadPool& pool) {
  const int D = a.head_dim, group = a.n_head / a.n_kv_head, bs = a.block_size;
  const size_t kv_row = (size_t)a.n_kv_head * D;  // f16 elements per slot
  const float* h2f = f16_table();
  // per thread: scores [group][ctx], one converted K or V row [D]
  std::vector<std::vector<float>> scratch(pool.size());

  pool.run(rows.T * a.n_kv_head, [&](int task, int th) {
    const int t = task / a.n_kv_head, kvh = task % a.n_kv_head;
    const int p = rows.positions[t];
    const int j0 = a.window > 0 ? std::max(0, p - a.window + 1) : 0;
    const int n = p - j0 + 1;  // visible keys
    const int32_t* bt = rows.block_tables + (size_t)rows.seq_index[t] * rows.max_blocks;
    std::vector<float>& sc = scratch[th];
    if (sc.size() < (size_t)group * n + D) sc.resize((size_t)group * n + D);
    float* s = sc.data();               // [group][n]
    float* row = s + (size_t)group * n;  // [D]
    const float* qh = q + ((size_t)t * a.n_head + (size_t)kvh * group) * D;  // [group][D]

    for (int j = j0; j <= p; ++j) {
      const size_t slot = (size_t)bt[j / bs] * bs + j % bs;
      const f16_t* kr = k_cache + slot * kv_row + (size_t)kvh * D;
      for (int d = 0; d < D; ++d) row[d] = h2f[kr[d]];
      for (int g = 0; g < group; ++g) {
        const float* qg = qh + (size_t)g * D;
        float dot = 0.f;
        for (int d = 0; d < D; ++d) dot += qg[d] * row[d];
        s[(size_t)g * n + (j - j0)] = dot * a.scale;
      }
    }
    for (int g = 0; g < group; ++g) {
      float* sg = s + (size_t)g * n;
      if (a.softcap > 0.f) softcap(sg, n, a.softcap);
      float mx = -std::numeric_limits<float>::infinity();
      for (int i = 0; i < n; ++i) mx = std::max(mx, sg[i]);
      double sum = 0.0;
      for (int i = 0; i < n; ++i) {
        sg[i] = std::exp(sg[i] - mx);
        sum += sg[i];
      }
      const float inv = (float)(1.0 / sum);
      for (int i = 0; i < n; ++i) sg[i] *= inv;
    }
    float* oh = out + ((size_t)t * a.n_head + (size_t)kvh * group) * D;  // [group][D]
    std::fill(oh, oh + (size_t)group * D, 0.f);
    for (int j = j0; j <= p; ++j) {
      const size_t slot = (size_t)bt[j / bs] * bs + j % bs;
      const f16_t* vr = v_cache + slot * kv_row + (size_t)kvh * D;
      for (int d = 0; d < D; ++d) row[d] = h2f[vr[d]];
      for (int g = 0; g < group; ++g) {
        const float w = s[(size_t)g * n + (j - j0)];
        float* og = oh + (size_t)g * D;
        for (int d = 0; d < D; ++d) og[d] += w * row[d];
      }
    }
  });
}

}  // namespace lll
