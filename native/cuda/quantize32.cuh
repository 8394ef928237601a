// What a warp does to quantize one 32-value block of activations (kernels.h: x ~= d * q, d = amax / 127, q int8,
// round to nearest even), the gated activations and a row's RMSNorm: shared by the kernels that produce a product's
// quantized input (quantize_x in qgemv.cu; rms_norm_quantize and act_mul_quantize in ops.cu; the decode kernel's
// follow-ups in qgemv_kernel.cuh), so that a fused producer writes the bits the separate kernels would.
#pragma once
#include "device_compat.cuh"

#include <cstdint>

namespace lll::cuda {

// lane l of a full warp holds value l of the block: *q = its int8 value; lane 0 writes the block's scale to *d
__device__ __forceinline__ void quantize32(float v, int lane, int8_t* q, float* d) {
  float amax = fabsf(v);
  for (int o = 16; o; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  const float dd = amax / 127.0f, id = dd > 0.0f ? 127.0f / amax : 0.0f;  // as the CPU (kernels_generic.inc)
  *q = (int8_t)__float2int_rn(__fmul_rn(v, id));
  if (lane == 0) *d = dd;
}

// act(g) * u: SiLU when silu, else GELU (tanh form): ops.h's silu_mul / gelu_tanh_mul
__device__ __forceinline__ float act_times(float x, float u, bool silu) {
  if (silu) {
    const float h = expf(-0.5f * fabsf(x));
    return (x >= 0.f ? x : x * h * h) / (1.0f + h * h) * u;
  }
  const float c = 0.7978845608028654f;  // sqrt(2 / pi)
  return 0.5f * x * (1.0f + tanhf(c * (x + 0.044715f * x * x * x))) * u;
}

// RMSNorm of one row by a block of `threads` threads (t its thread, threads dividing RMS_PARTS and a multiple of 32):
// out = x * (1 / sqrt(mean(x^2) + eps)) * w; with xq (n a multiple of 32), also out's quantization per 32. The squares
// are summed in double into RMS_PARTS partial sums (part t + j threads: elements t + j threads + RMS_PARTS i), then
// pairwise in a fixed tree, whatever the block's size: the same bits from any block. part: shared, RMS_PARTS
// doubles. x is read around L1 (__ldcg): a follow-up reads what other blocks wrote in the same launch. out may be x.
constexpr int RMS_PARTS = 256;
__device__ __forceinline__ void rms_norm_row(const float* x, const float* w, int n, float eps, float* out, int8_t* xq,
                                             float* xd, int t, int threads, double* part) {
  for (int p = t; p < RMS_PARTS; p += threads) {
    double ss = 0.0;
    for (int i = p; i < n; i += RMS_PARTS) {
      const float v = __ldcg(x + i);
      ss += (double)v * v;
    }
    part[p] = ss;
  }
  __syncthreads();
  for (int s = RMS_PARTS / 2; s > 0; s >>= 1) {
    for (int p = t; p < s; p += threads) part[p] += part[p + s];
    __syncthreads();
  }
  const float inv = (float)(1.0 / sqrt(part[0] / n + eps));
  __syncthreads();  // part is free again when the function returns
  for (int i = t; i < n; i += threads) {  // a warp takes 32 consecutive values (threads a multiple of 32)
    const float v = __ldcg(x + i) * inv * w[i];
    out[i] = v;
    if (xq) quantize32(v, i % 32, xq + i, xd + i / 32);
  }
}

}  // namespace lll::cuda
