// The paged KV cache: per layer one pool of fixed-size blocks for K and one for V, each in its own row
// format (kv_format.h: f16, q8_0 or q4_0, quantized on write). Which block holds which positions of which
// sequence is the caller's bookkeeping (block tables, slot mappings); slot s is row s % block_size of
// block s / block_size.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <vector>

#include "kv_format.h"

namespace lll {

// one layer's K or V pool as the attention reads it: slot s, kv head h at data + s * row_bytes + h * head_bytes
struct KvView {
  const uint8_t* data;
  KvType type;
  size_t row_bytes, head_bytes;
};

class KvCache {
 public:
  // throws std::invalid_argument for non-positive sizes or a head_dim that is not whole blocks of a type,
  // std::bad_alloc when the pool does not fit
  KvCache(int n_layers, int n_blocks, int block_size, int n_kv_head, int head_dim, KvType k_type, KvType v_type);

  int n_blocks() const { return n_blocks_; }
  int block_size() const { return block_size_; }
  KvType k_type() const { return k_type_; }
  KvType v_type() const { return v_type_; }
  size_t bytes() const { return (size_t)n_layers_ * slots_ * (k_row_ + v_row_); }

  // k_cache, v_cache: [n_blocks, block_size, n_kv_head, head_dim] in k_type / v_type
  KvView k(int layer) const { return {k_[layer].get(), k_type_, k_row_, k_row_ / n_kv_head_}; }
  KvView v(int layer) const { return {v_[layer].get(), v_type_, v_row_, v_row_ / n_kv_head_}; }

  // k, v: [T][n_kv_head * head_dim] float, quantized into rows slots[t] of the layer's pools
  void write(int layer, const float* k, const float* v, const int32_t* slots, int T);

 private:
  struct Free {
    void operator()(void* p) const { std::free(p); }
  };
  int n_layers_, n_blocks_, block_size_, n_kv_head_, row_;  // row_: n_kv_head * head_dim values
  KvType k_type_, v_type_;
  size_t slots_, k_row_, v_row_;  // k_row_, v_row_: bytes per slot
  std::vector<std::unique_ptr<uint8_t[], Free>> k_, v_;  // calloc'd: pages are touched on first write
};

}  // namespace lll
