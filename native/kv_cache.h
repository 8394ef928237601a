// The paged KV cache: per layer one pool of fixed-size blocks for K and one for V, each in its own row
// format (kv_format.h: f16, q8_0 or q4_0, quantized on write). Which block holds which positions of which
// sequence is the caller's bookkeeping (block tables, slot mappings); slot s is row s % block_size of
// block s / block_size, and a block holds each kv head's rows together (KvView).
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <vector>

#include "kv_format.h"

namespace lll {

// one layer's K or V pool as the attention reads it. block_size > 0 (the CPU's pools): head-major blocks, each
// [n_kv_head][block_size][head_bytes], so one head's keys of a block lie together (a decode thread reads a head: a
// strided slice of every slot-major row kept its loads waiting on memory); block_size 0 (the CUDA stage's):
// slot-major, slot s, head h at data + s * row_bytes + h * head_bytes.
struct KvView {
  const uint8_t* data;
  KvType type;
  size_t row_bytes, head_bytes;  // row_bytes: one slot, all heads; head_bytes: one head's slice
  int block_size = 0;
};

// where head h of block b starts, and the stride from one slot of the block to the next
inline const uint8_t* kv_block_head(const KvView& v, size_t b, int bs, int h) {
  return v.data + b * bs * v.row_bytes + (size_t)h * (v.block_size > 0 ? bs * v.head_bytes : v.head_bytes);
}
inline size_t kv_slot_stride(const KvView& v) { return v.block_size > 0 ? v.head_bytes : v.row_bytes; }
// slot s, head h (pools of bs-slot blocks)
inline const uint8_t* kv_slot(const KvView& v, size_t s, int bs, int h) {
  return kv_block_head(v, s / bs, bs, h) + (s % bs) * kv_slot_stride(v);
}

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

  // k_cache, v_cache: [n_blocks, n_kv_head, block_size, head_dim] in k_type / v_type (head-major blocks)
  KvView k(int layer) const { return {k_[layer].get(), k_type_, k_row_, k_row_ / n_kv_head_, block_size_}; }
  KvView v(int layer) const { return {v_[layer].get(), v_type_, v_row_, v_row_ / n_kv_head_, block_size_}; }

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
