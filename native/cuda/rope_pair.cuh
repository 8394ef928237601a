// One rotary pair's arithmetic (ops.h's rope: a' = a cos - b sin, b' = a sin + b cos), spelt with _rn so that nvcc
// contracts nothing: the CPU's operations, and the same bits in every kernel that rotates (ops.cu's rope, kv.cu's
// rope_kv_write, which rotates K on its way into the cache).
#pragma once
#include "device_compat.cuh"

namespace lll::cuda {

__device__ __forceinline__ float rope_first(float a, float b, float c, float s) {
  return __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s));
}
__device__ __forceinline__ float rope_second(float a, float b, float c, float s) {
  return __fadd_rn(__fmul_rn(a, s), __fmul_rn(b, c));
}

// value d of a head xh (head_dim values) after its rotation by the angles cs, sn [n_rot / 2]: pairs (i, i + n_rot /
// 2) when neox, else (2i, 2i + 1); dims from n_rot on unrotated
__device__ __forceinline__ float rope_value(const float* xh, int d, int n_rot, bool neox, const float* cs,
                                            const float* sn) {
  if (d >= n_rot) return xh[d];
  const int half = n_rot / 2;
  const bool first = neox ? d < half : (d & 1) == 0;
  const int p = neox ? (first ? d : d - half) : d / 2;
  const int ia = neox ? p : 2 * p, ib = neox ? p + half : 2 * p + 1;
  return first ? rope_first(xh[ia], xh[ib], cs[p], sn[p]) : rope_second(xh[ia], xh[ib], cs[p], sn[p]);
}

}  // namespace lll::cuda
