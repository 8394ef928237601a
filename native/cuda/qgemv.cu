// The invariant products on the device: y [n][m] = x [n][k] . W^T for quantized weight rows, any n: decode's
// kernel, run for every step size (a thread block takes 8 activation rows, 32 past 8; more rows, more blocks), so
// that a row's bits never depend on the step (device_ops.cuh).
//
// Activations are quantized per 32 as on the CPU (x ~= dx * xq, xq int8; kernels.h), by quantize_x: one warp per
// 32-block. The product: one warp per weight row, lane i taking the row's 32-weight steps i, i + 32, ...; a step's
// weights are decoded once into eight 32-bit words of four bytes (weights 4j .. 4j + 3 in activation order) and
// multiplied with each activation row by __dp4a (exact int32 sums), scaled per group as the CPU's canonical
// terms (kernels.h: isum_g * s_g * dx_g, plus m_g * dx_g * sum(xq) for types with a min, minus the offset times
// sum(xq) for the symmetric ones); the lanes' float sums meet in a warp shuffle reduction. The order of that
// reduction differs from the CPU's, so results agree to rounding, not bit for bit (tests/native/test_cuda.py).
//
// Block layouts (quant_formats.h) are byte-identical to GGUF; blocks of 18, 22, 34 and 210 bytes are only 2-byte
// aligned, so weight words are assembled from 16-bit loads.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "../quant_formats.h"
#include "cuda_api.h"
#include "dequant.cuh"
#include "device_array.cuh"
#include "device_ops.cuh"
#include "quantize32.cuh"

namespace lll::cuda {
namespace {

constexpr int MAXN = QGEMV_MAX_N;
constexpr int WIDE = 32;  // activation rows a block takes in steps of more than MAXN
constexpr int ROWS_PER_BLOCK = 4;  // warps per thread block, one weight row each

__device__ __forceinline__ float f16(uint16_t h) { return __half2float(__ushort_as_half(h)); }
// the 32-bit word at a 2-byte aligned address
__device__ __forceinline__ int word2(const uint8_t* p) {
  const uint16_t* h = reinterpret_cast<const uint16_t*>(p);
  return (int)((uint32_t)h[0] | ((uint32_t)h[1] << 16));
}
__device__ __forceinline__ int word4(const uint8_t* p) { return *reinterpret_cast<const int*>(p); }
// bits 0..3 of h -> bit 4 of bytes 0..3
__device__ __forceinline__ int spread_bit4(uint32_t h) {
  return (int)(((h & 1u) << 4) | ((h & 2u) << 11) | ((h & 4u) << 18) | ((h & 8u) << 25));
}

// activations: xq [n][k] int8, xd [n][k / 32]
__global__ void quantize_x_kernel(const float* x, int k, int8_t* xq, float* xd) {
  const int c = blockIdx.x, b = blockIdx.y, i = threadIdx.x;  // row c (up to 2^31 - 1), block b
  const size_t at = (size_t)c * k + (size_t)b * 32 + i;
  quantize32(x[at], i, xq + at, xd + (size_t)c * (k / 32) + b);
}

struct X {
  const int8_t* q;
  const float* d;
  int k;
};

// activation row c, step s against the step's weight words u: sum(u * xq) and sum(xq), exact int32
__device__ __forceinline__ void dot32(const int u[8], const X& x, int c, int s, int& sum, int& xs) {
  const int* xq = reinterpret_cast<const int*>(x.q + (size_t)c * x.k + 32 * s);
  sum = 0;
  xs = 0;
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const int v = xq[j];
    sum = __dp4a(u[j], v, sum);
    xs = __dp4a(0x01010101, v, xs);
  }
}

// per type: Step<T>::run<NC> decodes step s of the row into u[8], then for every activation row c < n (n <= NC) adds
// the step's terms to acc[c]: the same operations for row c whatever NC and n are
template <int T>
struct Step;

template <>
struct Step<(int)QType::Q4_0> {
  template <int NC>
  __device__ __forceinline__ static void run(const uint8_t* row, int s, const X& x, int n, float* acc) {
    const uint8_t* b = row + (size_t)s * sizeof(block_q4_0);
    const float d = f16(*reinterpret_cast<const uint16_t*>(b));
    int u[8];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int q = word2(b + 2 + 4 * j);
      u[j] = q & 0x0F0F0F0F;
      u[j + 4] = (q >> 4) & 0x0F0F0F0F;
    }
#pragma unroll
    for (int c = 0; c < NC; ++c) {
      if (c >= n) break;
      int sum, xs;
      dot32(u, x, c, s, sum, xs);
      acc[c] += (float)(sum - 8 * xs) * (d * x.d[(size_t)c * (x.k / 32) + s]);
    }
  }
};

template <>
struct Step<(int)QType::Q4_1> {
  template <int NC>
  __device__ __forceinline__ static void run(const uint8_t* row, int s, const X& x, int n, float* acc) {
    const uint8_t* b = row + (size_t)s * sizeof(block_q4_1);
    const float d = f16(*reinterpret_cast<const uint16_t*>(b)), m = f16(*reinterpret_cast<const uint16_t*>(b + 2));
    int u[8];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int q = word4(b + 4 + 4 * j);
      u[j] = q & 0x0F0F0F0F;
      u[j + 4] = (q >> 4) & 0x0F0F0F0F;
    }
#pragma unroll
    for (int c = 0; c < NC; ++c) {
      if (c >= n) break;
      int sum, xs;
      dot32(u, x, c, s, sum, xs);
      const float dx = x.d[(size_t)c * (x.k / 32) + s];
      acc[c] += (float)sum * (d * dx) + m * (dx * (float)xs);
    }
  }
};

template <>
struct Step<(int)QType::Q5_0> {
  template <int NC>
  __device__ __forceinline__ static void run(const uint8_t* row, int s, const X& x, int n, float* acc) {
    const uint8_t* b = row + (size_t)s * sizeof(block_q5_0);
    const float d = f16(*reinterpret_cast<const uint16_t*>(b));
    const uint32_t qh = (uint32_t)word2(b + 2);
    int u[8];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int q = word2(b + 6 + 4 * j);
      u[j] = (q & 0x0F0F0F0F) | spread_bit4(qh >> (4 * j));
      u[j + 4] = ((q >> 4) & 0x0F0F0F0F) | spread_bit4(qh >> (16 + 4 * j));
    }
#pragma unroll
    for (int c = 0; c < NC; ++c) {
      if (c >= n) break;
      int sum, xs;
      dot32(u, x, c, s, sum, xs);
      acc[c] += (float)(sum - 16 * xs) * (d * x.d[(size_t)c * (x.k / 32) + s]);
    }
  }
};

template <>
struct Step<(int)QType::Q8_0> {
  template <int NC>
  __device__ __forceinline__ static void run(const uint8_t* row, int s, const X& x, int n, float* acc) {
    const uint8_t* b = row + (size_t)s * sizeof(block_q8_0);
    const float d = f16(*reinterpret_cast<const uint16_t*>(b));
    int u[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) u[j] = word2(b + 2 + 4 * j);
#pragma unroll
    for (int c = 0; c < NC; ++c) {
      if (c >= n) break;
      const int* xq = reinterpret_cast<const int*>(x.q + (size_t)c * x.k + 32 * s);
      int sum = 0;
#pragma unroll
      for (int j = 0; j < 8; ++j) sum = __dp4a(u[j], xq[j], sum);
      acc[c] += (float)sum * (d * x.d[(size_t)c * (x.k / 32) + s]);
    }
  }
};

template <>
struct Step<(int)QType::Q4_K> {
  template <int NC>
  __device__ __forceinline__ static void run(const uint8_t* row, int s, const X& x, int n, float* acc) {
    const uint8_t* b = row + (size_t)(s / 8) * sizeof(block_q4_K);
    // step g of the super-block is its group g: low nibbles of qs[32 (g/2) ..] (even g), high (odd)
    const int g = s % 8;
    const float d = f16(*reinterpret_cast<const uint16_t*>(b)), dmin = f16(*reinterpret_cast<const uint16_t*>(b + 2));
    int sc, mn;
    scale_min_k4(b + 4, g, sc, mn);
    const float ds = d * (float)sc, dm = dmin * (float)mn;
    const uint8_t* qs = b + 16 + 32 * (g / 2);
    const int shift = 4 * (g & 1);
    int u[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) u[j] = (word4(qs + 4 * j) >> shift) & 0x0F0F0F0F;
#pragma unroll
    for (int c = 0; c < NC; ++c) {
      if (c >= n) break;
      int sum, xs;
      dot32(u, x, c, s, sum, xs);
      const float dx = x.d[(size_t)c * (x.k / 32) + s];
      acc[c] += (float)sum * (ds * dx) - dm * (dx * (float)xs);
    }
  }
};

template <>
struct Step<(int)QType::Q6_K> {
  template <int NC>
  __device__ __forceinline__ static void run(const uint8_t* row, int s, const X& x, int n, float* acc) {
    const uint8_t* b = row + (size_t)(s / 8) * sizeof(block_q6_K);
    // step q = 4h + l of the super-block: weights 128h + 32l + i; low 4 bits from ql[64h + 32(l & 1) + i] (high
    // nibble for l >= 2), bits 4..5 from bits 2l, 2l + 1 of qh[32h + i]; groups of 16: scales[2q], scales[2q + 1]
    const int q = s % 8, h = q / 4, l = q % 4;
    const uint8_t* ql = b + 64 * h + 32 * (l & 1);
    const uint8_t* qh = b + 128 + 32 * h;
    const int8_t* scales = reinterpret_cast<const int8_t*>(b + 192);
    const float d = f16(*reinterpret_cast<const uint16_t*>(b + 208));
    const float s0 = d * (float)scales[2 * q], s1 = d * (float)scales[2 * q + 1];
    const int lshift = 4 * (l >= 2), hshift = 2 * l;
    int u[8];
#pragma unroll
    for (int j = 0; j < 8; ++j)
      u[j] = ((word2(ql + 4 * j) >> lshift) & 0x0F0F0F0F) | (((word2(qh + 4 * j) >> hshift) & 0x03030303) << 4);
#pragma unroll
    for (int c = 0; c < NC; ++c) {
      if (c >= n) break;
      const int* xq = reinterpret_cast<const int*>(x.q + (size_t)c * x.k + 32 * s);
      int sum0 = 0, sum1 = 0, xs0 = 0, xs1 = 0;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int v0 = xq[j], v1 = xq[j + 4];
        sum0 = __dp4a(u[j], v0, sum0);
        xs0 = __dp4a(0x01010101, v0, xs0);
        sum1 = __dp4a(u[j + 4], v1, sum1);
        xs1 = __dp4a(0x01010101, v1, xs1);
      }
      const float dx = x.d[(size_t)c * (x.k / 32) + s];
      acc[c] += dx * ((float)(sum0 - 32 * xs0) * s0 + (float)(sum1 - 32 * xs1) * s1);
    }
  }
};

// The products of one launch: matrix i takes the thread blocks [end[i - 1], end[i]) of the grid's x (end[-1] = 0)
struct Mats {
  QgemvMat m[QGEMV_MAX_MATS];
  int end[QGEMV_MAX_MATS];
  int count;
};

// Weight row `row` of M (a warp) times activation rows c0 = NC blockIdx.y .. c0 + NC - 1 (those below n); NC = 8
// for decode-sized steps, 32 beyond (each step's weights decoded once for 32 rows). Every activation row's
// accumulator takes the same operations whichever NC, slot of acc, neighbours and launch it has, so the bits of
// y [c][row] depend on x [c] and W [row] only.
template <int T, int NC>
__device__ __forceinline__ void qgemv_row(const QgemvMat& M, int row, const X& x, int n) {
  const int c0 = blockIdx.y * NC, nc = min(NC, n - c0);
  const X xc{x.q + (size_t)c0 * x.k, x.d + (size_t)c0 * (x.k / 32), x.k};
  const uint8_t* r = M.w + (size_t)row * M.row_bytes;
  float acc[NC];
#pragma unroll
  for (int c = 0; c < NC; ++c) acc[c] = 0.0f;
  for (int s = threadIdx.x; s < x.k / 32; s += 32) Step<T>::template run<NC>(r, s, xc, nc, acc);
#pragma unroll
  for (int c = 0; c < NC; ++c) {
    if (c >= nc) break;
    float v = acc[c];
    for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (threadIdx.x == 0) {  // add_bias's one addition, then add's (the residual stream's h += a)
      float* out = M.y + (size_t)(c0 + c) * M.m + row;
      const float t = M.bias ? v + M.bias[row] : v;
      *out = M.add_to_y ? *out + t : t;
    }
  }
}

// Thread block (blockIdx.x, blockIdx.y): rows 4 b .. 4 b + 3 (a warp each) of the matrix whose blocks hold
// blockIdx.x (b counted from its first), against the activation rows of blockIdx.y; the type's step functions
// picked per block (uniform, so no divergence)
template <int NC>
__global__ void __launch_bounds__(32 * ROWS_PER_BLOCK) qgemv_kernel(Mats mats, X x, int n) {
  int i = 0;
  while (i + 1 < mats.count && (int)blockIdx.x >= mats.end[i]) ++i;
  const QgemvMat& M = mats.m[i];
  const int row = ((int)blockIdx.x - (i ? mats.end[i - 1] : 0)) * ROWS_PER_BLOCK + threadIdx.y;
  if (row >= M.m) return;
  switch ((QType)M.type) {
    case QType::Q4_0: qgemv_row<(int)QType::Q4_0, NC>(M, row, x, n); break;
    case QType::Q4_1: qgemv_row<(int)QType::Q4_1, NC>(M, row, x, n); break;
    case QType::Q5_0: qgemv_row<(int)QType::Q5_0, NC>(M, row, x, n); break;
    case QType::Q8_0: qgemv_row<(int)QType::Q8_0, NC>(M, row, x, n); break;
    case QType::Q4_K: qgemv_row<(int)QType::Q4_K, NC>(M, row, x, n); break;
    case QType::Q6_K: qgemv_row<(int)QType::Q6_K, NC>(M, row, x, n); break;
    default: break;  // refused on the host
  }
}


}  // namespace

bool qgemv_supports(int type_id) {
  switch ((QType)type_id) {
    case QType::Q4_0: case QType::Q4_1: case QType::Q5_0: case QType::Q8_0: case QType::Q4_K: case QType::Q6_K:
      return true;
    default:
      return false;
  }
}

void quantize_x(const float* x, int n, int k, int8_t* xq, float* xd, cudaStream_t stream) {
  quantize_x_kernel<<<dim3(n, k / 32), 32, 0, stream>>>(x, k, xq, xd);
  check_launch("quantize_x");
}

void qgemv_multi(const QgemvMat* mats, int n_mats, int k, const int8_t* xq, const float* xd, int n,
                 cudaStream_t stream) {
  if (n < 1 || n > QGEMV_MAX_ROWS)
    throw std::invalid_argument("qgemv: n must be in [1, " + std::to_string(QGEMV_MAX_ROWS) + "], got " +
                                std::to_string(n));
  if (n_mats < 1 || n_mats > QGEMV_MAX_MATS)
    throw std::invalid_argument("qgemv: 1 to " + std::to_string(QGEMV_MAX_MATS) + " matrices a launch, got " +
                                std::to_string(n_mats));
  Mats ms{};
  ms.count = n_mats;
  int blocks = 0;
  for (int i = 0; i < n_mats; ++i) {
    if (!qgemv_supports(mats[i].type))
      throw std::invalid_argument("qgemv: type " + std::to_string(mats[i].type) + " is not supported on CUDA");
    ms.m[i] = mats[i];
    blocks += (mats[i].m + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK;
    ms.end[i] = blocks;
  }
  const X xs{xq, xd, k};
  const int nc = n > MAXN ? WIDE : MAXN;  // activation rows a block takes
  const dim3 grid(blocks, (n + nc - 1) / nc), block(32, ROWS_PER_BLOCK);
  if (nc == WIDE) qgemv_kernel<WIDE><<<grid, block, 0, stream>>>(ms, xs, n);
  else qgemv_kernel<MAXN><<<grid, block, 0, stream>>>(ms, xs, n);
  check_launch("qgemv");
}

void qgemv(int type_id, const uint8_t* w, size_t row_bytes, int m, int k, const int8_t* xq, const float* xd, int n,
           float* y, const float* bias, bool add_to_y, cudaStream_t stream) {
  const QgemvMat one{type_id, w, row_bytes, m, y, bias, add_to_y};
  qgemv_multi(&one, 1, k, xq, xd, n, stream);
}

void qgemv_host(int type_id, const uint8_t* w, size_t row_bytes, int m, int k, const float* x, int n, float* y) {
  if (!qgemv_supports(type_id)) throw std::invalid_argument("qgemv: type " + std::to_string(type_id) + " is not supported on CUDA");
  if (n < 1 || n > QGEMV_MAX_ROWS)
    throw std::invalid_argument("qgemv: n must be in [1, " + std::to_string(QGEMV_MAX_ROWS) + "], got " +
                                std::to_string(n));
  if (m < 1 || k < 32 || k % 32) throw std::invalid_argument("qgemv: k must be a positive multiple of 32");
  const TypeInfo* ti = type_info(type_id);
  const size_t packed = (size_t)(k / ti->block_size) * ti->type_size, bytes = (size_t)(m - 1) * row_bytes + packed;
  // the alignment the step reads at: 32-bit words in Q4_1 and Q4_K blocks, 16-bit halves in the rest
  const size_t align = type_id == (int)QType::Q4_1 || type_id == (int)QType::Q4_K ? 4 : 2;
  if (k % ti->block_size || row_bytes < packed || row_bytes % align)
    throw std::invalid_argument("qgemv: rows of " + std::to_string(row_bytes) + " bytes do not hold whole " +
                                std::to_string(align) + "-byte aligned rows of " + std::to_string(k) + " " + ti->name +
                                " weights");
  DeviceArray<uint8_t> dw(w, bytes);
  DeviceArray<float> dx(x, (size_t)n * k), dy((size_t)n * m), dd((size_t)n * (k / 32));
  DeviceArray<int8_t> dq((size_t)n * k);
  quantize_x(dx.p, n, k, dq.p, dd.p, nullptr);
  qgemv(type_id, dw.p, row_bytes, m, k, dq.p, dd.p, n, dy.p, nullptr, false, nullptr);
  dy.copy_out(y, (size_t)n * m);
}

}  // namespace lll::cuda
