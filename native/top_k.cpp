// Sampling's candidates (top_k.h): each value's order-preserving 32-bit key and its index packed in one 64-bit
// word whose larger values rank first (key descending, index ascending), nth_element to the k-th, a sort of the k.
#include "top_k.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <vector>

namespace lll {

namespace {

// the float's total order as an unsigned key: -inf < finite < +inf < NaN, -0 == +0
uint32_t order_key(float f) {
  if (f != f) return 0xFFFFFFFFu;
  if (f == 0.0f) f = 0.0f;
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

}  // namespace

void top_k_row(const float* x, int n_valid, int k, int32_t* ids, float* vals) {
  thread_local std::vector<uint64_t> packed;
  packed.resize((size_t)n_valid);
  for (int i = 0; i < n_valid; ++i) packed[i] = ((uint64_t)order_key(x[i]) << 32) | (uint32_t)(0xFFFFFFFFu - (uint32_t)i);
  std::nth_element(packed.begin(), packed.begin() + (k - 1), packed.end(), std::greater<uint64_t>());
  std::sort(packed.begin(), packed.begin() + k, std::greater<uint64_t>());
  for (int j = 0; j < k; ++j) {
    ids[j] = (int32_t)(0xFFFFFFFFu - (uint32_t)packed[j]);
    vals[j] = x[ids[j]];
  }
}

}  // namespace lll
