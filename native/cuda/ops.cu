// The decoder block's elementwise and per-row ops on the device: twins of ops.h (rms_norm, rope, silu_mul,
// gelu_tanh_mul, softcap) plus the glue of the step (bias and residual adds, gathering the logits rows). The CPU
// functions are the reference; reductions here sum in a different order (float per thread, then a tree), so
// results agree to rounding. rms_norm sums squares in double as the CPU does.
#include "device_compat.cuh"

#include <stdexcept>

#include "device_ops.cuh"
#include "quantize32.cuh"
#include "rope_pair.cuh"

namespace lll::cuda {
namespace {

constexpr int THREADS = 256;

int blocks_for(size_t n) { return (int)((n + THREADS - 1) / THREADS); }

// one block per row: out[r] = x[r] * (1 / sqrt(mean(x[r]^2) + eps)) * w; with xq (n a multiple of 32, so that
// values 32j .. 32j + 31 fall to one warp), also out[r]'s quantization per 32 (quantize_x's bits)
__global__ void rms_norm_kernel(const float* x, const float* w, int n, float eps, float* out, int8_t* xq, float* xd) {
  __shared__ double part[RMS_PARTS];
  const size_t at = (size_t)blockIdx.x * n;
  rms_norm_row(x + at, w, n, eps, out + at, xq ? xq + at : nullptr, xq ? xd + at / 32 : nullptr, threadIdx.x, THREADS,
               part);
}

__global__ void add_bias_kernel(float* y, const float* bias, int rows, int n) {
  const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < (size_t)rows * n) y[i] += bias[i % n];
}

__global__ void feed_tokens_kernel(int32_t* ids, int T, const int32_t* fed) {
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t < T && ids[t] < 0) ids[t] = fed[-ids[t] - 1];
}

__global__ void add_kernel(float* h, const float* a, size_t n) {
  const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) h[i] += a[i];
}

// x [T][n_heads][head_dim], then y [T][y_heads][head_dim] (y_heads 0: none); thread per (row, head, pair), the
// threads past x's taking y's
__global__ void rope_kernel(float* x, int T, int n_heads, float* y, int y_heads, int head_dim, int n_rot, bool neox,
                            const float* cs, const float* sn) {
  const int half = n_rot / 2;
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  const size_t nx = (size_t)T * n_heads * half;
  if (i >= nx) {
    i -= nx;
    x = y;
    n_heads = y_heads;
  }
  if (i >= (size_t)T * n_heads * half) return;
  const int p = (int)(i % half);
  const size_t th = i / half;  // row * n_heads + head
  const int t = (int)(th / n_heads);
  float* xh = x + th * head_dim;
  const int ia = neox ? p : 2 * p, ib = neox ? p + half : 2 * p + 1;
  const float a = xh[ia], b = xh[ib], c = cs[(size_t)t * half + p], s = sn[(size_t)t * half + p];
  xh[ia] = rope_first(a, b, c, s);
  xh[ib] = rope_second(a, b, c, s);
}

__global__ void act_mul_kernel(float* g, const float* u, size_t n, bool silu) {
  const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) g[i] = act_times(g[i], u[i], silu);
}

// act_mul's values, quantized per 32 instead of stored: a warp per 32-block
__global__ void act_mul_quantize_kernel(const float* g, const float* u, size_t n, bool silu, int8_t* xq, float* xd) {
  const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) quantize32(act_times(g[i], u[i], silu), (int)(i % 32), xq + i, xd + i / 32);
}

__global__ void softcap_kernel(float* x, size_t n, float cap) {
  const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = cap * tanhf(x[i] / cap);
}

__global__ void gather_rows_kernel(const float* x, const int32_t* rows, int n, int d, float* out) {
  const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < (size_t)n * d) out[i] = x[(size_t)rows[i / d] * d + i % d];
}

}  // namespace

void rms_norm(const float* x, const float* w, int rows, int n, float eps, float* out, cudaStream_t stream) {
  if (rows <= 0) return;
  LLL_LAUNCH(rms_norm_kernel, rows, THREADS, 0, stream)(x, w, n, eps, out, nullptr, nullptr);
  check_launch("rms_norm");
}

void rms_norm_quantize(const float* x, const float* w, int rows, int n, float eps, float* out, int8_t* xq, float* xd,
                       cudaStream_t stream) {
  if (rows <= 0) return;
  if (n % 32) throw std::invalid_argument("rms_norm_quantize: n must be a multiple of 32");
  LLL_LAUNCH(rms_norm_kernel, rows, THREADS, 0, stream)(x, w, n, eps, out, xq, xd);
  check_launch("rms_norm_quantize");
}

void add_bias(float* y, const float* bias, int rows, int n, cudaStream_t stream) {
  if (!bias || rows <= 0) return;
  LLL_LAUNCH(add_bias_kernel, blocks_for((size_t)rows * n), THREADS, 0, stream)(y, bias, rows, n);
  check_launch("add_bias");
}

void feed_tokens(int32_t* ids, int T, const int32_t* fed, cudaStream_t stream) {
  LLL_LAUNCH(feed_tokens_kernel, blocks_for((size_t)T), THREADS, 0, stream)(ids, T, fed);
  check_launch("feed_tokens");
}

void add(float* h, const float* a, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  LLL_LAUNCH(add_kernel, blocks_for(n), THREADS, 0, stream)(h, a, n);
  check_launch("add");
}

void rope(float* x, int x_heads, float* y, int y_heads, int T, int head_dim, int n_rot, bool neox, const float* cs,
          const float* sn, cudaStream_t stream) {
  const size_t n = (size_t)T * (x_heads + y_heads) * (n_rot / 2);
  if (n == 0) return;
  LLL_LAUNCH(rope_kernel, blocks_for(n), THREADS, 0, stream)(x, T, x_heads, y, y_heads, head_dim, n_rot, neox, cs, sn);
  check_launch("rope");
}

void act_mul(float* g, const float* u, size_t n, bool silu, cudaStream_t stream) {
  if (n == 0) return;
  LLL_LAUNCH(act_mul_kernel, blocks_for(n), THREADS, 0, stream)(g, u, n, silu);
  check_launch("act_mul");
}

void act_mul_quantize(const float* g, const float* u, size_t n, bool silu, int8_t* xq, float* xd,
                      cudaStream_t stream) {
  if (n == 0) return;
  if (n % 32) throw std::invalid_argument("act_mul_quantize: n must be a multiple of 32");
  LLL_LAUNCH(act_mul_quantize_kernel, blocks_for(n), THREADS, 0, stream)(g, u, n, silu, xq, xd);
  check_launch("act_mul_quantize");
}

void softcap(float* x, size_t n, float cap, cudaStream_t stream) {
  if (n == 0) return;
  LLL_LAUNCH(softcap_kernel, blocks_for(n), THREADS, 0, stream)(x, n, cap);
  check_launch("softcap");
}

void gather_rows(const float* x, const int32_t* rows, int n, int d, float* out, cudaStream_t stream) {
  if (n <= 0) return;
  LLL_LAUNCH(gather_rows_kernel, blocks_for((size_t)n * d), THREADS, 0, stream)(x, rows, n, d, out);
  check_launch("gather_rows");
}

}  // namespace lll::cuda
