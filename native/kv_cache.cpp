// The paged KV cache's storage and its quantizing write (kv_cache.h).
#include "kv_cache.h"

#include <new>
#include <stdexcept>
#include <string>

namespace lll {

KvCache::KvCache(int n_layers, int n_blocks, int block_size, int n_kv_head, int head_dim, KvType k_type,
                 KvType v_type)
    : n_layers_(n_layers),
      n_blocks_(n_blocks),
      block_size_(block_size),
      n_kv_head_(n_kv_head),
      row_(n_kv_head * head_dim),
      k_type_(k_type),
      v_type_(v_type) {
  if (n_layers <= 0 || n_blocks <= 0 || block_size <= 0 || n_kv_head <= 0 || head_dim <= 0)
    throw std::invalid_argument("KV cache sizes must be positive (n_layers " + std::to_string(n_layers) +
                                ", n_blocks " + std::to_string(n_blocks) + ", block_size " +
                                std::to_string(block_size) + ")");
  if ((int64_t)n_blocks * block_size > INT32_MAX)
    throw std::invalid_argument("KV cache: n_blocks * block_size exceeds 2^31 slots");
  kv_check_len(k_type, head_dim, "k_type");
  kv_check_len(v_type, head_dim, "v_type");
  slots_ = (size_t)n_blocks * block_size;
  k_row_ = kv_row_bytes(k_type, row_);
  v_row_ = kv_row_bytes(v_type, row_);
  for (int l = 0; l < n_layers; ++l) {
    for (auto* pools : {&k_, &v_}) {
      void* p = std::calloc(slots_, pools == &k_ ? k_row_ : v_row_);
      if (!p) throw std::bad_alloc();
      pools->emplace_back((uint8_t*)p);
    }
  }
}

void KvCache::write(int layer, const float* k, const float* v, const int32_t* slots, int T) {
  uint8_t* kc = k_[layer].get();
  uint8_t* vc = v_[layer].get();
  const KvView kv = this->k(layer), vv = this->v(layer);
  const int hd = row_ / n_kv_head_;
  for (int t = 0; t < T; ++t)  // head by head (blocks of 32 never straddle heads: head_dim is whole blocks)
    for (int h = 0; h < n_kv_head_; ++h) {
      kv_quantize_row(k_type_, k + (size_t)t * row_ + (size_t)h * hd, hd,
                      kc + (kv_slot(kv, slots[t], block_size_, h) - kv.data));
      kv_quantize_row(v_type_, v + (size_t)t * row_ + (size_t)h * hd, hd,
                      vc + (kv_slot(vv, slots[t], block_size_, h) - vv.data));
    }
}

}  // namespace lll
