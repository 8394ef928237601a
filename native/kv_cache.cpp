#include "kv_cache.h"

#include <new>
#include <stdexcept>
#include <string>

#include "ops.h"

namespace lll {

KvCache::KvCache(int n_layers, int n_blocks, int block_size, int n_kv_head, int head_dim)
    : n_layers_(n_layers), n_blocks_(n_blocks), block_size_(block_size), row_(n_kv_head * head_dim) {
  if (n_layers <= 0 || n_blocks <= 0 || block_size <= 0 || n_kv_head <= 0 || head_dim <= 0)
    throw std::invalid_argument("KV cache sizes must be positive (n_layers " + std::to_string(n_layers) +
                                ", n_blocks " + std::to_string(n_blocks) + ", block_size " +
                                std::to_string(block_size) + ")");
  if ((int64_t)n_blocks * block_size > INT32_MAX)
    throw std::invalid_argument("KV cache: n_blocks * block_size exceeds 2^31 slots");
  layer_elems_ = (size_t)n_blocks * block_size * row_;
  for (int l = 0; l < n_layers; ++l) {
    for (auto* pools : {&k_, &v_}) {
      void* p = std::calloc(layer_elems_, sizeof(f16_t));
      if (!p) throw std::bad_alloc();
      pools->emplace_back((f16_t*)p);
    }
  }
}

void KvCache::write(int layer, const float* k, const float* v, const int32_t* slots, int T) {
  f16_t* kc = k_[layer].get();
  f16_t* vc = v_[layer].get();
  for (int t = 0; t < T; ++t) {
    f16_t* kd = kc + (size_t)slots[t] * row_;
    f16_t* vd = vc + (size_t)slots[t] * row_;
    const float* ks = k + (size_t)t * row_;
    const float* vs = v + (size_t)t * row_;
    for (int i = 0; i < row_; ++i) {
      kd[i] = f32_to_f16(ks[i]);
      vd[i] = f32_to_f16(vs[i]);
    }
  }
}

}  // namespace lll
