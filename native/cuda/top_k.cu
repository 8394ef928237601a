// Sampling's candidate selection on the device (device_ops.cuh), and its host test entry point (cuda_api.h):
// top_k takes x [n][stride] (logits rows; the columns [n_valid, stride) are padding and never taken) and writes
// the k largest values of each row, ids [n][k] and vals [n][k], so that a decode step hands sampling k candidates
// a row instead of a whole vocabulary row. The twin of runtime/sampling.py's _largest: ordered by value
// descending, ties by index ascending (of several values equal at the boundary the lowest indices are kept).
// Special values in numpy's sort order: NaN above +inf above every finite value above -inf; -0.0 equals +0.0;
// vals are the stored floats (NaN payloads and the sign of zero kept).
//
// Design: one block of 1024 threads a row, everything exact and independent of scheduling.
//   key:    each float maps to an order-preserving 32-bit key (order_key): -0.0 first made +0.0, every NaN
//           0xFFFFFFFF, else bits ^ (negative ? 0xFFFFFFFF : 0x80000000). Equal values <=> equal keys.
//   select: radix select on the key, 4 passes of 8 bits from the top. A pass histograms (256 bins in shared
//           memory, one atomicAdd per bin per warp via __match_any_sync) the current digit of the elements whose
//           higher digits equal the prefix found so far; warp 0 then walks the bins from the top (a warp scan of
//           8 bins a lane) to the digit where the count from the top reaches `need`, the number still to take.
//           After the 4 passes the prefix is kth, the key of the k-th largest element; k - need elements have a
//           key above kth, and `ties` (the last pass's count at its digit) have key == kth, of which need are
//           taken.
//   collect: the k candidates into shared memory. When all the ties are taken (need == ties, the usual case),
//           every key >= kth at a slot from a shared counter. Otherwise the keys > kth so, and the ties in index
//           order: a block scan per 1024-element step ranks each tie among the ties before it, and ranks below
//           need are kept.
//   sort:   each candidate's place is the count of candidates before it in (key descending, index ascending),
//           a total order on distinct indices, so the slots' order from the counter does not matter.
// Reads the row 5 times (4 passes and the collection), from L2 after the first.
//
// Slices: one block a row leaves all but a few multiprocessors idle for a decode step's rows of a vocabulary, so
// with scratch (top_k's part_ids / part_vals) a long row is cut into top_k_slices contiguous slices, a block each
// taking its slice's k candidates (the same kernel over the slice, ids offset by its start), then one block a row
// takes the k of the slices' candidates laid end to end (ids read from the first stage). Exact: the k largest of a
// row are among its slices' k largest, and among equal keys the candidates' order in the scratch is their ids'
// order (slices in column order, each sorted by key descending, then id ascending), so taking the lowest
// positions among ties takes the lowest ids.
#ifndef LLL_CUDA_EMULATED
#include <cub/block/block_scan.cuh>
#endif
#include "device_compat.cuh"

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "cuda_api.h"
#include "device_array.cuh"
#include "device_ops.cuh"

namespace lll::cuda {

constexpr int TOPK_MAX = 256;

namespace {

constexpr int THREADS = 1024;      // one block a row
constexpr int ITEMS = 4;           // elements a thread loads per step of a histogram pass
constexpr int BINS = 256;          // the values of one 8-bit digit of the key
constexpr uint32_t NO_BIN = BINS;  // an element a pass does not count
constexpr unsigned FULL = 0xFFFFFFFFu;

static_assert(TOPK_MAX <= THREADS, "the sort gives each candidate one thread");

// order-preserving: a < b as numpy sorts (NaN largest, -0.0 == +0.0) <=> order_key(a) < order_key(b)
__device__ __forceinline__ uint32_t order_key(float f) {
  uint32_t b = __float_as_uint(f);
  if ((b & 0x7FFFFFFFu) > 0x7F800000u) return 0xFFFFFFFFu;  // NaN: above +inf (0xFF800000)
  if (b == 0x80000000u) b = 0;                              // -0.0 as +0.0
  return b ^ ((b & 0x80000000u) ? 0xFFFFFFFFu : 0x80000000u);
}

// hist [BINS] += for row [n_valid]: the count of elements with (key & mask) == prefix at each value of the digit
// (key >> shift) & 0xFF. All threads of the block call it (the step count is the block's, so warps are whole).
__device__ void histogram(const float* row, int n_valid, uint32_t prefix, uint32_t mask, int shift, uint32_t* hist) {
  const unsigned lane = threadIdx.x % 32;
  for (int base = 0; base < n_valid; base += THREADS * ITEMS) {
    uint32_t bin[ITEMS];
#pragma unroll
    for (int j = 0; j < ITEMS; ++j) {
      const int i = base + j * THREADS + (int)threadIdx.x;
      bin[j] = NO_BIN;
      if (i < n_valid) {
        const uint32_t key = order_key(row[i]);
        if ((key & mask) == prefix) bin[j] = (key >> shift) & 0xFFu;
      }
    }
#pragma unroll
    for (int j = 0; j < ITEMS; ++j) {
      const unsigned peers = __match_any_sync(FULL, bin[j]);  // the lanes of this warp with the same bin
      if (bin[j] != NO_BIN && lane == (unsigned)(__ffs(peers) - 1)) atomicAdd(&hist[bin[j]], (uint32_t)__popc(peers));
    }
  }
}

// Warp 0 (all 32 lanes): given hist [BINS] with hist[255] + ... + hist[0] >= *need >= 1, finds the digit d with
// hist[255] + ... + hist[d + 1] < *need <= hist[255] + ... + hist[d], and sets *prefix |= d << shift,
// *need -= hist[255] + ... + hist[d + 1], *ties = hist[d]. Lane l holds the bins 255 - 8l down to 248 - 8l.
__device__ void find_digit(const uint32_t* hist, int shift, uint32_t* prefix, uint32_t* need, uint32_t* ties) {
  const int lane = (int)threadIdx.x;
  const int top = BINS - 1 - 8 * lane;
  uint32_t sum = 0;
#pragma unroll
  for (int j = 0; j < 8; ++j) sum += hist[top - j];
  uint32_t incl = sum;  // the bins from 255 down to this lane's last
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const uint32_t t = __shfl_up_sync(FULL, incl, o);
    if (lane >= o) incl += t;
  }
  const uint32_t want = *need;
  __syncwarp();  // every lane has read *need before the one lane below writes it
  uint32_t above = incl - sum;  // the bins above this lane's first
  if (above < want && want <= incl) {  // exactly one lane
    for (int j = 0; j < 8; ++j) {
      const uint32_t c = hist[top - j];
      if (above + c >= want) {
        *prefix |= (uint32_t)(top - j) << shift;
        *need = want - above;
        *ties = c;
        break;
      }
      above += c;
    }
  }
}

// grid (n, slices), block THREADS. Without x_ids: slice blockIdx.y of row blockIdx.x of x [n][stride] (columns
// [0, n_valid) cut into `slices` of ceil(n_valid / slices)) -> ids, vals [n][slices][k], ids the columns. With
// x_ids (slices 1): row blockIdx.x of x [n][stride] (n_valid = stride), whose element i stands for column
// x_ids[row][i] -> ids, vals [n][k].
__global__ void __launch_bounds__(THREADS) top_k_kernel(const float* x, const int32_t* x_ids, int stride, int n_valid,
                                                        int slices, int k, int32_t* ids, float* vals) {
  using Scan = cub::BlockScan<int, THREADS>;
  __shared__ typename Scan::TempStorage scan;
  __shared__ uint32_t hist[BINS];
  __shared__ uint32_t s_prefix, s_need, s_ties;
  __shared__ int s_count;
  __shared__ uint32_t cand_key[TOPK_MAX];
  __shared__ int32_t cand_id[TOPK_MAX];
  __shared__ float cand_val[TOPK_MAX];

  const int len = (n_valid + slices - 1) / slices, lo = (int)blockIdx.y * len;
  const float* row = x + (size_t)blockIdx.x * stride + lo;
  const int32_t* row_ids = x_ids ? x_ids + (size_t)blockIdx.x * stride : nullptr;
  n_valid = min(n_valid - lo, len);  // this slice's: at least k (top_k_slices)
  const int t = (int)threadIdx.x;
  if (t == 0) {
    s_prefix = 0;
    s_need = (uint32_t)k;
    s_count = 0;
  }
  uint32_t mask = 0;  // the key bits the passes so far have fixed
  for (int shift = 24; shift >= 0; shift -= 8) {
    if (t < BINS) hist[t] = 0;
    __syncthreads();
    histogram(row, n_valid, s_prefix, mask, shift, hist);
    __syncthreads();
    if (t < 32) find_digit(hist, shift, &s_prefix, &s_need, &s_ties);
    mask |= 0xFFu << shift;
    __syncthreads();  // the walk done before hist is cleared; its results visible
  }
  const uint32_t kth = s_prefix;
  const int need = (int)s_need;
  const int n_above = k - need;  // the elements with key > kth

  if ((uint32_t)need == s_ties) {  // every element with key >= kth: k of them
    for (int i = t; i < n_valid; i += THREADS) {
      const float v = row[i];
      const uint32_t key = order_key(v);
      if (key >= kth) {
        const int c = atomicAdd(&s_count, 1);
        cand_key[c] = key;
        cand_id[c] = row_ids ? row_ids[i] : lo + i;
        cand_val[c] = v;
      }
    }
  } else {  // keys > kth at slots [0, n_above), the first need ties in index order at [n_above, k)
    int taken = 0;  // the ties in the steps before (the same in every thread)
    for (int base = 0; base < n_valid; base += THREADS) {
      const int i = base + t;
      float v = 0.f;
      uint32_t key = 0;
      if (i < n_valid) {
        v = row[i];
        key = order_key(v);
        if (key > kth) {
          const int c = atomicAdd(&s_count, 1);
          cand_key[c] = key;
          cand_id[c] = row_ids ? row_ids[i] : lo + i;
          cand_val[c] = v;
        }
      }
      const int tie = i < n_valid && key == kth;
      int rank, step_ties;
      Scan(scan).ExclusiveSum(tie, rank, step_ties);
      if (tie && taken + rank < need) {
        const int c = n_above + taken + rank;
        cand_key[c] = key;
        cand_id[c] = row_ids ? row_ids[i] : lo + i;
        cand_val[c] = v;
      }
      taken += step_ties;
      __syncthreads();  // scan's storage is reused by the next step
    }
  }
  __syncthreads();

  if (t < k) {  // candidate t goes to its place in (key descending, index ascending)
    const uint32_t key = cand_key[t];
    const int32_t id = cand_id[t];
    int place = 0;
    for (int j = 0; j < k; ++j) place += cand_key[j] > key || (cand_key[j] == key && cand_id[j] < id);
    const size_t out = ((size_t)blockIdx.x * gridDim.y + blockIdx.y) * k + place;
    ids[out] = id;
    vals[out] = cand_val[t];
  }
}

// std::invalid_argument naming the first bad argument of top_k
void check_args(const char* what, int n, int stride, int n_valid, int k) {
  const std::string w(what);
  if (n < 1) throw std::invalid_argument(w + ": n must be >= 1, got " + std::to_string(n));
  if (n_valid < 1 || n_valid > stride)
    throw std::invalid_argument(w + ": n_valid must be in [1, stride = " + std::to_string(stride) + "], got " +
                                std::to_string(n_valid));
  const int k_max = n_valid < TOPK_MAX ? n_valid : TOPK_MAX;
  if (k < 1 || k > k_max)
    throw std::invalid_argument(w + ": k must be in [1, min(n_valid, " + std::to_string(TOPK_MAX) + ") = " +
                                std::to_string(k_max) + "], got " + std::to_string(k));
}


}  // namespace

int top_k_slices(int n_valid) {
  // slices of at least TOPK_SLICE_MIN columns: the last, n_valid - (s - 1) * ceil(n_valid / s) >= n_valid / s - s
  // + 1, then holds more than TOPK_MAX >= k
  static_assert(TOPK_SLICE_MIN / 2 - TOPK_SLICES_MAX > TOPK_MAX, "a slice holds k candidates");
  return std::max(1, std::min(TOPK_SLICES_MAX, n_valid / TOPK_SLICE_MIN));
}

void top_k(const float* x, int n, int stride, int n_valid, int k, int32_t* ids, float* vals, cudaStream_t stream,
           int32_t* part_ids, float* part_vals) {
  check_args("top_k", n, stride, n_valid, k);
  const int slices = part_ids && part_vals ? top_k_slices(n_valid) : 1;
  if (slices == 1) {
    LLL_LAUNCH(top_k_kernel, dim3(n, 1), THREADS, 0, stream)(x, nullptr, stride, n_valid, 1, k, ids, vals);
  } else {
    LLL_LAUNCH(top_k_kernel, dim3(n, slices), THREADS, 0, stream)(x, nullptr, stride, n_valid, slices, k, part_ids,
                                                                   part_vals);
    LLL_LAUNCH(top_k_kernel, dim3(n, 1), THREADS, 0, stream)(part_vals, part_ids, slices * k, slices * k, 1, k, ids,
                                                              vals);
  }
  check_launch("top_k launch");
}

void top_k_host(const float* x, int n, int stride, int n_valid, int k, int32_t* ids, float* vals, bool sliced) {
  check_args("top_k", n, stride, n_valid, k);
  DeviceArray<float> dx(x, (size_t)n * stride), dvals((size_t)n * k);
  DeviceArray<int32_t> dids((size_t)n * k);
  const size_t part = sliced ? (size_t)n * top_k_slices(n_valid) * k : 0;
  DeviceArray<int32_t> part_ids(part);
  DeviceArray<float> part_vals(part);
  top_k(dx.p, n, stride, n_valid, k, dids.p, dvals.p, nullptr, sliced ? part_ids.p : nullptr,
        sliced ? part_vals.p : nullptr);
  check(cudaDeviceSynchronize(), "top_k");
  dids.copy_out(ids, (size_t)n * k);
  dvals.copy_out(vals, (size_t)n * k);
}

}  // namespace lll::cuda
