// Sampling's candidates: the k largest logits of a row, so that a step can return K candidates per row instead
// of the whole vocabulary (the GPU stage's twin is cuda/top_k.cu). The order is runtime/sampling.py's _largest:
// value descending, ties by index ascending; NaN ranks above +inf (as numpy sorts it), -0 equals +0.
#pragma once
#include <cstdint>

namespace lll {

constexpr int TOP_K_MAX = 256;

// What a step returns instead of logits: per logits row, the k largest of its first n_valid columns.
struct TopK {
  int k = 0;        // 1 <= k <= min(n_valid, TOP_K_MAX)
  int n_valid = 0;  // columns past it (the vocabulary's padding) never take part
  int32_t* ids = nullptr;  // [n_logits][k]
  float* vals = nullptr;   // [n_logits][k]
};

// the scalar reference: x [n_valid] -> ids, vals [k]
void top_k_row(const float* x, int n_valid, int k, int32_t* ids, float* vals);

}  // namespace lll
