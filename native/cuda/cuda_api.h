// The CUDA backend as the C++ side sees it: plain declarations, no CUDA headers, so bind_cuda.cpp and the CPU
// code compile the same with or without the toolkit. Defined in the .cu files of this folder, which CMake builds
// only when it finds nvcc (LLL_CUDA); without them bind_cuda.cpp reports the backend as not compiled.
//
// Errors (no driver, no device, a failing launch) are std::runtime_error carrying the CUDA error string.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace lll::cuda {

struct DeviceInfo {
  int index;
  std::string name;
  size_t total_memory;  // bytes
  size_t free_memory;   // bytes free when asked, device 0 only (0 for the others, or when it could not be opened)
  int major, minor;     // compute capability
};

// the devices this process sees; empty with *error set (the CUDA error string) when the driver or the device is
// missing: never throws
std::vector<DeviceInfo> devices(std::string* error);
int runtime_version();  // CUDA runtime the module was built with, e.g. 13000
int driver_version();   // what the installed driver supports (0 without a driver)

// y [n][m] = x [n][k] . W^T on device 0 for m rows of a quantized type (Q4_0, Q4_1, Q5_0, Q8_0, Q4_K, Q6_K),
// row_bytes each, k weights a row (a multiple of the type's block), any n: the int8 product. Copies w and x in,
// quantizes x per 32 on the device (int8 + scale, as the CPU path), runs the decode kernel, or the tile kernel from
// mmq_from rows on (0: never, 1: always, -1: LOCALLLM_CUDA_MMQ's choice), copies y out. The reference is the
// CPU's matmul over the same rows.
void qgemv_host(int type_id, const uint8_t* w, size_t row_bytes, int m, int k, const float* x, int n, float* y,
                int mmq_from = -1);
bool qgemv_supports(int type_id);

// Test entry points of the other device kernels (device_ops.cuh), host arrays in and out: copy in, run on device
// 0, copy back. Each is compared with its CPU reference by tests/native/test_cuda_*.py.
// y [n][m] = x [n][k] . W^T by the batched product (any n >= 1; qgemm_supports types)
void qgemm_host(int type_id, const uint8_t* w, size_t row_bytes, int m, int k, const float* x, int n, float* y);
// out [n][k] = rows ids[i] of W (m rows) dequantized, times scale
void dequant_rows_host(int type_id, const uint8_t* w, size_t row_bytes, int m, int k, const int32_t* ids, int n,
                       float scale, float* out);
// x [T][row] float quantized into rows slots[t] of pool [n_slots][kv_row_bytes(kv_type, row)] (in and out), per
// head of head_dim values
void kv_write_host(int kv_type, const float* x, int T, int row, int head_dim, const int32_t* slots, int n_slots,
                   uint8_t* pool);
// KvTransforms::to_cache then (when from_cache) KvTransforms::from_cache on the device, in place on host arrays:
// q [n][n_head][head_dim], k, v [n][n_kv_head][head_dim], att [n][n_head][head_dim]; k_scale, k_bias, v_bias:
// [n_kv_head * head_dim] or nullptr
void kv_transforms_host(bool rotate_k, bool rotate_v, bool center_k, bool center_v, const float* k_scale,
                        const float* k_bias, const float* v_bias, float* q, float* k, float* v, float* att, int n,
                        int n_head, int n_kv_head, int head_dim);
// top_k (device_ops.cuh) over host rows x [n][stride]: ids, vals [n][k]; sliced: with the scratch of slices
void top_k_host(const float* x, int n, int stride, int n_valid, int k, int32_t* ids, float* vals, bool sliced = false);
// paged attention over host pools of n_slots slots ([n_slots][n_kv_head][head_dim] in k_type / v_type rows):
// q, out [T][n_head][head_dim]; positions, seq_index [T]; block_tables [n_seq][max_blocks]; the AttentionShape
// fields spelt out; split: a thread block per (row, head, chunk) (AttentionSplit), else per (row, head)
void paged_attention_host(int n_head, int n_kv_head, int head_dim, int block_size, float scale, float softcap,
                          int window, int T, const int32_t* positions, const int32_t* seq_index,
                          const int32_t* block_tables, int n_seq, int max_blocks, const float* q, int k_type,
                          const uint8_t* k_pool, int v_type, const uint8_t* v_pool, int n_slots, float* out,
                          bool split = false);
// the same by paged_attention_tiled (device_ops.cuh) over the tiles attention_tiles builds from positions and
// seq_index
void paged_attention_tiled_host(int n_head, int n_kv_head, int head_dim, int block_size, float scale, float softcap,
                                int window, int T, const int32_t* positions, const int32_t* seq_index,
                                const int32_t* block_tables, int n_seq, int max_blocks, const float* q, int k_type,
                                const uint8_t* k_pool, int v_type, const uint8_t* v_pool, int n_slots, float* out);

}  // namespace lll::cuda
