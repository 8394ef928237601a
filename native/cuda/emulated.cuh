// CUDA's built-ins for the host, over the warp emulator (native/warp_emulator.h): what device_compat.cuh includes
// under LLL_CUDA_EMULATED. Only what the emulated kernels use. The _rn arithmetic is plain float arithmetic,
// which is the same IEEE operation as long as the compiler contracts nothing (the project builds its C++ with
// -ffp-contract=off); the conversions round to nearest even, as the device's do.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

#include "../warp_emulator.h"

#define __global__ static  // internal linkage: the real kernels' host stubs have the same names
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static
#define __launch_bounds__(...)
#define threadIdx (::lll::emu::thread_idx())
#define blockIdx (::lll::emu::block_idx())
#define blockDim (::lll::emu::block_dim())
#define gridDim (::lll::emu::grid_dim())

struct __half {
  uint16_t bits;
};
inline __half __ushort_as_half(uint16_t h) { return __half{h}; }
// IEEE binary16 -> binary32, exact
inline float __half2float(__half h) {
  const uint32_t s = (uint32_t)(h.bits >> 15) << 31, e = (h.bits >> 10) & 31, m = h.bits & 1023;
  uint32_t f;
  if (e == 31) f = s | 0x7F800000u | (m << 13);
  else if (e) f = s | ((e + 112) << 23) | (m << 13);
  else if (!m) f = s;
  else {
    float v = std::ldexp((float)m, -24);
    std::memcpy(&f, &v, 4);
    f |= s;
  }
  float out;
  std::memcpy(&out, &f, 4);
  return out;
}
inline float __uint_as_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline int __float2int_rn(float x) { return (int)std::nearbyint(x); }
// the sum of the four signed byte products plus c
inline int __dp4a(int a, int b, int c) {
  for (int i = 0; i < 4; ++i) c += (int)(int8_t)(a >> (8 * i)) * (int)(int8_t)(b >> (8 * i));
  return c;
}
// byte i of the result is byte (s >> 4i) & 7 of the eight bytes y:x (x's bytes first)
inline uint32_t __byte_perm(uint32_t x, uint32_t y, uint32_t s) {
  const uint64_t v = (uint64_t)x | ((uint64_t)y << 32);
  uint32_t r = 0;
  for (int i = 0; i < 4; ++i) r |= (uint32_t)((v >> (8 * ((s >> (4 * i)) & 7))) & 0xFF) << (8 * i);
  return r;
}
inline void __syncthreads() { ::lll::emu::sync_block(); }
template <class T>
inline T __shfl_xor_sync(unsigned, T v, int o) {
  T all[32];
  ::lll::emu::warp_exchange(&v, sizeof v, all);
  return all[::lll::emu::lane() ^ o];
}

namespace lll::cuda {
using std::fabs;
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }

// mma_s8_16816 (device_compat.cuh) from the PTX ISA's fragment layout: the warp's A and B gathered from its lanes
inline void emu_mma_s8_16816(int d[4], const int a[2], int b) {
  struct Frag {
    int a0, a1, b;
  } mine{a[0], a[1], b}, all[32];
  ::lll::emu::warp_exchange(&mine, sizeof mine, all);
  const int lane = ::lll::emu::lane(), g = lane / 4, t = lane % 4;
  for (int i = 0; i < 4; ++i) {
    const int row = g + 8 * (i >> 1), col = 2 * t + (i & 1);
    // A [row][4u .. 4u + 3] is in lane 4 (row % 8) + u (a0 for rows 0..7, a1 for 8..15); B [4u .. 4u + 3][col] in
    // lane 4 col + u
    int sum = d[i];
    for (int u = 0; u < 4; ++u) {
      const Frag& fa = all[4 * (row % 8) + u];
      sum = __dp4a(row < 8 ? fa.a0 : fa.a1, all[4 * col + u].b, sum);
    }
    d[i] = sum;
  }
}
}  // namespace lll::cuda
