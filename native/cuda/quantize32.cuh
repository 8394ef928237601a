// What a warp does to quantize one 32-value block of activations (kernels.h: x ~= d * q, d = amax / 127, q int8,
// round to nearest even), and the gated activations: shared by the kernels that produce a product's quantized
// input (quantize_x in qgemv.cu; rms_norm_quantize and act_mul_quantize in ops.cu), so that a fused producer
// writes the bits the separate kernels would.
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

}  // namespace lll::cuda
