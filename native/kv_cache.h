// The paged KV cache: per layer one pool of fixed-size blocks, f16 K and V. Which block holds which
// positions of which sequence is the caller's bookkeeping (block tables, slot mappings); slot s is
// row s % block_size of block s / block_size.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <vector>

#include "quant_formats.h"

namespace lll {

class KvCache {
 public:
  // throws std::invalid_argument for non-positive sizes, std::bad_alloc when the pool does not fit
  KvCache(int n_layers, int n_blocks, int block_size, int n_kv_head, int head_dim);

  int n_blocks() const { return n_blocks_; }
  int block_size() const { return block_size_; }
  size_t bytes() const { return 2 * (size_t)n_layers_ * layer_elems_ * sizeof(f16_t); }

  // k_cache, v_cache: [n_blocks, block_size, n_kv_head, head_dim]
  const f16_t* k(int layer) const { return k_[layer].get(); }
  const f16_t* v(int layer) const { return v_[layer].get(); }

  // k, v: [T][n_kv_head * head_dim] float, rounded to f16 into rows slots[t] of the layer's pools
  void write(int layer, const float* k, const float* v, const int32_t* slots, int T);

 private:
  struct Free {
    void operator()(void* p) const { std::free(p); }
  };
  int n_layers_, n_blocks_, block_size_, row_;  // row_: n_kv_head * head_dim
  size_t layer_elems_;
  std::vector<std::unique_ptr<f16_t[], Free>> k_, v_;  // calloc'd: pages are touched on first write
};

}  // namespace lll
