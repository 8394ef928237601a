// The shapes of the int8 products (qgemv.cu), shared by the host side (device_ops.cuh) and the kernels
// (qgemv_kernel.cuh, mmq_kernel.cuh), which the tests also compile for the host: plain C++, no CUDA header.
#pragma once
#include <cstddef>
#include <cstdint>

namespace lll::cuda {

// activation rows a thread block of qgemv multiplies at once in a decode-sized step (its registers); a larger step
// runs blocks of 32 rows (each weight step decoded once for 32), as many as it needs
constexpr int QGEMV_MAX_N = 8;
constexpr int QGEMV_WIDE_N = 32;
// the most activation rows one qgemv takes (65,535 blocks of QGEMV_MAX_N: the grid's y limit)
constexpr int QGEMV_MAX_ROWS = 65535 * QGEMV_MAX_N;

// One product of a launch: y [n][m] = x . W^T (+ bias) (+ y's old value with add_to_y); W: m rows of row_bytes
struct QgemvMat {
  int type;
  const uint8_t* w;
  size_t row_bytes;
  int m;
  float* y;
  const float* bias;
  bool add_to_y;
};
constexpr int QGEMV_MAX_MATS = 3;

// activations quantized per 32 (quantize_x): xq [n][k] int8, xd [n][k / 32]
struct QuantX {
  const int8_t* q;
  const float* d;
  int k;
};

}  // namespace lll::cuda
