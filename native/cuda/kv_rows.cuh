// Reading the KV cache's rows on the device (kv_format.h's formats), shared by the attention kernels (kv.cu,
// attention_tiles.cu).
#pragma once
#include "device_compat.cuh"

#include <cstddef>
#include <cstdint>

#include "../kv_format.h"

namespace lll::cuda {

__device__ __forceinline__ float h2f(uint16_t h) { return __half2float(__ushort_as_half(h)); }

// value 32 * i + lane of one head's row in type t, as kv_dequantize_row gives it: the half, d * q (q8_0) or
// d * (q - 8) (q4_0, values 0 .. 15 of a block in the low nibbles, 16 .. 31 in the high). Block i of a quantized
// row holds exactly the values 32 * i .. 32 * i + 31.
__device__ __forceinline__ float kv_value(KvType t, const uint8_t* head, int i, int lane) {
  if (t == KvType::F16) return h2f(reinterpret_cast<const uint16_t*>(head)[32 * i + lane]);
  if (t == KvType::Q8_0) {
    const uint8_t* b = head + (size_t)i * sizeof(block_q8_0);
    return h2f(*reinterpret_cast<const uint16_t*>(b)) * (float)(int8_t)b[2 + lane];
  }
  const uint8_t* b = head + (size_t)i * sizeof(block_q4_0);
  const int byte = b[2 + (lane & 15)];
  return h2f(*reinterpret_cast<const uint16_t*>(b)) * (float)((lane < 16 ? byte & 15 : byte >> 4) - 8);
}

}  // namespace lll::cuda
