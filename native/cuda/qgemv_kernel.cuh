// The decode product's kernels (launched by qgemv.cu; the tests also run this source on the CPU): activations
// quantized per 32, then y [n][m] = x . W^T by a warp per weight row. Lane l takes step 32C + l of each chunk C of
// 32 steps (qstep.cuh): decodes it once into eight words of int8 weights, multiplies them with each activation
// row's int8 values by __dp4a (exact int32 sums), turns the sums into the step's term (step_term), and the warp's
// xor-shuffle tree at offsets 1, 2, 4, 8, 16 sums the chunk's 32 terms pairwise in step order (8 activation rows at
// once where a block has several: chunk_sums); the chunk sums are added to the output in chunk order. That is the
// order of mmq_kernel.cuh, so the two give the same bits. A block of several activation rows finds each (row, step)'s
// sums of int8 activations once for its four weight rows, in shared memory (qgemv_row).
#pragma once
#include <cstdint>

#include "../quant_formats.h"
#include "device_compat.cuh"
#include "qmat.cuh"
#include "qstep.cuh"
#include "quantize32.cuh"

namespace lll::cuda {

constexpr int QGEMV_WARPS = 4;  // warps per thread block, one weight row each
static_assert(32 % QGEMV_WARPS == 0, "an ACT_MUL piece is 32 outputs: whole thread blocks of each matrix");

// activations: xq [n][k] int8, xd [n][k / 32]; grid (n, k / 32), a warp each
__global__ void quantize_x_kernel(const float* x, int k, int8_t* xq, float* xd) {
  const int c = blockIdx.x, b = blockIdx.y, i = threadIdx.x;  // row c (up to 2^31 - 1), block b
  const size_t at = (size_t)c * k + (size_t)b * 32 + i;
  quantize32(x[at], i, xq + at, xd + (size_t)c * (k / 32) + b);
}

// The products of one launch: matrix i takes the thread blocks [end[i - 1], end[i]) of the grid's x (end[-1] = 0)
struct QgemvMats {
  QgemvMat m[QGEMV_MAX_MATS];
  int end[QGEMV_MAX_MATS];
  int count;
};

// The chunk sums of R activation rows at once (R a power of two up to 8), with the xor tree's pairings: at offsets
// 1, 2, .. R / 2 each lane keeps one of every two rows it holds (the offset's bit of its lane picks which) and trades
// the other for its partner's partial sum of the kept one, so its R values become one; that one then takes the
// offsets R .. 16. Every addition meets the two partial sums the tree meets, so row r's chunk sum, found in the lanes
// whose low log2 R bits are r, has the tree's bits: 2R - 1 + 5 - log2 R shuffles for R rows instead of 5 R.
template <int R>
__device__ __forceinline__ float chunk_sums(float (&v)[R], int lane) {
#pragma unroll
  for (int o = 1; o < R; o <<= 1) {
    const bool hi = (lane & o) != 0;
#pragma unroll
    for (int i = 0; i < R / (2 * o); ++i) {
      const float keep = hi ? v[2 * i + 1] : v[2 * i], give = hi ? v[2 * i] : v[2 * i + 1];
      v[i] = __fadd_rn(keep, __shfl_xor_sync(0xffffffffu, give, o));
    }
  }
  float t = v[0];
#pragma unroll
  for (int o = R; o < 32; o <<= 1) t = __fadd_rn(t, __shfl_xor_sync(0xffffffffu, t, o));
  return t;
}

// Weight row `row` of M (a warp) times activation rows c0 .. c0 + nc - 1 (nc <= NC): NC = 8 for decode-sized steps,
// 32 beyond (each step's weights decoded once for 32 rows), 1 for a block of one row. The rows' chunk sums meet R at
// a time (chunk_sums); every activation row's output takes the same operations whichever NC, R, slot, neighbours
// and launch it has.
// The types whose terms read the sums of a step's int8 activations (x0, x1: all but Q8_0) take them, in blocks of
// several rows (NC > 1), from shared memory: the block's warps find each (row, step)'s once per chunk, a quarter of
// the rows each, where every warp had found all of them for its own weight row (8 of a row's 16 __dp4a a step).
// The sums are exact integers, so the bits are those of the sums found in place. Then every warp of the block must
// run the chunks' barriers: `active` is false for a warp past the matrix's rows, which computes nothing else.
// xsum: the block's shared [2][NC][32] ints (x0 and x1 of row c, step base + lane), when NC > 1 and XS (false: each
// warp finds its rows' sums itself, as before; LOCALLLM_CUDA_XSUM=0 launches that, for measuring the difference)
template <int T, int NC, int R, bool XS>
__device__ __forceinline__ void qgemv_row(const QgemvMat& M, int row, bool active, const QuantX& x, int c0, int nc,
                                          int (*xsum)[NC][32]) {
  static_assert(NC % R == 0, "whole groups of R rows");
  constexpr int G = NC / R;
  constexpr bool SHARED_SUMS = XS && NC > 1 && T != (int)QType::Q8_0;
  const int steps = x.k / 32, lane = threadIdx.x;
  const int8_t* xq = x.q + (size_t)c0 * x.k;
  const float* xd = x.d + (size_t)c0 * steps;
  const uint8_t* r = M.w + (size_t)row * M.row_bytes;
  float acc[G];  // group g's row g R + lane % R
#pragma unroll
  for (int g = 0; g < G; ++g) acc[g] = 0.0f;
  for (int base = 0; base < steps; base += 32) {  // block-uniform: every warp meets the barriers
    const int s = base + lane;
    if constexpr (SHARED_SUMS) {
      for (int c = threadIdx.y; c < nc; c += QGEMV_WARPS) {
        int x0 = 0, x1 = 0;
        if (s < steps) {
          const int* v = reinterpret_cast<const int*>(xq + (size_t)c * x.k + 32 * s);
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            x0 = __dp4a(0x01010101, v[j], x0);
            x1 = __dp4a(0x01010101, v[j + 4], x1);
          }
        }
        xsum[0][c][lane] = x0;
        xsum[1][c][lane] = x1;
      }
      __syncthreads();
    }
    if (active) {  // a warp past the matrix's rows only helps with the sums; every warp meets the barrier below
      int u[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      StepScales sc{0.0f, 0.0f};
      if (s < steps) decode_step<T>(r, s, u, sc);
#pragma unroll
      for (int g = 0; g < G; ++g) {
        if (g * R >= nc) break;
        float t[R];
#pragma unroll
        for (int i = 0; i < R; ++i) {
          const int c = g * R + i;
          t[i] = 0.0f;  // a short last chunk's missing terms, and the rows past nc
          if (c < nc && s < steps) {
            const int* v = reinterpret_cast<const int*>(xq + (size_t)c * x.k + 32 * s);
            int s0 = 0, s1 = 0, x0 = 0, x1 = 0;
#pragma unroll
            for (int j = 0; j < 4; ++j) {
              s0 = __dp4a(u[j], v[j], s0);
              s1 = __dp4a(u[j + 4], v[j + 4], s1);
              if constexpr (!SHARED_SUMS && T != (int)QType::Q8_0) {
                x0 = __dp4a(0x01010101, v[j], x0);
                x1 = __dp4a(0x01010101, v[j + 4], x1);
              }
            }
            if constexpr (SHARED_SUMS) {
              x0 = xsum[0][c][lane];
              x1 = xsum[1][c][lane];
            }
            t[i] = step_term<T>(s0, s1, x0, x1, sc, xd[(size_t)c * steps + s]);
          }
        }
        acc[g] = __fadd_rn(acc[g], chunk_sums<R>(t, lane));
      }
    }
    if constexpr (SHARED_SUMS) __syncthreads();  // the sums are read: the next chunk's may be written
  }
  if (active && lane < R) {
#pragma unroll
    for (int g = 0; g < G; ++g) {
      const int c = g * R + lane;
      if (c >= nc) break;
      // add_bias's one addition, then add's (the residual stream's h += a)
      float* out = M.y + (size_t)(c0 + c) * M.m + row;
      const float t = M.bias ? __fadd_rn(acc[g], M.bias[row]) : acc[g];
      *out = M.add_to_y ? __fadd_rn(*out, t) : t;
    }
  }
}

// a weight row against this block's activation rows: a block of one row alone, the others 8 rows at a time; every
// warp of the block calls it (active: its row is one of the matrix's), so that the barriers of several rows' blocks
// are met by all
template <int T, int NC, bool XS>
__device__ __forceinline__ void qgemv_rows(const QgemvMat& M, int row, bool active, const QuantX& x, int n,
                                           int (*xsum)[NC][32]) {
  const int c0 = blockIdx.y * NC, nc = min(NC, n - c0);
  if (nc == 1) {
    if (active) qgemv_row<T, 1, 1, false>(M, row, true, x, c0, 1, nullptr);
  } else {
    qgemv_row<T, NC, 8, XS>(M, row, active, x, c0, nc, xsum);
  }
}

// The follow-up (QgemvThen) after a block's rows are stored: the block counts itself into its piece, and the last of
// the piece's blocks runs the follow-up on it. The writers' fence, the barrier and the count order their stores
// before the count; the last block reads them around L1 (__ldcg), where a line it cached earlier could be stale.
// b: the block's index among its matrix's; y0, y1: matrices 0 and 1's outputs, m outputs a row
template <int NC>
__device__ __forceinline__ void qgemv_then(int b, int m, const float* y0, const float* y1, int n, const QgemvThen& then) {
  __shared__ int last;
  __shared__ double part[RMS_PARTS];
  const int c0 = blockIdx.y * NC, nc = min(NC, n - c0);
  const int t = threadIdx.y * 32 + threadIdx.x, warp = threadIdx.y, lane = threadIdx.x;
  int piece, blocks;
  if (then.kind == QgemvThen::ACT_MUL) {  // 32 outputs of gate and up: 32 / QGEMV_WARPS blocks of each
    piece = b * QGEMV_WARPS / 32 * (int)gridDim.y + (int)blockIdx.y;
    blocks = 2 * 32 / QGEMV_WARPS;
  } else {  // every block of the grid's x
    piece = blockIdx.y;
    blocks = gridDim.x;
  }
  __threadfence();
  __syncthreads();
  if (t == 0) {
    last = atomicAdd(then.counters + piece, 1) == blocks - 1;
    if (last) then.counters[piece] = 0;  // for the next launch, which the stream orders after this one
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  if (then.kind == QgemvThen::ACT_MUL) {  // act_mul_quantize's work on values 32j .. 32j + 31 of these rows
    const float *g = y0, *u = y1;
    const int j = (piece - (int)blockIdx.y) / (int)gridDim.y;
    for (int c = warp; c < nc; c += QGEMV_WARPS) {
      const size_t at = (size_t)(c0 + c) * m + 32 * j + lane;
      quantize32(act_times(__ldcg(g + at), __ldcg(u + at), then.silu), lane, then.xq + at, then.xd + at / 32);
    }
  } else {  // rms_norm_quantize's, row after row
    for (int c = 0; c < nc; ++c) {
      const size_t at = (size_t)(c0 + c) * m;
      rms_norm_row(y0 + at, then.w, m, then.eps, then.out + at, then.xq + at, then.xd + at / 32, t,
                   32 * QGEMV_WARPS, part);
    }
  }
}

// Thread block (blockIdx.x, blockIdx.y), QGEMV_WARPS warps: rows QGEMV_WARPS b + threadIdx.y of the matrix whose
// blocks hold blockIdx.x (b counted from its first), against the activation rows of blockIdx.y; the type's step
// functions picked per block (uniform, so no divergence); then the follow-up, if any
template <int NC, bool XS = true>
__global__ void __launch_bounds__(32 * QGEMV_WARPS) qgemv_kernel(QgemvMats mats, QuantX x, int n, QgemvThen then) {
  int i = 0;
  while (i + 1 < mats.count && (int)blockIdx.x >= mats.end[i]) ++i;
  const QgemvMat& M = mats.m[i];
  const int b = (int)blockIdx.x - (i ? mats.end[i - 1] : 0), row = b * QGEMV_WARPS + threadIdx.y;
  const bool active = row < M.m;
  __shared__ int xsum[XS ? 2 : 1][NC][32];  // the activations' int8 sums of a chunk (qgemv_row), one for every type
  switch ((QType)M.type) {  // block-uniform
    case QType::Q4_0: qgemv_rows<(int)QType::Q4_0, NC, XS>(M, row, active, x, n, xsum); break;
    case QType::Q4_1: qgemv_rows<(int)QType::Q4_1, NC, XS>(M, row, active, x, n, xsum); break;
    case QType::Q5_0: qgemv_rows<(int)QType::Q5_0, NC, XS>(M, row, active, x, n, xsum); break;
    case QType::Q8_0: qgemv_rows<(int)QType::Q8_0, NC, XS>(M, row, active, x, n, xsum); break;
    case QType::Q4_K: qgemv_rows<(int)QType::Q4_K, NC, XS>(M, row, active, x, n, xsum); break;
    case QType::Q6_K: qgemv_rows<(int)QType::Q6_K, NC, XS>(M, row, active, x, n, xsum); break;
    default: break;  // refused on the host
  }
  if (then.kind != QgemvThen::NONE) qgemv_then<NC>(b, mats.m[0].m, mats.m[0].y, mats.m[1].y, n, then);
}

// the decode kernel for blocks of NC activation rows, the activations' sums shared by the block's warps or found by
// each (shared_sums false: LOCALLLM_CUDA_XSUM=0)
template <int NC>
inline auto qgemv_kernel_for(bool shared_sums) {
  return shared_sums ? &qgemv_kernel<NC, true> : &qgemv_kernel<NC, false>;
}

}  // namespace lll::cuda
