// The device-side pieces of the CUDA stage (cuda_stage.cu), each the twin of a named CPU reference. Every pointer
// is a device pointer unless it says host; every launch goes on `stream` and returns at once; a failed launch is a
// std::runtime_error carrying the CUDA error string (check_launch). Shapes are checked by the caller (the Model
// checks the batch and the weights before a stage runs).
#pragma once
#include "device_compat.cuh"

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "../attention.h"
#include "../kv_format.h"
#include "qmat.cuh"

namespace lll::cuda {

inline void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    cudaGetLastError();
    throw std::runtime_error(std::string("CUDA ") + what + ": " + cudaGetErrorString(e));
  }
}
inline void check_launch(const char* what) { check(cudaGetLastError(), what); }

// ---- the block's elementwise and per-row ops (ops.cu): twins of ops.h ----

// out [rows][n] = x * (1 / sqrt(mean(x^2) + eps)) * w per row (in place allowed)
void rms_norm(const float* x, const float* w, int rows, int n, float eps, float* out, cudaStream_t stream);
// y [rows][n] += bias [n] (bias nullptr: nothing)
void add_bias(float* y, const float* bias, int rows, int n, cudaStream_t stream);
// h [n] += a [n]
void add(float* h, const float* a, size_t n, cudaStream_t stream);
// a step's token ids fed from the step before on the device (the engine's pipelining): ids [T], each id < 0 replaced
// by fed[-id - 1] (the step before's candidates row -id - 1, its top candidate)
void feed_tokens(int32_t* ids, int T, const int32_t* fed, cudaStream_t stream);
// x [T][x_heads][head_dim] and y [T][y_heads][head_dim] (q and k, one launch): the leading n_rot dims of each head
// rotated by the angles cs, sn [T][n_rot / 2] (pairs (i, i + n_rot/2) when neox, else (2i, 2i+1))
void rope(float* x, int x_heads, float* y, int y_heads, int T, int head_dim, int n_rot, bool neox, const float* cs,
          const float* sn, cudaStream_t stream);
// g [n] = act(g) * u: silu_mul when silu, else gelu_tanh_mul
void act_mul(float* g, const float* u, size_t n, bool silu, cudaStream_t stream);
// The producers of a product's input fused with its quantization (quantize_x's bits, xq [rows][n], xd [rows][n /
// 32], n a multiple of 32): rms_norm that also quantizes out; act_mul's values quantized instead of stored (g is
// left as it was)
void rms_norm_quantize(const float* x, const float* w, int rows, int n, float eps, float* out, int8_t* xq, float* xd,
                       cudaStream_t stream);
void act_mul_quantize(const float* g, const float* u, size_t n, bool silu, int8_t* xq, float* xd,
                      cudaStream_t stream);
// x [n] = cap * tanh(x / cap)
void softcap(float* x, size_t n, float cap, cudaStream_t stream);
// out [n][d] = rows rows[i] of x [.][d]
void gather_rows(const float* x, const int32_t* rows, int n, int d, float* out, cudaStream_t stream);

// ---- products (qgemv.cu, gemm.cu, dequant.cuh) ----

// activations per 32 as on the CPU (kernels.h): x [n][k] float -> xq [n][k] int8, xd [n][k / 32] with
// x ~= xd * xq, xd = amax / 127, xq = round-to-nearest(x / xd)
void quantize_x(const float* x, int n, int k, int8_t* xq, float* xd, cudaStream_t stream);
// the types the decode product takes (Q4_0, Q4_1, Q5_0, Q8_0, Q4_K, Q6_K)
bool qgemv_supports(int type_id);
// y [n][m] = x [n][k] . W^T, 1 <= n <= QGEMV_MAX_ROWS (qmat.cuh), x given quantized (quantize_x); each output is
// computed by the same operations in the same order whatever n is and whichever rows are beside it, so a row's
// products are bit-identical at every step size (the batch-invariance contract, kernels.h): the terms of its
// 32-weight steps, each rounded on its own, summed pairwise within chunks of 32 steps, the chunk sums added in
// order (qstep.cuh). The decode kernel (qgemv_kernel.cuh: a warp per weight row, lane l taking step 32C + l of
// chunk C) computes it at small n, the tensor-core tile kernel (mmq_kernel.cuh) from LOCALLLM_CUDA_MMQ rows on
// (default 128; 0: never), both in that order. W: m rows of row_bytes, each at a 2-byte aligned address (4 for
// Q4_1 and Q4_K, whose blocks are whole words): a Q6_K row of an odd number of 210-byte super-blocks (the 0.5B's
// ffn_down, k = 4864 = 19 x 256) is read with 16-bit loads as it lies. In the same launch, as the separate
// kernels would (one float addition each): bias [m] (nullptr: none) added to each output as add_bias adds it,
// then, with add_to_y, the result added to y's value as add adds it (y += x . W^T + bias: the residual stream's
// h += a).
void qgemv(int type_id, const uint8_t* w, size_t row_bytes, int m, int k, const int8_t* xq, const float* xd, int n,
           float* y, const float* bias, bool add_to_y, cudaStream_t stream);
// Several products of one quantized x in one launch (q, k and v; gate and up), each as qgemv computes it alone, the
// matrices of any of its types, each with its own output, bias and add_to_y (QgemvMat, qmat.cuh). mmq_from: the
// smallest n the tile kernel takes (0: never; -1: LOCALLLM_CUDA_MMQ's, 128 by default). then (nullptr: nothing):
// the kernel that follows the products (QgemvThen, qmat.cuh), in the decode kernel's tail where it runs them (an
// RMSNorm there only up to QGEMV_THEN_NORM_ROWS rows, which its last block normalizes one after another), else
// launched after them
void qgemv_multi(const QgemvMat* mats, int n_mats, int k, const int8_t* xq, const float* xd, int n,
                 cudaStream_t stream, int mmq_from = -1, const QgemvThen* then = nullptr);

// the types qgemm and dequant_rows take: every type the CPU computes (quant_formats.h)
bool qgemm_supports(int type_id);
// y [n][m] = x [n][k] . W^T for any n >= 1 (prefill, verification): W's blocks dequantized to f16 tiles in shared
// memory, x rounded to f16, tensor-core products with float accumulation (gemm.cu). k is whole blocks of the type.
void qgemm(int type_id, const uint8_t* w, size_t row_bytes, int m, int k, const float* x, int n, float* y,
           cudaStream_t stream);
// the embedding: out [n][k] = rows ids[i] of W dequantized (exactly as gguf's dequantize) times scale
void dequant_rows(int type_id, const uint8_t* w, size_t row_bytes, int k, const int32_t* ids, int n, float scale,
                  float* out, cudaStream_t stream);

// ---- sampling's candidates (top_k.cu): twin of top_k.h ----

// the k largest of each row of x [n][stride] among columns [0, n_valid), by value descending, ties by column
// ascending (NaN above +inf, -0 equal to +0): ids [n][k], vals [n][k]; 1 <= k <= min(n_valid, 256). With scratch
// part_ids, part_vals of n * top_k_slices(n_valid) * k each, a row is taken by slices in blocks of their own,
// then their candidates (top_k.cu, "Slices"): the same result, sooner for a few long rows.
constexpr int TOPK_SLICE_MIN = 4096, TOPK_SLICES_MAX = 32;
int top_k_slices(int n_valid);
void top_k(const float* x, int n, int stride, int n_valid, int k, int32_t* ids, float* vals, cudaStream_t stream,
           int32_t* part_ids = nullptr, float* part_vals = nullptr);

// ---- KV cache (kv.cu): twins of kv_format.h, kv_cache.h and kv_transforms.h ----

// x [T][row] float (row = n_kv_head * head_dim) -> the rows slots[t] of one layer's pool, each row_bytes bytes
// (kv_row_bytes(t, row)), quantized per head_dim-long head exactly as kv_quantize_row (same bytes)
void kv_write(KvType t, const float* x, int T, int row, const int32_t* slots, uint8_t* pool, size_t row_bytes,
              cudaStream_t stream);
// kv_write of a layer's K and V, in one launch where their types agree
void kv_write_kv(KvType k_type, const float* k, uint8_t* k_pool, size_t k_row_bytes, KvType v_type, const float* v,
                 uint8_t* v_pool, size_t v_row_bytes, int T, int row, const int32_t* slots, cudaStream_t stream);

// rope of q and k, then kv_write_kv of k and v, in one launch (where no KV transform comes between), the same bits
// as the three apart: q [T][n_head][head_dim] rotated in place; k [T][n_kv_head][head_dim] rotated on its way into
// k_pool (k itself is left unrotated); v written as it is. cs, sn [T][n_rot / 2] as rope takes them.
void rope_kv_write(float* q, int n_head, const float* k, const float* v, int n_kv_head, int T, int head_dim, int n_rot,
                   bool neox, const float* cs, const float* sn, KvType k_type, uint8_t* k_pool, size_t k_row_bytes,
                   KvType v_type, uint8_t* v_pool, size_t v_row_bytes, const int32_t* slots, cudaStream_t stream);

// One layer's KV transforms (kv_transforms.h), as KvTransforms::to_cache / from_cache do them on the CPU.
struct KvTransformsDev {
  bool rotate_k = false, rotate_v = false, center_k = false, center_v = false;
  const float* k_scale = nullptr;  // [n_kv_head * head_dim] this layer's K divisors, nullptr: not equalized
  const float* k_bias = nullptr;   // [n_kv_head * head_dim] (center_k), as the CPU's to_cache gets it
  const float* v_bias = nullptr;   // [n_kv_head * head_dim] (center_v: added back by from_cache)
};
// q [n][n_head][head_dim], k, v [n][n_kv_head][head_dim] after RoPE -> what the cache stores and the queries
void kv_to_cache(const KvTransformsDev& tf, float* q, float* k, float* v, int n, int n_head, int n_kv_head,
                 int head_dim, cudaStream_t stream);
// att [n][n_head][head_dim]: the attention over the stored V -> over the true V
void kv_from_cache(const KvTransformsDev& tf, float* att, int n, int n_head, int n_kv_head, int head_dim,
                   cudaStream_t stream);

// Which cached positions each query row sees, as attention.h's AttentionRows, with device arrays. Everything that
// varies from step to step is in device memory (a replayed CUDA graph keeps only T and max_blocks, the row pitch).
struct AttentionRowsDev {
  int T;
  const int32_t* positions;     // [T]
  const int32_t* seq_index;     // [T]
  const int32_t* block_tables;  // [n_seq][max_blocks]
  int max_blocks;
};
// Chunks: paged_attention sums a row's visible keys by chunks of ATT_CHUNK positions (cut at its multiples), each
// chunk's online softmax by 8 warps, the chunks merged in position order (kv.cu). The order depends on the row's
// own position and window alone, so a row's bits are the same in any step, alone or split.
constexpr int ATT_CHUNK = 128;
constexpr int ATT_PART_FLOATS = 256 + 2;  // a chunk's state in AttentionSplit::part: max, weight, head_dim outputs
// A split launch: one thread block per (row, head, chunk), so that a few rows over a long context fill the card
// (a decode step), the chunks' states meeting in part. part: rows * n_head * chunks * ATT_PART_FLOATS floats;
// counters: rows * n_head ints, zero before the first launch (the kernel sets them back); chunks: the most chunks
// a row of the launch can have (position / ATT_CHUNK + 1 at the block tables' end). part nullptr: a block per
// (row, head) walks the row's chunks itself (a prefill step has blocks enough); the same bits.
struct AttentionSplit {
  float* part = nullptr;
  int* counters = nullptr;
  int chunks = 0;
};
// the most chunks a row of block tables of max_blocks blocks of block_size positions has
inline int attention_chunks(int max_blocks, int block_size) {
  return (int)(((int64_t)max_blocks * block_size + ATT_CHUNK - 1) / ATT_CHUNK);
}
// paged_attention (attention.h) on the device: q [T][n_head][head_dim] float; k_cache / v_cache views of one
// layer's device pools; out [T][n_head][head_dim]. Online softmax over the visible keys (causal, window,
// soft-cap as AttentionShape says), float accumulation, by chunks (above). With xq, out is also quantized per 32
// into xq [T][n_head * head_dim], xd (quantize_x's bits: the next product's input, in the same launch).
void paged_attention(const AttentionShape& a, const AttentionRowsDev& rows, const float* q, const KvView& k_cache,
                     const KvView& v_cache, float* out, cudaStream_t stream, int8_t* xq = nullptr,
                     float* xd = nullptr, const AttentionSplit& split = {});
// paged_attention for prefill (attention_tiles.cu), the same results to float rounding: one thread block per
// (tile, query head) reads each visible key and value once per tile instead of once per row. tiles [n_tiles] holds
// row starts: tile i covers the rows tiles[i] + r, r < 16 (ATTENTION_TILE_ROWS), that are below T, of row
// tiles[i]'s sequence and at position positions[tiles[i]] + r, ending at the first row that is not; every row
// must be in exactly one tile (attention_tiles builds the list).
void paged_attention_tiled(const AttentionShape& a, const AttentionRowsDev& rows, const int32_t* tiles, int n_tiles,
                           const float* q, const KvView& k_cache, const KvView& v_cache, float* out,
                           cudaStream_t stream);
// host arrays positions, seq_index [T] -> the row starts of paged_attention_tiled's tiles: a new tile at row 0,
// where the sequence changes or the position is not the previous row's + 1, and after 16 rows of one run
std::vector<int32_t> attention_tiles(int T, const int32_t* positions, const int32_t* seq_index);

}  // namespace lll::cuda
