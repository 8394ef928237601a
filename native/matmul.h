// Matrix products over GGML-typed weight rows, y = W x for N activation rows at once.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels.h"
#include "thread_pool.h"

namespace lll {

// Activations quantized once per product (Q8_0-style, per 32: kernels.h), reused by every weight row.
struct QuantizedX {
  int n = 0, k = 0;
  std::vector<int8_t> xq;      // [n][k]
  std::vector<float> dx;       // [n][k/32]
  std::vector<int32_t> sum16;  // [n][k/16]
};

// The one check of a weight type: the type of rows of k weights of type_id, or std::invalid_argument naming
// `what` when the kernels do not compute the type or k is not a whole number of its blocks.
const TypeInfo& checked_type(const KernelTable& kt, int type_id, int k, const std::string& what);
// bytes of a row of k weights of type ti (k whole blocks)
inline size_t row_bytes_of(const TypeInfo& ti, int k) { return (size_t)(k / ti.block_size) * ti.type_size; }

// x: [n][ldx] float, k a multiple of 32
void quantize_x(const KernelTable& kt, const float* x, int n, int k, size_t ldx, QuantizedX& out, ThreadPool& pool);

// W: m rows of k weights of type t, row r at w + r * row_bytes; x: [n][k] float (contiguous);
// y: [n][m] float. Throws std::invalid_argument for an unsupported type or a k that is not whole blocks.
void matmul(const KernelTable& kt, int type_id, const uint8_t* w, size_t row_bytes, int m, int k, const float* x,
            int n, float* y, ThreadPool& pool);

// One product of several sharing an input: W (m rows of type_id, row r at w + r * row_bytes) -> y [n][m].
struct MatmulJob {
  int type_id;
  const uint8_t* w;
  size_t row_bytes;
  int m;
  float* y;
};
// y_j = W_j x for every job, all with k weights a row and the same x [n][k]: small N (decode) quantizes x
// once and runs the products as one pool dispatch. Throws as matmul does, before computing anything.
void matmul_multi(const KernelTable& kt, const MatmulJob* jobs, int n_jobs, int k, const float* x, int n,
                  ThreadPool& pool);

// products of one row length k, each with its own input xs[j] ([n][k] float): the same bits as matmul_multi of each
// alone, in one pool dispatch where all run the small-N kernels (a mixture of experts' down products at decode)
void matmul_each(const KernelTable& kt, const MatmulJob* jobs, int n_jobs, int k, const float* const* xs, int n,
                 ThreadPool& pool);

// out: [rows][k] float
void dequantize(const KernelTable& kt, int type_id, const uint8_t* w, size_t row_bytes, int rows, int k, float* out);

}  // namespace lll
