// Causal (or bidirectional) grouped-query attention over the paged KV cache, read through each sequence's block table.
#pragma once
#include <cstdint>

#include "kv_cache.h"
#include "thread_pool.h"

namespace lll {

struct AttentionShape {
  int n_head, n_kv_head, head_dim;  // query head h reads kv head h / (n_head / n_kv_head)
  int block_size;
  float scale;    // multiplies q . k
  float softcap;  // 0: none; else s = softcap * tanh(s / softcap)
  int window;     // 0: none; else key position j is visible from query position p when p - j < window
  const float* sinks = nullptr;  // [n_head] or nullptr: head h's softmax also counts e^sinks[h] (a logit, unscaled),
                                 // whose share of the weight goes to no value (gpt-oss)
};

// Which cached positions each query row sees: row t is token positions[t] of sequence seq_index[t],
// and sees that sequence's positions j <= positions[t] (inside the window), or with context_lens (bidirectional
// attention: an encoder) every position j < context_lens[seq] of it, j at slot
// block_tables[seq][j / block_size] * block_size + j % block_size. The caller has checked every index.
struct AttentionRows {
  int T;
  const int32_t* positions;     // [T]
  const int32_t* seq_index;     // [T]
  const int32_t* block_tables;  // [n_seq][max_blocks]
  int max_blocks;
  const int32_t* context_lens = nullptr;  // [n_seq]: bidirectional (no window then); nullptr: causal
};

// q: [T][n_head][head_dim]; k_cache, v_cache: [n_blocks, block_size, n_kv_head, head_dim] in their KV row
// formats, each chunk's keys and values dequantized (kv_dequantize_row) into per-thread scratch as they are
// read, never the whole cache; out: [T][n_head][head_dim]. Tasks are (tile of up to 16 consecutive rows of one sequence,
// 64 when bidirectional, kv head) pairs
// spread over the pool; each reads its keys once per tile, in chunks of 16 with an online softmax. A row's
// result does not depend on the tiling (prefill and decode compute the same numbers).
void paged_attention(const AttentionShape& a, const AttentionRows& rows, const float* q, const KvView& k_cache,
                     const KvView& v_cache, float* out, ThreadPool& pool);

}  // namespace lll
