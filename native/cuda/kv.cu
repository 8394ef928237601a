// The KV cache and the attention on the device (device_ops.cuh): the quantizing write of K / V rows into one
// layer's pool (kv_write: kv_format.cpp's kv_quantize_row, the same bytes), the KV transforms around it
// (kv_to_cache / kv_from_cache: KvTransforms::to_cache / from_cache with hadamard_rotate, the same float32
// operations in the same order, so the same bits), the paged attention over the pools (paged_attention:
// attention.cpp's result to float rounding), and their host test entry points (cuda_api.h).
//
// Bit-exactness with the CPU (built with -ffp-contract=off): every float / double operation whose rounding the
// bytes depend on is written as an _rn intrinsic, which nvcc never contracts into an FMA nor relaxes under
// fast-math flags. Inputs are taken to be finite, as on the CPU (a NaN or inf in a quantized block is undefined
// there too).
//
// Alignment: q8_0 / q4_0 blocks are 34 / 18 bytes, so only 2-byte aligned; every row and head of a pool starts at
// an even offset (whole blocks or f16 values), so a block's f16 scale is read and written as one uint16_t.
#include "device_compat.cuh"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "../quant_formats.h"
#include "cuda_api.h"
#include "device_array.cuh"
#include "device_ops.cuh"
#include "kv_rows.cuh"
#include "quantize32.cuh"
#include "rope_pair.cuh"

namespace lll::cuda {
namespace {

constexpr unsigned FULL = 0xffffffffu;

// ops.cpp's f32_to_f16: round to nearest even (an overflow is inf), a NaN the quiet NaN of its sign
__device__ __forceinline__ uint16_t f2h(float f) {
  if (isnan(f)) return (uint16_t)(((__float_as_uint(f) >> 16) & 0x8000u) | 0x7e00u);
  return __half_as_ushort(__float2half_rn(f));
}
__device__ __forceinline__ int clampi(int v, int lo, int hi) { return max(lo, min(hi, v)); }

// ---- kv_write ----

// what one launch writes: rows x [T][row] into rows slots[t] of pool; grid z 0 writes a, z 1 writes b (K and V of
// one type in one launch)
struct KvRows {
  const float* x;
  uint8_t* pool;
  size_t row_bytes;
};
#define LLL_KV_ROWS(a, b)                                             \
  const KvRows& rows_ = blockIdx.z ? (b) : (a);                       \
  const float* x = rows_.x;                                           \
  uint8_t* pool = rows_.pool;                                         \
  const size_t row_bytes = rows_.row_bytes

// f16 rows: x [T][row] -> row slots[t] of the pool; thread i of grid column y converts value y * blockDim + i
__global__ void kv_write_f16(KvRows a, KvRows b, int row, const int32_t* slots) {
  LLL_KV_ROWS(a, b);
  const int t = blockIdx.x, i = blockIdx.y * blockDim.x + threadIdx.x;
  if (i >= row) return;
  uint16_t* y = reinterpret_cast<uint16_t*>(pool + (size_t)slots[t] * row_bytes);
  y[i] = f2h(x[(size_t)t * row + i]);
}

// q8_0: the 32-value block whose value j is v of lane j into blk (kv_quantize_row's q8_0 branch: d = amax / 127,
// q = roundf(x * (1 / d)))
__device__ __forceinline__ void q8_0_block(float v, int j, uint8_t* blk) {
  float amax = fabsf(v);  // a max: exact in any order
  for (int o = 16; o; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(FULL, amax, o));
  const float d = __fdiv_rn(amax, 127.f), id = d != 0.f ? __fdiv_rn(1.f, d) : 0.f;
  if (j == 0) *reinterpret_cast<uint16_t*>(blk) = f2h(d);
  blk[2 + j] = (uint8_t)(int8_t)(int)roundf(__fmul_rn(v, id));
}

// one warp per 32-value block b of row t
__global__ void __launch_bounds__(32) kv_write_q8_0(KvRows ra, KvRows rb, int row, const int32_t* slots) {
  LLL_KV_ROWS(ra, rb);
  const int t = blockIdx.x, b = blockIdx.y, j = threadIdx.x;
  q8_0_block(x[(size_t)t * row + (size_t)b * QK + j], j,
             pool + (size_t)slots[t] * row_bytes + (size_t)b * sizeof(block_q8_0));
}

// the sum of (x_j - d16 * q_j)^2 in double, j = 0 .. 31 in order, q_j = clamp(lround(x_j / d16), -8, 7) with x_j
// in lane j; every lane of the warp computes it for its own d16 (q4_0_scale's refinement, kv_format.cpp)
__device__ double q4_0_error(float xl, float d16) {
  const float idd = d16 != 0.f ? __fdiv_rn(1.f, d16) : 0.f;
  double err = 0;
  for (int j = 0; j < QK; ++j) {
    const float xj = __shfl_sync(FULL, xl, j);
    const int qq = clampi((int)lroundf(__fmul_rn(xj, idd)), -8, 7);
    const double e = __dsub_rn((double)xj, __dmul_rn((double)d16, (double)qq));
    err = __dadd_rn(err, __dmul_rn(e, e));
  }
  return err;
}

// kv_format.cpp's q4_0_scale for the block whose value j is xl of lane j, the same in every lane: lane c < 21
// evaluates the search's candidate is = c - 10 (its two scales rounded to f16 and their errors, each sum in the
// CPU's order), then every lane walks the 42 candidates in the CPU's order with its comparison (a double error
// against the best error kept as float), so ties resolve alike.
__device__ float q4_0_scale(float xl, int lane) {
  float amax = 0.f, max = 0.f;  // the first value of largest magnitude
  for (int j = 0; j < QK; ++j) {
    const float xj = __shfl_sync(FULL, xl, j);
    if (fabsf(xj) > amax) {
      amax = fabsf(xj);
      max = xj;
    }
  }
  if (amax == 0.f) return 0.f;
  const int is = min(lane, 20) - 10;  // lanes 21 .. 31 repeat is = 10 and are never read
  const float id = __fdiv_rn(-__fadd_rn(8.f, __fmul_rn(0.1f, (float)is)), max);
  double sxq = 0, sqq = 0;
  for (int j = 0; j < QK; ++j) {
    const float xj = __shfl_sync(FULL, xl, j);
    const int q = clampi((int)lroundf(__fmul_rn(xj, id)), -8, 7);
    sxq = __dadd_rn(sxq, __dmul_rn((double)xj, (double)q));
    sqq = __dadd_rn(sqq, __dmul_rn((double)q, (double)q));
  }
  const int valid = sqq > 0;
  // the candidates (float)(sxq / sqq) and 1 / id, each as stored (f16); with sqq == 0 the first is NaN, unused
  const float d0 = h2f(f2h(__double2float_rn(__ddiv_rn(sxq, sqq)))), d1 = h2f(f2h(__fdiv_rn(1.f, id)));
  const double e0 = q4_0_error(xl, d0), e1 = q4_0_error(xl, d1);
  float best_d = __fdiv_rn(max, -8.f), best_err = INFINITY;
  for (int c = 0; c <= 20; ++c) {
    const int ok = __shfl_sync(FULL, valid, c);
    const double ce[2] = {__shfl_sync(FULL, e0, c), __shfl_sync(FULL, e1, c)};
    const float cd[2] = {__shfl_sync(FULL, d0, c), __shfl_sync(FULL, d1, c)};
    for (int k = 0; k < 2; ++k)
      if (ok && ce[k] < (double)best_err) {
        best_err = __double2float_rn(ce[k]);
        best_d = cd[k];
      }
  }
  return best_d;
}

// q4_0: the 32-value block whose value j is v of lane j into blk (kv_quantize_row's q4_0 branch): the searched
// scale d, then lane j < 16 packs values j (low nibble) and j + 16 (high nibble), q = clamp(lround(x * (1 / d)) +
// 8, 0, 15)
__device__ __forceinline__ void q4_0_block(float v, int lane, uint8_t* blk) {
  const float d = q4_0_scale(v, lane), id = d != 0.f ? __fdiv_rn(1.f, d) : 0.f;
  const float v_hi = __shfl_down_sync(FULL, v, 16);  // value lane + 16 (for lanes < 16)
  if (lane == 0) *reinterpret_cast<uint16_t*>(blk) = f2h(d);
  if (lane < QK / 2) {
    const int q0 = clampi((int)lroundf(__fmul_rn(v, id)) + 8, 0, 15);
    const int q1 = clampi((int)lroundf(__fmul_rn(v_hi, id)) + 8, 0, 15);
    blk[2 + lane] = (uint8_t)(q0 | q1 << 4);
  }
}

// one warp per 32-value block b of row t
__global__ void __launch_bounds__(32) kv_write_q4_0(KvRows ra, KvRows rb, int row, const int32_t* slots) {
  LLL_KV_ROWS(ra, rb);
  const int t = blockIdx.x, b = blockIdx.y, lane = threadIdx.x;
  q4_0_block(x[(size_t)t * row + (size_t)b * QK + lane], lane,
             pool + (size_t)slots[t] * row_bytes + (size_t)b * sizeof(block_q4_0));
}

// ---- rope and the KV writes in one launch ----

// rope_kv_write's arguments: q [T][n_head][hd] rotated in place; k, v [T][n_kv_head * hd] written to the pools,
// K rotated on the way (k itself left as it was)
struct RopeKv {
  float* q;
  const float *k, *v;
  int n_head, n_kv_head, hd, n_rot;
  bool neox;
  const float *cs, *sn;  // [T][n_rot / 2]
  uint8_t *k_pool, *v_pool;
  size_t k_row_bytes, v_row_bytes;
  KvType k_type, v_type;
  const int32_t* slots;
};

// Block (t, u, part), one warp: part 0 rotates q's pairs 32u .. 32u + 31 of row t (rope's arithmetic); parts 1 and 2
// write values 32u .. 32u + 31 of K (rotated: rope_value) and V of row t as kv_write writes them, a lane a value (a
// quantized type's block is those 32)
__global__ void __launch_bounds__(32) rope_kv_write_kernel(RopeKv p) {
  const int t = blockIdx.x, u = blockIdx.y, part = blockIdx.z, lane = threadIdx.x, half = p.n_rot / 2;
  const float* cs = p.cs + (size_t)t * half;
  const float* sn = p.sn + (size_t)t * half;
  if (part == 0) {
    const int i = u * 32 + lane;
    if (i >= p.n_head * half) return;
    float* xh = p.q + ((size_t)t * p.n_head + i / half) * p.hd;
    const int pp = i % half, ia = p.neox ? pp : 2 * pp, ib = p.neox ? pp + half : 2 * pp + 1;
    const float a = xh[ia], b = xh[ib];
    xh[ia] = rope_first(a, b, cs[pp], sn[pp]);
    xh[ib] = rope_second(a, b, cs[pp], sn[pp]);
    return;
  }
  const int row = p.n_kv_head * p.hd;
  if (u * 32 >= row) return;  // the whole warp
  const int i = u * 32 + lane;
  const bool is_k = part == 1;
  const float* x = (is_k ? p.k : p.v) + (size_t)t * row;
  const KvType type = is_k ? p.k_type : p.v_type;
  uint8_t* dst = (is_k ? p.k_pool : p.v_pool) + (size_t)p.slots[t] * (is_k ? p.k_row_bytes : p.v_row_bytes);
  float val = 0.f;
  if (i < row) val = is_k ? rope_value(x + (size_t)(i / p.hd) * p.hd, i % p.hd, p.n_rot, p.neox, cs, sn) : x[i];
  if (type == KvType::F16) {
    if (i < row) reinterpret_cast<uint16_t*>(dst)[i] = f2h(val);
  } else if (type == KvType::Q8_0) {
    q8_0_block(val, lane, dst + (size_t)u * sizeof(block_q8_0));
  } else {
    q4_0_block(val, lane, dst + (size_t)u * sizeof(block_q4_0));
  }
}

// ---- KV transforms ----

// What head_transform does to each vector, every pointer optional (nullptr: skipped). Vector i is head
// h = i % heads of its row; sub and div are [heads * hd], read at head h; mul and add are [heads / group * hd],
// read at head h / group (a query head's kv head).
struct HeadOps {
  const float* sub = nullptr;
  const float* div = nullptr;
  const float* mul = nullptr;
  bool rotate = false;
  const float* add = nullptr;
  int group = 1;
};

// x [n_vec][hd] in place, one thread block per vector staged in shared memory (hd floats): x = (x - sub) / div *
// mul, then when rotate hadamard_rotate's butterflies (stride 1, 2, 4, ... within each group of m = the largest
// power of two dividing hd, each stage's pairs independent, so any thread order gives the CPU's values) and its
// scale 1 / sqrt(m), then x += add.
__global__ void head_transform(float* x, int heads, int hd, HeadOps op) {
  LLL_DYNAMIC_SHARED(float, v);
  const int h = blockIdx.x % heads;
  float* xv = x + (size_t)blockIdx.x * hd;
  const size_t own = (size_t)h * hd, kv = (size_t)(h / op.group) * hd;
  for (int i = threadIdx.x; i < hd; i += blockDim.x) {
    float e = xv[i];
    if (op.sub) e = __fsub_rn(e, op.sub[own + i]);
    if (op.div) e = __fdiv_rn(e, op.div[own + i]);
    if (op.mul) e = __fmul_rn(e, op.mul[kv + i]);
    v[i] = e;
  }
  const int m = hd & -hd;
  if (op.rotate) {  // uniform over the block: every thread reaches each __syncthreads
    __syncthreads();
    for (int s = 1; s < m; s *= 2) {
      for (int p = threadIdx.x; p < hd / 2; p += blockDim.x) {  // pair p: group p / (m / 2), r-th pair in it
        const int r = p % (m / 2), j = p / (m / 2) * m + r / s * 2 * s + r % s;
        const float a = v[j], b = v[j + s];
        v[j] = __fadd_rn(a, b);
        v[j + s] = __fsub_rn(a, b);
      }
      __syncthreads();
    }
  }
  const float scale = __fdiv_rn(1.f, __fsqrt_rn((float)m));
  for (int i = threadIdx.x; i < hd; i += blockDim.x) {  // without rotate each thread reads back its own v[i]
    float e = v[i];
    if (op.rotate) e = __fmul_rn(e, scale);
    if (op.add) e = __fadd_rn(e, op.add[kv + i]);
    xv[i] = e;
  }
}

constexpr int TRANSFORM_THREADS = 128;

void launch_head_transform(float* x, int n_vec, int heads, int hd, const HeadOps& op, cudaStream_t stream) {
  LLL_LAUNCH(head_transform, n_vec, TRANSFORM_THREADS, (size_t)hd * sizeof(float), stream)(x, heads, hd, op);
  check_launch("kv transform");
}

// ---- paged attention ----

constexpr int ATT_WARPS = 8;      // warps per (row, head): each takes every ATT_WARPS-th key of a chunk
constexpr int ATT_MAX_DIM = 256;  // head_dim: a multiple of 32 up to this
constexpr int ATT_STEPS = ATT_MAX_DIM / 32;
static_assert(ATT_PART_FLOATS == ATT_MAX_DIM + 2, "a chunk's state: max, weight, the outputs");
static_assert(ATT_MAX_DIM <= 32 * ATT_WARPS, "a thread per output dimension");

// The order of a row's sum, the same whatever the launch (device_ops.cuh, "Chunks"): the visible keys [lo, p] are cut
// at the multiples of ATT_CHUNK; inside chunk c, warp w walks keys max(lo, c * ATT_CHUNK) + w, + ATT_WARPS, ... with
// its own online softmax (score: the lanes' partial dot products summed by a butterfly shuffle, identical in every
// lane, times scale, then the soft-cap), and the warps' states (max, sum of weights, output) are merged in warp
// order into the chunk's (m_c, l_c, o_c); the chunks are merged in position order by merge_chunk, the first taken
// as it is; the output is O * (1 / L). Every float operation that rounds is an explicit _rn intrinsic, so that
// the compiler contracts none of them differently in the two launches below (and the emulator computes the card's
// bits, expf and tanhf aside). A row of one chunk runs the kernel before chunks' operations, its multiply-adds now
// fused explicitly where nvcc chose to contract them.

struct ChunkState {  // a chunk's, or the running merge's: max score, sum of weights; the output lives per thread
  float m, l;
};

// (M, L, O) merged with chunk (m, l, o): the running state of the chunks so far, O one dimension's value
__device__ __forceinline__ void merge_chunk(ChunkState& run, float& O, ChunkState c, float o) {
  const float mn = fmaxf(run.m, c.m);
  const float a = expf(__fsub_rn(run.m, mn)), b = expf(__fsub_rn(c.m, mn));
  O = __fadd_rn(__fmul_rn(O, a), __fmul_rn(o, b));
  run.l = __fadd_rn(__fmul_rn(run.l, a), __fmul_rn(c.l, b));
  run.m = mn;
}

struct AttShared {
  float m[ATT_WARPS], l[ATT_WARPS];
  float acc[ATT_WARPS][ATT_MAX_DIM];
  int last;  // split launch: this block merges the row's chunks
};

// chunk [j0, j1] (visible keys, inclusive) of row t, head h: returns (m_c, l_c) to every thread, and o_c of
// dimension d = threadIdx.x in o (when d < head_dim); ends after a barrier, so sh may be reused at once
__device__ __forceinline__ ChunkState attend_chunk(const AttentionShape& a, const int32_t* bt, const float* qv, int j0,
                                                   int j1, const KvView& kc, const KvView& vc, size_t g, AttShared& sh,
                                                   float& o) {
  const int lane = threadIdx.x % 32, w = threadIdx.x / 32, steps = a.head_dim / 32, bs = a.block_size;
  float acc[ATT_STEPS];
#pragma unroll
  for (int i = 0; i < ATT_STEPS; ++i) acc[i] = 0.f;
  float m = -INFINITY, l = 0.f;
  for (int j = j0 + w; j <= j1; j += ATT_WARPS) {  // warp-uniform: the shuffles below see all 32 lanes
    const size_t slot = (size_t)bt[j / bs] * bs + j % bs;
    const uint8_t* kh = kc.data + slot * kc.row_bytes + g * kc.head_bytes;
    const uint8_t* vh = vc.data + slot * vc.row_bytes + g * vc.head_bytes;
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < ATT_STEPS; ++i)
      if (i < steps) s = __fmaf_rn(qv[i], kv_value(kc.type, kh, i, lane), s);
    for (int off = 16; off; off >>= 1) s = __fadd_rn(s, __shfl_xor_sync(FULL, s, off));
    s = __fmul_rn(s, a.scale);
    if (a.softcap > 0.f) s = __fmul_rn(a.softcap, tanhf(__fdiv_rn(s, a.softcap)));
    const float mn = fmaxf(m, s);
    const float corr = m == -INFINITY ? 0.f : expf(__fsub_rn(m, mn)), e = expf(__fsub_rn(s, mn));
    l = __fmaf_rn(l, corr, e);
#pragma unroll
    for (int i = 0; i < ATT_STEPS; ++i)
      if (i < steps) acc[i] = __fmaf_rn(acc[i], corr, __fmul_rn(e, kv_value(vc.type, vh, i, lane)));
    m = mn;
  }
  if (lane == 0) {
    sh.m[w] = m;
    sh.l[w] = l;
  }
#pragma unroll
  for (int i = 0; i < ATT_STEPS; ++i)
    if (i < steps) sh.acc[w][32 * i + lane] = acc[i];
  __syncthreads();
  float mx = -INFINITY;
  for (int u = 0; u < ATT_WARPS; ++u) mx = fmaxf(mx, sh.m[u]);  // finite: every chunk has a visible key
  ChunkState c{mx, 0.f};
  float wt[ATT_WARPS];
  for (int u = 0; u < ATT_WARPS; ++u) {  // a warp that saw no key has weight 0
    wt[u] = sh.m[u] == -INFINITY ? 0.f : expf(__fsub_rn(sh.m[u], mx));
    c.l = __fmaf_rn(sh.l[u], wt[u], c.l);
  }
  o = 0.f;
  if ((int)threadIdx.x < a.head_dim)
    for (int u = 0; u < ATT_WARPS; ++u) o = __fmaf_rn(sh.acc[u][threadIdx.x], wt[u], o);
  __syncthreads();
  return c;
}

// One thread block per (query row t = blockIdx.x, query head h = blockIdx.y, chunk blockIdx.z), ATT_WARPS warps;
// thread d < head_dim owns dimension d of the merge and of the output. Lane l holds dims l, l + 32, ... of q.
// Without part (grid z 1) the block walks the row's chunks in order, merging as it goes. With part (a split launch,
// grid z covering the most chunks a row has) block z takes chunk lo / ATT_CHUNK + z alone: a row of one chunk
// finishes there; otherwise each chunk's state goes to part, and the row's last block to arrive (counted in
// counters[t * n_head + h], which it sets back to 0) merges them in chunk order. The same operations either way.
__global__ void __launch_bounds__(32 * ATT_WARPS) paged_attention_kernel(AttentionShape a, AttentionRowsDev rows,
                                                                         const float* q, KvView kc, KvView vc,
                                                                         float* out, int8_t* xq, float* xd,
                                                                         AttentionSplit split) {
  __shared__ AttShared sh;
  const int t = blockIdx.x, h = blockIdx.y, lane = threadIdx.x % 32, d = threadIdx.x;
  const int D = a.head_dim, steps = D / 32;
  const size_t g = (size_t)(h / (a.n_head / a.n_kv_head));  // kv head
  const int p = rows.positions[t];
  const int lo = a.window > 0 ? max(0, p - a.window + 1) : 0;
  const int c_lo = lo / ATT_CHUNK, n_c = p / ATT_CHUNK - c_lo + 1;
  const int32_t* bt = rows.block_tables + (size_t)rows.seq_index[t] * rows.max_blocks;
  const size_t at = ((size_t)t * a.n_head + h) * D;
  const size_t row_head = (size_t)t * a.n_head + h;
  if ((int)blockIdx.z >= n_c) return;  // block-uniform: a split launch's chunks past this row's

  float qv[ATT_STEPS];
#pragma unroll
  for (int i = 0; i < ATT_STEPS; ++i) qv[i] = i < steps ? q[at + 32 * i + lane] : 0.f;
  auto chunk = [&](int c, float& o) {
    return attend_chunk(a, bt, qv, max(lo, c * ATT_CHUNK), min(p, c * ATT_CHUNK + ATT_CHUNK - 1), kc, vc, g, sh, o);
  };

  ChunkState run;
  float O;
  if (!split.part) {
    run = chunk(c_lo, O);
    for (int c = c_lo + 1; c < c_lo + n_c; ++c) {
      float o;
      const ChunkState s = chunk(c, o);
      merge_chunk(run, O, s, o);
    }
  } else {
    const int z = blockIdx.z;
    run = chunk(c_lo + z, O);
    if (n_c > 1) {
      float* mine = split.part + (row_head * split.chunks + z) * ATT_PART_FLOATS;
      if (d == 0) {
        mine[0] = run.m;
        mine[1] = run.l;
      }
      if (d < D) mine[2 + d] = O;
      __threadfence();  // this chunk's state is visible before it is counted
      __syncthreads();
      if (d == 0) sh.last = atomicAdd(split.counters + row_head, 1) == n_c - 1;
      __syncthreads();
      if (!sh.last) return;
      __threadfence();
      if (d == 0) split.counters[row_head] = 0;
      const float* parts = split.part + row_head * split.chunks * ATT_PART_FLOATS;
      run = ChunkState{__ldcg(parts), __ldcg(parts + 1)};
      O = d < D ? __ldcg(parts + 2 + d) : 0.f;
      for (int c = 1; c < n_c; ++c) {
        const float* pc = parts + (size_t)c * ATT_PART_FLOATS;
        merge_chunk(run, O, ChunkState{__ldcg(pc), __ldcg(pc + 1)}, d < D ? __ldcg(pc + 2 + d) : 0.f);
      }
    }
  }
  const float inv = __fdiv_rn(1.f, run.l);
  if (d < D) {  // whole warps (D a multiple of 32): quantize32 below
    const float r = __fmul_rn(O, inv);
    out[at + d] = r;
    if (xq) quantize32(r, d % 32, xq + at + d, xd + (at + d) / 32);
  }
}

// ---- host test entry points ----

// cudaMalloc'd bytes on the current device, freed on scope exit (also when a later step throws)
// the KvType of a GGML type id; std::invalid_argument naming `what` for any other id
KvType kv_type_id(int id, const char* what) {
  for (KvType t : {KvType::F16, KvType::Q8_0, KvType::Q4_0})
    if (id == (int)t) return t;
  throw std::invalid_argument(std::string(what) + ": type id " + std::to_string(id) +
                              " is not a KV type (f16 = 1, q8_0 = 8, q4_0 = 2)");
}

void require(bool ok, const std::string& what) {
  if (!ok) throw std::invalid_argument(what);
}

// the head shape every entry point takes: positive sizes, whole groups of query heads per kv head
void check_heads(int n_head, int n_kv_head, int head_dim) {
  require(n_kv_head > 0, "n_kv_head must be positive, got " + std::to_string(n_kv_head));
  require(n_head > 0 && n_head % n_kv_head == 0,
          "n_head must be a positive multiple of n_kv_head, got " + std::to_string(n_head));
  require(head_dim > 0, "head_dim must be positive, got " + std::to_string(head_dim));
}

}  // namespace

namespace {

// rows a (and b, when two: the same type) written in one launch
void write_rows(KvType t, const KvRows& a, const KvRows& b, int n_z, int T, int row, const int32_t* slots,
                cudaStream_t stream) {
  if (T <= 0) return;
  // the row is quantized as consecutive 32-blocks: the same as per head, since head_dim is whole blocks
  if (t == KvType::F16)
    LLL_LAUNCH(kv_write_f16, dim3(T, (row + 255) / 256, n_z), 256, 0, stream)(a, b, row, slots);
  else if (t == KvType::Q8_0)
    LLL_LAUNCH(kv_write_q8_0, dim3(T, row / QK, n_z), 32, 0, stream)(a, b, row, slots);
  else
    LLL_LAUNCH(kv_write_q4_0, dim3(T, row / QK, n_z), 32, 0, stream)(a, b, row, slots);
  check_launch("kv_write");
}

}  // namespace

void kv_write(KvType t, const float* x, int T, int row, const int32_t* slots, uint8_t* pool, size_t row_bytes,
              cudaStream_t stream) {
  const KvRows a{x, pool, row_bytes};
  write_rows(t, a, a, 1, T, row, slots, stream);
}

void kv_write_kv(KvType k_type, const float* k, uint8_t* k_pool, size_t k_row_bytes, KvType v_type, const float* v,
                 uint8_t* v_pool, size_t v_row_bytes, int T, int row, const int32_t* slots, cudaStream_t stream) {
  const KvRows a{k, k_pool, k_row_bytes}, b{v, v_pool, v_row_bytes};
  if (k_type == v_type) return write_rows(k_type, a, b, 2, T, row, slots, stream);
  write_rows(k_type, a, a, 1, T, row, slots, stream);
  write_rows(v_type, b, b, 1, T, row, slots, stream);
}

void rope_kv_write(float* q, int n_head, const float* k, const float* v, int n_kv_head, int T, int head_dim, int n_rot,
                   bool neox, const float* cs, const float* sn, KvType k_type, uint8_t* k_pool, size_t k_row_bytes,
                   KvType v_type, uint8_t* v_pool, size_t v_row_bytes, const int32_t* slots, cudaStream_t stream) {
  if (T <= 0) return;
  const int row = n_kv_head * head_dim, q_units = (n_head * (n_rot / 2) + 31) / 32, kv_units = (row + 31) / 32;
  const RopeKv p{q,      k,      v,      n_head,      n_kv_head,   head_dim, n_rot, neox,  cs,
                 sn,     k_pool, v_pool, k_row_bytes, v_row_bytes, k_type,   v_type, slots};
  LLL_LAUNCH(rope_kv_write_kernel, dim3(T, std::max(q_units, kv_units), 3), 32, 0, stream)(p);
  check_launch("rope_kv_write");
}

void kv_to_cache(const KvTransformsDev& tf, float* q, float* k, float* v, int n, int n_head, int n_kv_head,
                 int head_dim, cudaStream_t stream) {
  if (n <= 0) return;
  const bool equalize = tf.k_scale != nullptr;
  // per vector the CPU's order: center K, equalize K and q, rotate q and K; rotate V
  if (tf.center_k || equalize || tf.rotate_k) {
    HeadOps ko;
    ko.sub = tf.center_k ? tf.k_bias : nullptr;
    ko.div = tf.k_scale;
    ko.rotate = tf.rotate_k;
    launch_head_transform(k, n * n_kv_head, n_kv_head, head_dim, ko, stream);
  }
  if (equalize || tf.rotate_k) {
    HeadOps qo;
    qo.mul = tf.k_scale;
    qo.rotate = tf.rotate_k;
    qo.group = n_head / n_kv_head;
    launch_head_transform(q, n * n_head, n_head, head_dim, qo, stream);
  }
  if (tf.rotate_v) {
    HeadOps vo;
    vo.rotate = true;
    launch_head_transform(v, n * n_kv_head, n_kv_head, head_dim, vo, stream);
  }
}

void kv_from_cache(const KvTransformsDev& tf, float* att, int n, int n_head, int n_kv_head, int head_dim,
                   cudaStream_t stream) {
  if (n <= 0 || !(tf.rotate_v || tf.center_v)) return;
  HeadOps ao;  // rotate back, then add the V bias of each head's kv head
  ao.rotate = tf.rotate_v;
  ao.add = tf.center_v ? tf.v_bias : nullptr;
  ao.group = n_head / n_kv_head;
  launch_head_transform(att, n * n_head, n_head, head_dim, ao, stream);
}

void paged_attention(const AttentionShape& a, const AttentionRowsDev& rows, const float* q, const KvView& k_cache,
                     const KvView& v_cache, float* out, cudaStream_t stream, int8_t* xq, float* xd,
                     const AttentionSplit& split) {
  if (a.head_dim <= 0 || a.head_dim % 32 || a.head_dim > ATT_MAX_DIM)
    throw std::invalid_argument("paged_attention: head_dim must be a multiple of 32 up to " +
                                std::to_string(ATT_MAX_DIM) + ", got " + std::to_string(a.head_dim));
  if (rows.T <= 0) return;
  if (split.part && (!split.counters || split.chunks <= 0))
    throw std::invalid_argument("paged_attention: a split launch needs its counters and a chunk count");
  LLL_LAUNCH(paged_attention_kernel, dim3(rows.T, a.n_head, split.part ? split.chunks : 1), 32 * ATT_WARPS, 0,
             stream)(a, rows, q, k_cache, v_cache, out, xq, xd, split);
  check_launch("paged_attention");
}

void kv_write_host(int kv_type, const float* x, int T, int row, int head_dim, const int32_t* slots, int n_slots,
                   uint8_t* pool) {
  const KvType t = kv_type_id(kv_type, "kv_type");
  kv_check_len(t, head_dim, "head_dim");
  require(row > 0 && row % head_dim == 0, "row must be whole heads of head_dim " + std::to_string(head_dim) +
                                              " values, got " + std::to_string(row));
  require(T >= 0, "T must not be negative");
  require(n_slots > 0, "n_slots must be positive");
  std::vector<bool> seen(n_slots);
  for (int i = 0; i < T; ++i) {  // a slot written twice would be a race on the device
    require(slots[i] >= 0 && slots[i] < n_slots && !seen[slots[i]],
            "slots: entry " + std::to_string(i) + " (" + std::to_string(slots[i]) +
                ") is out of range or written twice");
    seen[slots[i]] = true;
  }
  const size_t rb = kv_row_bytes(t, row), pool_bytes = (size_t)n_slots * rb;
  DeviceArray<float> dx(x, (size_t)T * row);
  DeviceArray<int32_t> ds(slots, T);
  DeviceArray<uint8_t> dp(pool, pool_bytes);
  kv_write(t, dx.p, T, row, ds.p, dp.p, rb, 0);
  dp.copy_out(pool, pool_bytes);
}

void kv_transforms_host(bool rotate_k, bool rotate_v, bool center_k, bool center_v, const float* k_scale,
                        const float* k_bias, const float* v_bias, float* q, float* k, float* v, float* att, int n,
                        int n_head, int n_kv_head, int head_dim) {
  check_heads(n_head, n_kv_head, head_dim);
  require(n >= 0, "n must not be negative");
  require(!center_k || k_bias, "k_bias: center_k needs it");
  require(!center_v || v_bias, "v_bias: center_v needs it");
  const size_t qn = (size_t)n * n_head * head_dim, kn = (size_t)n * n_kv_head * head_dim;
  const size_t cn = (size_t)n_kv_head * head_dim;  // a per-channel vector
  DeviceArray<float> dq(q, qn), dk(k, kn), dv(v, kn), datt(att, att ? qn : 0);
  DeviceArray<float> dks(k_scale, cn), dkb(k_bias, cn), dvb(v_bias, cn);
  KvTransformsDev tf;
  tf.rotate_k = rotate_k;
  tf.rotate_v = rotate_v;
  tf.center_k = center_k;
  tf.center_v = center_v;
  tf.k_scale = k_scale ? dks.p : nullptr;
  tf.k_bias = k_bias ? dkb.p : nullptr;
  tf.v_bias = v_bias ? dvb.p : nullptr;
  kv_to_cache(tf, dq.p, dk.p, dv.p, n, n_head, n_kv_head, head_dim, 0);
  if (att) kv_from_cache(tf, datt.p, n, n_head, n_kv_head, head_dim, 0);
  dq.copy_out(q, qn);
  dk.copy_out(k, kn);
  dv.copy_out(v, kn);
  if (att) datt.copy_out(att, qn);
}

namespace {

// paged_attention_host and paged_attention_tiled_host: the checks, the copies, then the row or the tiled kernel
void attention_host(int n_head, int n_kv_head, int head_dim, int block_size, float scale, float softcap, int window,
                    int T, const int32_t* positions, const int32_t* seq_index, const int32_t* block_tables, int n_seq,
                    int max_blocks, const float* q, int k_type, const uint8_t* k_pool, int v_type,
                    const uint8_t* v_pool, int n_slots, float* out, bool tiled, bool split) {
  check_heads(n_head, n_kv_head, head_dim);
  require(head_dim % 32 == 0 && head_dim <= ATT_MAX_DIM, "head_dim must be a multiple of 32 up to " +
                                                             std::to_string(ATT_MAX_DIM) + ", got " +
                                                             std::to_string(head_dim));
  const KvType kt = kv_type_id(k_type, "k_type"), vt = kv_type_id(v_type, "v_type");
  require(block_size > 0, "block_size must be positive");
  require(softcap >= 0.f, "softcap must not be negative");
  require(window >= 0, "window must not be negative");
  require(T >= 0, "T must not be negative");
  require(n_seq > 0 && max_blocks > 0 && n_slots > 0, "n_seq, max_blocks and n_slots must be positive");
  for (int t = 0; t < T; ++t) {  // every block a row reads (those of its visible keys) lies in the pools
    const int p = positions[t], s = seq_index[t];
    require(s >= 0 && s < n_seq, "seq_index: entry " + std::to_string(t) + " is out of range");
    require(p >= 0 && p / block_size < max_blocks,
            "positions: entry " + std::to_string(t) + " is negative or past the block table");
    const int lo = window > 0 ? std::max(0, p - window + 1) : 0;
    for (int b = lo / block_size; b <= p / block_size; ++b) {
      const int blk = block_tables[(size_t)s * max_blocks + b];
      require(blk >= 0 && ((int64_t)blk + 1) * block_size <= n_slots,
              "block_tables: sequence " + std::to_string(s) + " block " + std::to_string(b) + " is out of the pool");
    }
  }
  const int row = n_kv_head * head_dim;
  const size_t k_row = kv_row_bytes(kt, row), v_row = kv_row_bytes(vt, row);
  const size_t qn = (size_t)T * n_head * head_dim;
  DeviceArray<float> dq(q, qn), dout(qn);
  DeviceArray<int32_t> dpos(positions, T), dseq(seq_index, T), dbt(block_tables, (size_t)n_seq * max_blocks);
  DeviceArray<uint8_t> dk(k_pool, k_row * n_slots), dv(v_pool, v_row * n_slots);
  const AttentionShape a{n_head, n_kv_head, head_dim, block_size, scale, softcap, window};
  const AttentionRowsDev r{T, dpos.p, dseq.p, dbt.p, max_blocks};
  const KvView kc{dk.p, kt, k_row, k_row / n_kv_head}, vc{dv.p, vt, v_row, v_row / n_kv_head};
  if (tiled) {
    const std::vector<int32_t> tiles = attention_tiles(T, positions, seq_index);
    DeviceArray<int32_t> dtiles(tiles.data(), tiles.size());
    paged_attention_tiled(a, r, dtiles.p, (int)tiles.size(), dq.p, kc, vc, dout.p, 0);
  } else if (split) {
    const int chunks = attention_chunks(max_blocks, block_size);
    DeviceArray<float> part((size_t)T * n_head * chunks * ATT_PART_FLOATS);
    const std::vector<int> zeros((size_t)T * n_head, 0);
    DeviceArray<int> counters(zeros.data(), zeros.size());
    paged_attention(a, r, dq.p, kc, vc, dout.p, 0, nullptr, nullptr, AttentionSplit{part.p, counters.p, chunks});
    std::vector<int> left(zeros.size());
    counters.copy_out(left.data(), left.size());
    for (int n : left) require(n == 0, "paged_attention: a split launch left a counter set");
  } else {
    paged_attention(a, r, dq.p, kc, vc, dout.p, 0);
  }
  dout.copy_out(out, qn);
}

}  // namespace

void paged_attention_host(int n_head, int n_kv_head, int head_dim, int block_size, float scale, float softcap,
                          int window, int T, const int32_t* positions, const int32_t* seq_index,
                          const int32_t* block_tables, int n_seq, int max_blocks, const float* q, int k_type,
                          const uint8_t* k_pool, int v_type, const uint8_t* v_pool, int n_slots, float* out,
                          bool split) {
  attention_host(n_head, n_kv_head, head_dim, block_size, scale, softcap, window, T, positions, seq_index,
                 block_tables, n_seq, max_blocks, q, k_type, k_pool, v_type, v_pool, n_slots, out, false, split);
}

void paged_attention_tiled_host(int n_head, int n_kv_head, int head_dim, int block_size, float scale, float softcap,
                                int window, int T, const int32_t* positions, const int32_t* seq_index,
                                const int32_t* block_tables, int n_seq, int max_blocks, const float* q, int k_type,
                                const uint8_t* k_pool, int v_type, const uint8_t* v_pool, int n_slots, float* out) {
  attention_host(n_head, n_kv_head, head_dim, block_size, scale, softcap, window, T, positions, seq_index,
                 block_tables, n_seq, max_blocks, q, k_type, k_pool, v_type, v_pool, n_slots, out, true, false);
}

}  // namespace lll::cuda
