// Paged attention for prefill (device_ops.cuh's paged_attention_tiled): the result of paged_attention (kv.cu) to
// float rounding, but one thread block per (tile of up to ATTENTION_TILE_ROWS consecutive rows of one sequence,
// query head), so that each key and value a tile sees is read from the pool and dequantized once per tile and head
// instead of once per row (FlashAttention's order: key chunks in shared memory, an online softmax per row).
//
// Grid (n_tiles, n_head), 8 warps. A block per query head rather than per kv head with its group: the shared
// memory then depends on head_dim only (a group of 7 heads would need 7 x the q tile, 112 rows), every GQA shape
// runs the same kernel, and a short prompt still fills the device with n_tiles * n_head blocks; the group's
// blocks re-read the same chunks, from L2 (a layer's K / V of a sequence is a few MB at most).
//
// Per block: the tile's n <= 16 rows of q (head h, not pre-scaled) in shared memory; then chunks of KC = 32 keys
// from the lowest key the first row sees (its window's start, or 0) to the last row's position: the chunk's K and V
// rows of kv head h / group dequantized into shared memory (kv_rows.cuh's kv_value, as kv_dequantize_row),
// then warp w takes rows w and w + 8: lane k scores key jc + k against both rows (score = (q . k) * scale, then the
// soft-cap, as attention.cpp), the causal / window mask (key j visible to position p when j <= p and, with a window
// W > 0, p - j < W) sets invisible scores to -inf, and each row's running max m, weight sum l and output acc
// (lane holds dims lane, lane + 32, ...) take the chunk: corr = exp(m - m'), 0 while m = -inf (no key seen yet:
// acc and l are 0, and no exp(-inf - -inf)); invisible keys weigh exactly 0. Finally out = acc / l (l >= 1: a row
// sees its own position).
//
// Shared memory, dynamic: q [16][D] + K [32][D] + V [32][D] floats = 320 * D bytes: 20 KB at head_dim 64, 40 KB
// at 128, 80 KB at 256 (above 48 KB the launch raises the kernel's dynamic limit; every target, sm_80 .. sm_90, has
// at least 99 KB a block). K is stored as float4 groups, group c of key k at c ^ (k & 7), so that the 32 lanes'
// 16-byte loads of group c of 32 different keys hit distinct banks in each quarter-warp; q reads are broadcasts,
// V reads consecutive.
#include "device_compat.cuh"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "../quant_formats.h"
#include "cuda_api.h"
#include "device_ops.cuh"
#include "kv_rows.cuh"

namespace lll::cuda {

constexpr int ATTENTION_TILE_ROWS = 16;  // rows a tile (attention_tiles, the kernel's stop rule)

namespace {

constexpr unsigned FULL = 0xffffffffu;
constexpr int WARPS = 8;
constexpr int ROWS_PER_WARP = ATTENTION_TILE_ROWS / WARPS;  // warp w: tile rows w, w + WARPS
constexpr int KC = 32;                                      // keys a chunk: lane k scores key jc + k
constexpr int MAX_DIM = 256;                                // head_dim: a multiple of 32 up to this
constexpr int STEPS = MAX_DIM / 32;
static_assert(ATTENTION_TILE_ROWS % WARPS == 0, "whole rows a warp");

// dynamic shared memory of a block: q [ATTENTION_TILE_ROWS][D], K [KC][D], V [KC][D] floats
size_t smem_bytes(int head_dim) { return sizeof(float) * (size_t)(ATTENTION_TILE_ROWS + 2 * KC) * head_dim; }

// One block per (tile blockIdx.x, query head h = blockIdx.y); the design is the header's.
__global__ void __launch_bounds__(32 * WARPS) tiled_attention_kernel(AttentionShape a, AttentionRowsDev rows,
                                                                     const int32_t* tiles, const float* q, KvView kc,
                                                                     KvView vc, float* out) {
  LLL_DYNAMIC_SHARED(float4, sm);
  const int D = a.head_dim, D4 = D / 4, steps = D / 32, bs = a.block_size;
  float4* qs = sm;                                     // [ATTENTION_TILE_ROWS][D / 4]
  float4* ks = qs + ATTENTION_TILE_ROWS * D4;          // [KC][D / 4], group c of key k at c ^ (k & 7)
  float* vs = reinterpret_cast<float*>(ks + KC * D4);  // [KC][D]
  const int lane = threadIdx.x % 32, w = threadIdx.x / 32, h = blockIdx.y;
  const size_t g = (size_t)(h / (a.n_head / a.n_kv_head));  // kv head

  // the tile: rows t0 .. t0 + n - 1, of t0's sequence at positions p0 .. p0 + n - 1
  const int t0 = tiles[blockIdx.x], p0 = rows.positions[t0], seq = rows.seq_index[t0];
  int n = 1;
  while (n < ATTENTION_TILE_ROWS && t0 + n < rows.T && rows.seq_index[t0 + n] == seq &&
         rows.positions[t0 + n] == p0 + n)
    ++n;
  const int32_t* bt = rows.block_tables + (size_t)seq * rows.max_blocks;

  float* qf = reinterpret_cast<float*>(qs);  // rows past n: zeros (never visible to a key, never written)
  for (int i = threadIdx.x; i < ATTENTION_TILE_ROWS * D; i += blockDim.x) {
    const int r = i / D;
    qf[i] = r < n ? q[((size_t)(t0 + r) * a.n_head + h) * D + i % D] : 0.f;
  }

  // this warp's rows r = w + WARPS * i: position pr (-1 past n: no key visible), lowest visible key lor, state
  int pr[ROWS_PER_WARP], lor[ROWS_PER_WARP];
  float m[ROWS_PER_WARP], l[ROWS_PER_WARP], acc[ROWS_PER_WARP][STEPS];
#pragma unroll
  for (int i = 0; i < ROWS_PER_WARP; ++i) {
    const int r = w + WARPS * i;
    pr[i] = r < n ? p0 + r : -1;
    lor[i] = a.window > 0 ? max(0, pr[i] - a.window + 1) : 0;
    m[i] = -INFINITY;
    l[i] = 0.f;
#pragma unroll
    for (int s = 0; s < STEPS; ++s) acc[i][s] = 0.f;
  }

  const int jlo = a.window > 0 ? max(0, p0 - a.window + 1) : 0, jhi = p0 + n - 1;
  for (int jc = jlo; jc <= jhi; jc += KC) {  // block-uniform: every thread reaches each __syncthreads
    const int nk = min(KC, jhi - jc + 1);    // keys jc .. jc + nk - 1 loaded; lanes >= nk hold stale rows
    __syncthreads();                         // q stored / the previous chunk's reads done
    for (int k = w; k < nk; k += WARPS) {
      const int j = jc + k;
      const size_t slot = (size_t)bt[j / bs] * bs + j % bs;
      const uint8_t* kh = kc.data + slot * kc.row_bytes + g * kc.head_bytes;
      const uint8_t* vh = vc.data + slot * vc.row_bytes + g * vc.head_bytes;
      float* kr = reinterpret_cast<float*>(ks + k * D4);
      for (int s = 0; s < steps; ++s) {
        const int d = 32 * s + lane;
        kr[4 * ((d / 4) ^ (k & 7)) + d % 4] = kv_value(kc.type, kh, s, lane);
        vs[k * D + d] = kv_value(vc.type, vh, s, lane);
      }
    }
    __syncthreads();

    // lane k: the dot products of key jc + k with this warp's rows
    float dot[ROWS_PER_WARP] = {};
    const float4* kr = ks + lane * D4;
    for (int c = 0; c < D4; ++c) {
      const float4 kk = kr[c ^ (lane & 7)];
#pragma unroll
      for (int i = 0; i < ROWS_PER_WARP; ++i) {
        const float4 qq = qs[(w + WARPS * i) * D4 + c];
        dot[i] += qq.x * kk.x + qq.y * kk.y + qq.z * kk.z + qq.w * kk.w;
      }
    }
    float e[ROWS_PER_WARP];  // lane k: key jc + k's weight for each row, 0 when invisible
#pragma unroll
    for (int i = 0; i < ROWS_PER_WARP; ++i) {
      const int j = jc + lane;
      const bool vis = j >= lor[i] && j <= pr[i];  // j <= pr < jc + nk: only loaded keys
      float sc = dot[i] * a.scale;
      if (a.softcap > 0.f) sc = a.softcap * tanhf(sc / a.softcap);
      sc = vis ? sc : -INFINITY;
      float mx = sc;
      for (int o = 16; o; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(FULL, mx, o));
      const float mn = fmaxf(m[i], mx);  // -inf only while the row has seen no key
      const float corr = m[i] == -INFINITY ? 0.f : expf(m[i] - mn);
      e[i] = vis ? expf(sc - mn) : 0.f;
      float sum = e[i];
      for (int o = 16; o; o >>= 1) sum += __shfl_xor_sync(FULL, sum, o);
      l[i] = l[i] * corr + sum;
      m[i] = mn;
#pragma unroll
      for (int s = 0; s < STEPS; ++s) acc[i][s] *= corr;
    }
    // acc += sum over the chunk's keys of weight * V, each V value read once for both rows. A key a row does not
    // see adds nothing, not 0 * V: the chunk holds keys invisible to some rows (later positions of the tile, keys
    // before a later row's window) whose V the per-row kernel never reads, and 0 * inf would be a NaN. ek is the
    // same in every lane (a broadcast), so the test never splits the warp.
    for (int k = 0; k < nk; ++k) {
      float ek[ROWS_PER_WARP];
#pragma unroll
      for (int i = 0; i < ROWS_PER_WARP; ++i) ek[i] = __shfl_sync(FULL, e[i], k);
#pragma unroll
      for (int s = 0; s < STEPS; ++s)
        if (s < steps) {
          const float v = vs[k * D + 32 * s + lane];
#pragma unroll
          for (int i = 0; i < ROWS_PER_WARP; ++i)
            if (ek[i] != 0.f) acc[i][s] += ek[i] * v;
        }
    }
  }

#pragma unroll
  for (int i = 0; i < ROWS_PER_WARP; ++i) {
    const int r = w + WARPS * i;
    if (r >= n) continue;
    const float inv = 1.f / l[i];
    float* o = out + ((size_t)(t0 + r) * a.n_head + h) * D;
#pragma unroll
    for (int s = 0; s < STEPS; ++s)
      if (s < steps) o[32 * s + lane] = acc[i][s] * inv;
  }
}

}  // namespace

std::vector<int32_t> attention_tiles(int T, const int32_t* positions, const int32_t* seq_index) {
  std::vector<int32_t> tiles;
  for (int t = 0; t < T; ++t) {  // t joins the open tile t0 exactly when the kernel's stop rule takes it
    const int t0 = tiles.empty() ? -1 : tiles.back();
    if (t0 < 0 || t - t0 == ATTENTION_TILE_ROWS || seq_index[t] != seq_index[t0] ||
        positions[t] != positions[t0] + (t - t0))
      tiles.push_back(t);
  }
  return tiles;
}

void paged_attention_tiled(const AttentionShape& a, const AttentionRowsDev& rows, const int32_t* tiles, int n_tiles,
                           const float* q, const KvView& k_cache, const KvView& v_cache, float* out,
                           cudaStream_t stream) {
  if (a.head_dim <= 0 || a.head_dim % 32 || a.head_dim > MAX_DIM)
    throw std::invalid_argument("paged_attention_tiled: head_dim must be a multiple of 32 up to " +
                                std::to_string(MAX_DIM) + ", got " + std::to_string(a.head_dim));
  if (n_tiles <= 0) return;
  const size_t smem = smem_bytes(a.head_dim);
  if (smem > 48 * 1024)
    check(cudaFuncSetAttribute(tiled_attention_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem),
          "paged_attention_tiled shared memory");
  LLL_LAUNCH(tiled_attention_kernel, dim3(n_tiles, a.n_head), 32 * WARPS, smem, stream)(a, rows, tiles, q, k_cache, v_cache,
                                                                                 out);
  check_launch("paged_attention_tiled");
}

}  // namespace lll::cuda
