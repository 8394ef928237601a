// What the CUDA sources (native/cuda/*.cu, *.cuh) include instead of the CUDA headers, so that the same source also
// compiles for the host under LLL_CUDA_EMULATED (native/cuda/emulated.cuh over native/warp_emulator.h), where the
// tests run it on the CPU: the int8 products in every build (tests/native/test_cuda_emulated.py), the whole
// backend in a LOCALLLM_CUDA=EMULATED build (docs/cuda.md). Launches are spelt LLL_LAUNCH(kernel, grid, block,
// smem, stream)(args...) and dynamic shared memory LLL_DYNAMIC_SHARED(type, name); and the one int8 tensor-core
// instruction the products use is here in both forms.
#pragma once
#include <cstdint>

#ifdef LLL_CUDA_EMULATED
#include "emulated.cuh"
#else
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#define LLL_LAUNCH(kernel, grid, block, smem, stream) kernel<<<grid, block, smem, stream>>>
#define LLL_DYNAMIC_SHARED(T, name) extern __shared__ T name[]
#endif

namespace lll::cuda {

// mma.sync m16n8k16 on int8 (sm_80+), d += A . B with exact int32 sums, per lane (g = lane / 4, t = lane % 4, the
// PTX ISA's fragment layout): a[0] holds A [g][4t .. 4t + 3], a[1] A [g + 8][4t .. 4t + 3] (A 16 x 16, row-major
// int8); b holds B [4t .. 4t + 3][g] (B 16 x 8: k by column); d[0], d[1] are D [g][2t], D [g][2t + 1], d[2], d[3]
// the same columns of row g + 8. Every lane of the warp must take part.
__device__ __forceinline__ void mma_s8_16816(int d[4], const int a[2], int b) {
#ifdef LLL_CUDA_EMULATED
  emu_mma_s8_16816(d, a, b);
#else
  asm volatile("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5}, {%6}, {%0, %1, %2, %3};"
               : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(b));
#endif
}

}  // namespace lll::cuda
