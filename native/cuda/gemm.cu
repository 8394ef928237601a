// The batched product and the embedding lookup on the device (device_ops.cuh), and their host test entry points
// (cuda_api.h).
//
// qgemm: y [n][m] = x [n][k] . W^T for any n, on tensor cores (WMMA 16x16x16, half inputs, float accumulators).
// A thread block of 8 warps computes a 64 (n) x 64 (m) tile of y: per 32-weight step of k it decodes the 64 x 32
// tile of W to half in shared memory (decode8 of dequant.cuh, 8 weights a thread), rounds the 64 x 32 tile of x to
// half beside it, and each warp multiplies a 16 (n) x 32 (m) piece of the output (two accumulators). Each thread
// fetches its share of the next step into registers while the warps multiply the current one (one tile buffer,
// two barriers a step). Out-of-range rows of W and x are zeros in shared memory; the results leave through a
// per-warp staging tile, written only where they fall inside y. The weight tile is the B operand, W^T: W [m][k]
// row-major is W^T [k][m] column-major, so it is loaded col_major with the tile's row pitch.
//
// Precision (the choice of f16 over bf16): both operands are f16, whose 11-bit significand holds dequantized
// weights far better than bf16's 8 bits (a Q8_0 weight d * q carries up to 18 significant bits, a Q4_K one more;
// f16 rounds them to within 2^-11 relative, bf16 only to 2^-8), and tensor-core products of f16 are exact in the
// float accumulators. f16's weakness is range, which matters for x only (normalised activations are small, but the
// input of ffn_down can reach 1e4 .. 1e5 in a few channels). So each x row is scaled by a power of two 2^-e_c
// chosen from its largest magnitude amax_c (amax_c 2^-e_c in [2^14, 2^15)) before rounding, and its outputs by
// 2^e_c after: exact operations, so
//   x: every finite x converts without overflow; |x| >= amax_c 2^-28 (the f16 normal range after scaling) is held
//      to within 2^-11 relative, smaller values to within amax_c 2^-39 absolute (2^-125 in the rows of amax_c <
//      2^-86, whose scale stops at 2^100).
//   W: dequantized weights are rounded to f16: within 2^-11 relative for 2^-14 <= |w| <= 65504, within 2^-25
//      absolute below that; |w| > 65504 (no quantized type's weights in practice) becomes inf.
// The scale costs one extra read of the block's 64 x rows (a max over each) before the product.
//
// dequant_rows: one thread per 8 weights of an output row, decode8 and one float product with the scale: the
// same bits as the CPU's dequantize followed by its embedding scale (cpu_stage.cpp).
#include "device_compat.cuh"
#ifndef LLL_CUDA_EMULATED
#include <mma.h>
#endif

#include <stdexcept>
#include <string>
#include <type_traits>

#include "cuda_api.h"
#include "dequant.cuh"
#include "device_array.cuh"
#include "device_ops.cuh"

namespace lll::cuda {
namespace {

constexpr int TILE = 64;             // output rows (n) and columns (m) of a thread block
constexpr int STEP = 32;             // weights of k per step
constexpr int PITCH = STEP + 8;      // halves per shared row: 80 bytes, staggers the banks; a multiple of 8 (WMMA)
constexpr int WARPS = 8;
constexpr int THREADS = 32 * WARPS;  // 64 rows x 4 parts of 8 weights: one decode8 per thread and step
constexpr int DEQ_THREADS = 128;     // dequant_rows: threads per block, 8 weights each

// ---- the types: one instantiation per type, picked once on the host ----

template <QType Q>
using Type = std::integral_constant<int, (int)Q>;

// calls f(Type<t>{}) for a type the device decodes (dequant.cuh); false for any other id
template <class F>
bool with_type(int type_id, F&& f) {
  switch ((QType)type_id) {
    case QType::F32: f(Type<QType::F32>{}); return true;
    case QType::F16: f(Type<QType::F16>{}); return true;
    case QType::BF16: f(Type<QType::BF16>{}); return true;
    case QType::Q4_0: f(Type<QType::Q4_0>{}); return true;
    case QType::Q4_1: f(Type<QType::Q4_1>{}); return true;
    case QType::Q5_0: f(Type<QType::Q5_0>{}); return true;
    case QType::Q5_1: f(Type<QType::Q5_1>{}); return true;
    case QType::Q8_0: f(Type<QType::Q8_0>{}); return true;
    case QType::Q2_K: f(Type<QType::Q2_K>{}); return true;
    case QType::Q3_K: f(Type<QType::Q3_K>{}); return true;
    case QType::Q4_K: f(Type<QType::Q4_K>{}); return true;
    case QType::Q5_K: f(Type<QType::Q5_K>{}); return true;
    case QType::Q6_K: f(Type<QType::Q6_K>{}); return true;
    case QType::IQ4_NL: f(Type<QType::IQ4_NL>{}); return true;
    case QType::IQ4_XS: f(Type<QType::IQ4_XS>{}); return true;
    default: return false;
  }
}

// ---- qgemm ----

// 2^e as a float, e in [-126, 127]
__device__ __forceinline__ float pow2(int e) { return __int_as_float((e + 127) << 23); }

// e_c of an x row from its largest magnitude (see the header): amax 2^-e in [2^14, 2^15), e >= -100 (a row of tiny
// values is scaled up by at most 2^100); 0 for a zero row or an infinite amax (inf and NaN then reach the output)
__device__ __forceinline__ int row_exponent(float amax) {
  if (!(amax > 0.0f) || isinf(amax)) return 0;
  int ex;
  frexpf(amax, &ex);  // amax = f 2^ex, f in [0.5, 1)
  return max(ex - 15, -100);
}

// down[r] = 2^-e, up[r] = 2^e for the block's x rows n0 + r (one warp a row)
__device__ void row_scales(const float* x, int n, int k, int n0, float* down, float* up) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int r = warp; r < TILE; r += WARPS) {
    float amax = 0.0f;
    if (n0 + r < n) {
      const float* xr = x + (size_t)(n0 + r) * k;
      for (int c = lane; c < k; c += 32) amax = fmaxf(amax, fabsf(xr[c]));
    }
    for (int o = 16; o; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    if (lane == 0) {
      const int e = row_exponent(amax);
      down[r] = pow2(-e);
      up[r] = pow2(e);
    }
  }
}

// One step's share of a thread, fetched (and decoded) into registers ahead of the step that stores it, so the
// next step's global reads overlap this step's products.
struct Fetched {
  uint4 w;     // weights k0 + 8 (t % 4) .. + 7 of W row m0 + t / 4 as 8 halves (zeros past m)
  half x[8];   // x[n0 + t / 32 + 8 i][k0 + t % 32] 2^-e as half, i < 8 (zeros past n or k)
};

template <int T>
__device__ __forceinline__ void fetch(const uint8_t* w, size_t row_bytes, int m, int k, const float* x, int n,
                                      int m0, int n0, int k0, const float* down, Fetched& f) {
  const int r = threadIdx.x / 4, part = threadIdx.x % 4;
  float v[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  if (m0 + r < m) decode8<T>(w + (size_t)(m0 + r) * row_bytes, k, k0 + 8 * part, v);
  __align__(16) half2 h[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) h[i] = __floats2half2_rn(v[2 * i], v[2 * i + 1]);
  f.w = *reinterpret_cast<const uint4*>(h);
  // lane c of warp t reads column c of rows t, t + 8, ...: each load a warp's 128 contiguous bytes
  const int c = threadIdx.x % 32;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int xr = threadIdx.x / 32 + WARPS * i;
    float xv = 0.0f;
    if (n0 + xr < n && k0 + c < k) xv = x[(size_t)(n0 + xr) * k + k0 + c] * down[xr];
    f.x[i] = __float2half_rn(xv);
  }
}

// the fetched share into the step's tiles: ws [64 W rows][PITCH], xs [64 x rows][PITCH] (k0 .. k0 + 31 each)
__device__ __forceinline__ void store(const Fetched& f, half* ws, half* xs) {
  *reinterpret_cast<uint4*>(ws + (threadIdx.x / 4) * PITCH + 8 * (threadIdx.x % 4)) = f.w;
#pragma unroll
  for (int i = 0; i < 8; ++i) xs[(threadIdx.x / 32 + WARPS * i) * PITCH + threadIdx.x % 32] = f.x[i];
}

// grid: (ceil(m / 64), ceil(n / 64)); THREADS threads
template <int T>
__global__ void __launch_bounds__(THREADS) qgemm_kernel(const uint8_t* w, size_t row_bytes, int m, int k,
                                                         const float* x, int n, float* y) {
  using namespace nvcuda;
  __shared__ __align__(32) half ws[TILE * PITCH];
  __shared__ __align__(32) half xs[TILE * PITCH];
  __shared__ __align__(32) float staging[WARPS][16 * 16];
  __shared__ float down[TILE], up[TILE];

  const int m0 = blockIdx.x * TILE, n0 = blockIdx.y * TILE;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wn = warp / 2;        // the warp's 16 rows of the tile's n: 16 wn ..
  const int wm = (warp % 2) * 2;  // its two 16-column blocks of the tile's m: 16 wm .., 16 (wm + 1) ..

  row_scales(x, n, k, n0, down, up);
  __syncthreads();

  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2];
  wmma::fill_fragment(acc[0], 0.0f);
  wmma::fill_fragment(acc[1], 0.0f);
  Fetched f;
  fetch<T>(w, row_bytes, m, k, x, n, m0, n0, 0, down, f);
  for (int k0 = 0; k0 < k; k0 += STEP) {
    store(f, ws, xs);
    __syncthreads();
    if (k0 + STEP < k) fetch<T>(w, row_bytes, m, k, x, n, m0, n0, k0 + STEP, down, f);
#pragma unroll
    for (int kk = 0; kk < STEP; kk += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> a;
      wmma::load_matrix_sync(a, xs + wn * 16 * PITCH + kk, PITCH);
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::col_major> b;
        wmma::load_matrix_sync(b, ws + (wm + j) * 16 * PITCH + kk, PITCH);
        wmma::mma_sync(acc[j], a, b, acc[j]);
      }
    }
    __syncthreads();
  }

  // y [n][m] = the accumulators 2^e_row, inside y only
  float* st = staging[warp];
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    wmma::store_matrix_sync(st, acc[j], 16, wmma::mem_row_major);
    __syncwarp();
    for (int e = lane; e < 16 * 16; e += 32) {
      const int r = wn * 16 + e / 16, c = (wm + j) * 16 + e % 16;
      if (n0 + r < n && m0 + c < m) y[(size_t)(n0 + r) * m + m0 + c] = st[e] * up[r];
    }
    __syncwarp();
  }
}

// ---- dequant_rows ----

// grid: (n, ceil(k / (8 DEQ_THREADS))); out row r = W row ids[r] times scale
template <int T>
__global__ void __launch_bounds__(DEQ_THREADS) dequant_rows_kernel(const uint8_t* w, size_t row_bytes, int k,
                                                                    const int32_t* ids, float scale, float* out) {
  const int r = blockIdx.x;
  const int i0 = (blockIdx.y * DEQ_THREADS + threadIdx.x) * 8;
  if (i0 >= k) return;
  float v[8];
  decode8<T>(w + (size_t)ids[r] * row_bytes, k, i0, v);
  float* o = out + (size_t)r * k + i0;
#pragma unroll
  for (int i = 0; i < 8; ++i)
    if (i0 + i < k) o[i] = __fmul_rn(v[i], scale);
}

// ---- host side ----

// the host entry points' checks of W: a type the device decodes, k whole blocks of it, rows of row_bytes >= the
// packed row and aligned as dequant.cuh reads them (4 bytes for F32, 2 for the rest), m >= 1 rows, n >= 1
// outputs; std::invalid_argument naming `what` and the fault otherwise. Returns the bytes the rows span (the last
// row's padding past its packed bytes is not read).
size_t check_shapes(const char* what, int type_id, size_t row_bytes, int m, int k, int n) {
  const std::string w(what);
  const TypeInfo* ti = type_info(type_id);
  if (!ti || !qgemm_supports(type_id))
    throw std::invalid_argument(w + ": type " + std::to_string(type_id) + " is not supported on CUDA");
  if (k < 1 || k % ti->block_size)
    throw std::invalid_argument(w + ": k must be a positive multiple of " + std::to_string(ti->block_size) + " for " +
                                ti->name + ", got " + std::to_string(k));
  const size_t packed = (size_t)(k / ti->block_size) * ti->type_size;
  if (row_bytes < packed)
    throw std::invalid_argument(w + ": row_bytes " + std::to_string(row_bytes) + " is less than a row of " +
                                std::to_string(k) + " " + ti->name + " weights (" + std::to_string(packed) + ")");
  const size_t align = ti->type == QType::F32 ? 4 : 2;
  if (row_bytes % align)
    throw std::invalid_argument(w + ": row_bytes " + std::to_string(row_bytes) + " is not a multiple of " +
                                std::to_string(align) + " (" + ti->name + " rows are read " + std::to_string(align) +
                                " bytes at a time)");
  if (m < 1) throw std::invalid_argument(w + ": m must be >= 1, got " + std::to_string(m));
  if (n < 1) throw std::invalid_argument(w + ": n must be >= 1, got " + std::to_string(n));
  return (size_t)(m - 1) * row_bytes + packed;
}


}  // namespace

bool qgemm_supports(int type_id) {
  return with_type(type_id, [](auto) {});
}

void qgemm(int type_id, const uint8_t* w, size_t row_bytes, int m, int k, const float* x, int n, float* y,
           cudaStream_t stream) {
  const dim3 grid((m + TILE - 1) / TILE, (n + TILE - 1) / TILE);
  const bool known = with_type(type_id, [&](auto t) {
    LLL_LAUNCH(qgemm_kernel<decltype(t)::value>, grid, THREADS, 0, stream)(w, row_bytes, m, k, x, n, y);
  });
  if (!known) throw std::invalid_argument("qgemm: type " + std::to_string(type_id) + " is not supported on CUDA");
  check_launch("qgemm launch");
}

void dequant_rows(int type_id, const uint8_t* w, size_t row_bytes, int k, const int32_t* ids, int n, float scale,
                  float* out, cudaStream_t stream) {
  const dim3 grid(n, (k + 8 * DEQ_THREADS - 1) / (8 * DEQ_THREADS));
  const bool known = with_type(type_id, [&](auto t) {
    LLL_LAUNCH(dequant_rows_kernel<decltype(t)::value>, grid, DEQ_THREADS, 0, stream)(w, row_bytes, k, ids, scale, out);
  });
  if (!known)
    throw std::invalid_argument("dequant_rows: type " + std::to_string(type_id) + " is not supported on CUDA");
  check_launch("dequant_rows launch");
}

void qgemm_host(int type_id, const uint8_t* w, size_t row_bytes, int m, int k, const float* x, int n, float* y) {
  DeviceArray<uint8_t> dw(w, check_shapes("qgemm", type_id, row_bytes, m, k, n));
  DeviceArray<float> dx(x, (size_t)n * k), dy((size_t)n * m);
  qgemm(type_id, dw.p, row_bytes, m, k, dx.p, n, dy.p, nullptr);
  check(cudaDeviceSynchronize(), "qgemm");
  dy.copy_out(y, (size_t)n * m);
}

void dequant_rows_host(int type_id, const uint8_t* w, size_t row_bytes, int m, int k, const int32_t* ids, int n,
                       float scale, float* out) {
  const size_t span = check_shapes("dequant_rows", type_id, row_bytes, m, k, n);
  for (int i = 0; i < n; ++i)
    if (ids[i] < 0 || ids[i] >= m)
      throw std::invalid_argument("dequant_rows: ids[" + std::to_string(i) + "] = " + std::to_string(ids[i]) +
                                  " is not a row of the " + std::to_string(m) + " rows of W");
  DeviceArray<uint8_t> dw(w, span);
  DeviceArray<int32_t> dids(ids, (size_t)n);
  DeviceArray<float> dout((size_t)n * k);
  dequant_rows(type_id, dw.p, row_bytes, k, dids.p, n, scale, dout.p, nullptr);
  check(cudaDeviceSynchronize(), "dequant_rows");
  dout.copy_out(out, (size_t)n * k);
}

}  // namespace lll::cuda
