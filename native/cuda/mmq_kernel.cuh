// The tensor-core product for prompt-sized steps (launched by qgemv.cu from LOCALLLM_CUDA_MMQ rows on; the tests
// also run this source on the CPU), in the spirit of llama.cpp's MMQ: y [n][m] = x . W^T with W's steps decoded
// once per 64 activation rows into shared memory as int8, and their exact int32 sums taken by mma.sync m16n8k16 on
// int8. It keeps the decode kernel's bits (qgemv_kernel.cuh), so that a row's outputs do not depend on the step's
// size: each step's term is step_term's (qstep.cuh) from the same integer sums, and a thread takes an output's
// terms in step order through tree_push, whose pairwise sums within each chunk of 32 steps are the decode warp's
// xor-shuffle tree; the chunk sums are added in chunk order, then the bias and the residual as qgemv adds them.
//
// A thread block of 8 warps takes 64 weight rows by 64 activation rows, a warp 16 rows by 32 (four 16 x 8 mma
// tiles, each lane 16 outputs: rows g, g + 8 of its warp's 16, activation rows 2t, 2t + 1 of each tile, g = lane /
// 4, t = lane % 4). The steps go through shared memory 8 at a time (256 weights): per weight row and step 8 words
// of int8 weights and the step's scales; per activation row and step 8 words of int8 values, the sums of its two
// halves and its scale. A row pitch of 68 words puts the 32 words of a fragment load in 32 different banks.
#pragma once
#include <cstdint>

#include "../quant_formats.h"
#include "device_compat.cuh"
#include "qmat.cuh"
#include "qstep.cuh"

namespace lll::cuda {

constexpr int MMQ_ROWS = 64;    // weight rows a block takes
constexpr int MMQ_COLS = 64;    // activation rows a block takes
constexpr int MMQ_STAGE = 8;    // steps in shared memory at once
constexpr int MMQ_THREADS = 256;
constexpr int MMQ_PITCH = MMQ_STAGE * 8 + 4;  // words per row in shared memory

// Block (blockIdx.x, blockIdx.y): weight rows 64 blockIdx.x .., activation rows 64 blockIdx.y .. of M
template <int T>
__global__ void __launch_bounds__(MMQ_THREADS) mmq_kernel(QgemvMat M, QuantX x, int n) {
  __shared__ int w_s[MMQ_ROWS][MMQ_PITCH];
  __shared__ int x_s[MMQ_COLS][MMQ_PITCH];
  __shared__ StepScales w_sc[MMQ_ROWS][MMQ_STAGE];
  __shared__ float x_d[MMQ_COLS][MMQ_STAGE];
  __shared__ int x_sum[MMQ_COLS][MMQ_STAGE][2];

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  const int r0 = blockIdx.x * MMQ_ROWS, c0 = blockIdx.y * MMQ_COLS;
  const int wr = (warp % 4) * 16, wc = (warp / 4) * 32;  // the warp's tile within the block's
  const int steps = x.k / 32;

  float acc[4][4];
#pragma unroll
  for (int j = 0; j < 4; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[j][e] = 0.0f;

  for (int base = 0; base < steps; base += 32) {
    float st[4][4][5];  // each output's tree_push stack over the chunk
#pragma unroll
    for (int stage = 0; stage < 32 / MMQ_STAGE; ++stage) {
      const int s0 = base + stage * MMQ_STAGE;
      __syncthreads();  // the previous stage's reads are done
      // 64 rows x 8 steps of weights and of activations, two of each a thread; consecutive threads take
      // consecutive steps of one row (adjacent in memory)
#pragma unroll
      for (int p = tid; p < MMQ_ROWS * MMQ_STAGE; p += MMQ_THREADS) {
        const int r = p / MMQ_STAGE, j = p % MMQ_STAGE, s = s0 + j;
        int u[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        StepScales sc{0.0f, 0.0f};
        if (r0 + r < M.m && s < steps) decode_step<T>(M.w + (size_t)(r0 + r) * M.row_bytes, s, u, sc);
#pragma unroll
        for (int q = 0; q < 8; ++q) w_s[r][8 * j + q] = u[q];
        w_sc[r][j] = sc;
      }
#pragma unroll
      for (int p = tid; p < MMQ_COLS * MMQ_STAGE; p += MMQ_THREADS) {
        const int c = p / MMQ_STAGE, j = p % MMQ_STAGE, s = s0 + j;
        int v[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        float d = 0.0f;
        if (c0 + c < n && s < steps) {
          const int* src = reinterpret_cast<const int*>(x.q + (size_t)(c0 + c) * x.k + 32 * s);
#pragma unroll
          for (int q = 0; q < 8; ++q) v[q] = src[q];
          d = x.d[(size_t)(c0 + c) * steps + s];
        }
        int h0 = 0, h1 = 0;
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          h0 = __dp4a(0x01010101, v[q], h0);
          h1 = __dp4a(0x01010101, v[q + 4], h1);
        }
#pragma unroll
        for (int q = 0; q < 8; ++q) x_s[c][8 * j + q] = v[q];
        x_d[c][j] = d;
        x_sum[c][j][0] = h0;
        x_sum[c][j][1] = h1;
      }
      __syncthreads();

#pragma unroll
      for (int j = 0; j < MMQ_STAGE; ++j) {
        const int leaf = stage * MMQ_STAGE + j;  // the step's place in its chunk
        const bool present = base + leaf < steps;
        int a[2][2];  // the warp's 16 weight rows, halves 0 and 1 of the step
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          a[h][0] = w_s[wr + g][8 * j + 4 * h + t];
          a[h][1] = w_s[wr + g + 8][8 * j + 4 * h + t];
        }
        const StepScales sc0 = w_sc[wr + g][j], sc1 = w_sc[wr + g + 8][j];
#pragma unroll
        for (int tile = 0; tile < 4; ++tile) {
          const int cb = wc + 8 * tile;  // the mma tile's first activation row
          int d0[4] = {0, 0, 0, 0}, d1[4] = {0, 0, 0, 0};
          mma_s8_16816(d0, a[0], x_s[cb + g][8 * j + t]);
          mma_s8_16816(d1, a[1], x_s[cb + g][8 * j + 4 + t]);
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int col = cb + 2 * t + (e & 1);
            const float term = step_term<T>(d0[e], d1[e], x_sum[col][j][0], x_sum[col][j][1], e < 2 ? sc0 : sc1,
                                            x_d[col][j]);
            tree_push(st[tile][e], leaf, present ? term : 0.0f);
          }
        }
      }
    }
#pragma unroll
    for (int tile = 0; tile < 4; ++tile)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[tile][e] = __fadd_rn(acc[tile][e], st[tile][e][0]);
  }

#pragma unroll
  for (int tile = 0; tile < 4; ++tile)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int row = r0 + wr + g + 8 * (e >> 1), col = c0 + wc + 8 * tile + 2 * t + (e & 1);
      if (row < M.m && col < n) {
        float* out = M.y + (size_t)col * M.m + row;
        const float v = M.bias ? __fadd_rn(acc[tile][e], M.bias[row]) : acc[tile][e];
        *out = M.add_to_y ? __fadd_rn(*out, v) : v;
      }
    }
}

}  // namespace lll::cuda
