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
// the activation rows a thread block of qgemv takes in a step of n rows (the grid's y: ceil(n / that))
inline int qgemv_row_group(int n) { return n > QGEMV_MAX_N ? QGEMV_WIDE_N : QGEMV_MAX_N; }
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

// What follows a launch's products, fused into the decode kernel: the last thread block to finish a piece of the
// outputs (a count per piece in `counters`, which it sets back to 0) runs the kernel that would have come next on
// that piece, with the same device functions (quantize32.cuh), so the same bits; where the tile kernel takes the
// step, qgemv_multi launches that kernel after it instead.
struct QgemvThen {
  enum Kind : int {
    NONE,
    // the gated activation of matrix 0's y (gate) and 1's (up; m alike, a multiple of 32), quantized per 32 into
    // xq, xd for the next product (act_mul_quantize); a piece: 32 outputs of a block's activation rows
    ACT_MUL,
    // RMSNorm (w, eps) of matrix 0's y rows (m a multiple of 32) into out, quantized per 32 into xq, xd
    // (rms_norm_quantize); a piece: a block's activation rows
    RMS_NORM,
  };
  Kind kind = NONE;
  bool silu = true;
  const float* w = nullptr;
  float eps = 0.0f;
  float* out = nullptr;
  int8_t* xq = nullptr;
  float* xd = nullptr;
  int* counters = nullptr;  // qgemv_then_counters(m, n) ints, zero before the first launch
};
// the counters a follow-up of products of m outputs, n activation rows, needs
inline int qgemv_then_counters(int m, int n) {
  return (m / 32 > 1 ? m / 32 : 1) * ((n + qgemv_row_group(n) - 1) / qgemv_row_group(n));
}
// the most activation rows whose RMSNorm the decode kernel's last block takes (row after row): past them the
// separate kernel's block per row is sooner
constexpr int QGEMV_THEN_NORM_ROWS = 2;

// activations quantized per 32 (quantize_x): xq [n][k] int8, xd [n][k / 32]
struct QuantX {
  const int8_t* q;
  const float* d;
  int k;
};

}  // namespace lll::cuda
