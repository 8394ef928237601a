// CUDA's built-ins for the host, over the warp emulator (native/warp_emulator.h) and, for whole-backend builds
// (LOCALLLM_CUDA=EMULATED), the runtime API of emulated_runtime.h: what device_compat.cuh includes under
// LLL_CUDA_EMULATED. Only what the backend's kernels use. The _rn arithmetic is plain IEEE arithmetic, the same
// operation as long as the compiler contracts nothing (the project builds its C++ with -ffp-contract=off); the
// conversions round to nearest even, as the device's do. The library functions (expf, tanhf) are the host's, which
// may differ from the device's in the last place; WMMA's products are summed in k order, which a card need not do.
#pragma once
#include <math.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "../warp_emulator.h"
#include "emulated_runtime.h"

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
#define __align__(n) __attribute__((aligned(n)))
// kernel<<<grid, block, smem, stream>>>(args) (device_compat.cuh)
#define LLL_LAUNCH(kernel, grid, block, smem, stream) \
  ::lll::emu::make_launch(grid, block, smem, stream, [=](auto... a) { kernel(a...); })
// extern __shared__ T name[]
#define LLL_DYNAMIC_SHARED(T, name) T* name = static_cast<T*>(::lll::emu::dynamic_shared())

struct alignas(16) float4 {
  float x, y, z, w;
};
struct alignas(16) int4 {
  int x, y, z, w;
};
struct alignas(16) uint4 {
  unsigned x, y, z, w;
};

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
using half = __half;
inline uint16_t __half_as_ushort(__half h) { return h.bits; }
// binary32 -> binary16, round to nearest even (overflow to infinity, NaN kept quiet)
inline __half __float2half_rn(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
  const uint32_t ax = x & 0x7FFFFFFFu;
  if (ax > 0x7F800000u) return __half{(uint16_t)(sign | 0x7E00)};
  if (ax >= 0x47800000u) return __half{(uint16_t)(sign | 0x7C00)};  // 65536 and beyond (and infinity)
  if (ax < 0x38800000u) {  // a half subnormal: units of 2^-24, exact to scale, rounded to even
    const float v = std::fabs(f) * 16777216.0f;
    return __half{(uint16_t)(sign | (uint16_t)std::nearbyint(v))};
  }
  uint32_t h = (((ax >> 23) - 112) << 10) | ((ax & 0x7FFFFFu) >> 13);
  const uint32_t rest = ax & 0x1FFFu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1))) ++h;  // a carry into the exponent is right, up to infinity
  return __half{(uint16_t)(sign | h)};
}
struct __half2 {
  __half x, y;
};
using half2 = __half2;
inline __half2 __floats2half2_rn(float a, float b) { return {__float2half_rn(a), __float2half_rn(b)}; }
inline float __int_as_float(int u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint32_t __float_as_uint(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }
inline float __fsqrt_rn(float a) { return std::sqrt(a); }
inline double __dmul_rn(double a, double b) { return a * b; }
inline double __dadd_rn(double a, double b) { return a + b; }
inline double __dsub_rn(double a, double b) { return a - b; }
inline double __ddiv_rn(double a, double b) { return a / b; }
inline float __double2float_rn(double a) { return (float)a; }
inline int __popc(unsigned v) { return __builtin_popcount(v); }
inline int __ffs(int v) { return __builtin_ffs(v); }
template <class T>
inline T atomicAdd(T* p, T v) {  // fibers switch only at barriers, so a plain read-modify-write is atomic
  const T old = *p;
  *p = old + v;
  return old;
}
// a load around L1, and a fence: one memory here, and blocks that run one after another
template <class T>
inline T __ldcg(const T* p) {
  return *p;
}
inline void __threadfence() {}
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
// the call site travels to the emulator, which refuses threads meeting one barrier at different places
inline void __syncthreads(const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  ::lll::emu::sync_block(file, line);
}
inline void __syncwarp(unsigned = 0xFFFFFFFFu) { ::lll::emu::sync_warp(); }
// the warp collectives: every lane of the warp takes part (the backend's kernels pass full masks)
template <class T>
inline T shfl_from(T v, int src) {
  T out;
  ::lll::emu::warp_exchange_one(&v, sizeof v, src, &out);
  return out;
}
template <class T>
inline T __shfl_sync(unsigned, T v, int src, int width = 32) {
  const int lane = ::lll::emu::lane();
  return shfl_from(v, (lane & ~(width - 1)) + (src & (width - 1)));
}
template <class T>
inline T __shfl_xor_sync(unsigned, T v, int o, int width = 32) {
  const int lane = ::lll::emu::lane(), to = lane ^ o;
  return shfl_from(v, (to & ~(width - 1)) == (lane & ~(width - 1)) ? to : lane);
}
template <class T>
inline T __shfl_up_sync(unsigned, T v, unsigned d, int width = 32) {
  const int lane = ::lll::emu::lane(), in = lane % width;
  const T got = shfl_from(v, in >= (int)d ? lane - (int)d : lane);
  return got;
}
template <class T>
inline T __shfl_down_sync(unsigned, T v, unsigned d, int width = 32) {
  const int lane = ::lll::emu::lane(), in = lane % width;
  return shfl_from(v, in + (int)d < width ? lane + (int)d : lane);
}
template <class T>
inline unsigned __match_any_sync(unsigned, T v) {
  T all[32];
  ::lll::emu::warp_exchange(&v, sizeof v, all);
  unsigned m = 0;
  for (int l = 0; l < 32; ++l) m |= (std::memcmp(&all[l], &v, sizeof v) == 0 ? 1u : 0u) << l;
  return m;
}

// WMMA (gemm.cu): a lane loads whole A and B tiles (as floats), but owns only the accumulator elements r * 16 + c
// = lane (mod 32), as a card's lanes each hold a share: mma_sync computes those (products summed in k order) and
// store_matrix_sync writes those, so the warp's stores together write the tile once
namespace nvcuda::wmma {
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };
template <class Use, int M, int N, int K, class T, class Layout = void>
struct fragment {
  float v[16][16];
};
template <class Use, class T, class Layout>
inline void load_matrix_sync(fragment<Use, 16, 16, 16, T, Layout>& f, const T* p, unsigned ldm) {
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 16; ++c)
      f.v[r][c] = __half2float(std::is_same_v<Layout, row_major> ? p[r * ldm + c] : p[c * ldm + r]);
}
template <class T>
inline void fill_fragment(fragment<accumulator, 16, 16, 16, T>& f, T x) {
  for (auto& row : f.v)
    for (float& e : row) e = x;
}
template <class La, class Lb>
inline void mma_sync(fragment<accumulator, 16, 16, 16, float>& d, const fragment<matrix_a, 16, 16, 16, __half, La>& a,
                     const fragment<matrix_b, 16, 16, 16, __half, Lb>& b,
                     const fragment<accumulator, 16, 16, 16, float>& c) {
  for (int e = ::lll::emu::lane(); e < 256; e += 32) {
    const int i = e / 16, j = e % 16;
    float acc = c.v[i][j];
    for (int k = 0; k < 16; ++k) acc += a.v[i][k] * b.v[k][j];
    d.v[i][j] = acc;
  }
}
inline void store_matrix_sync(float* p, const fragment<accumulator, 16, 16, 16, float>& f, unsigned ldm, layout_t l) {
  for (int e = ::lll::emu::lane(); e < 256; e += 32) {
    const int r = e / 16, c = e % 16;
    (l == mem_row_major ? p[r * ldm + c] : p[c * ldm + r]) = f.v[r][c];
  }
}
}  // namespace nvcuda::wmma

// cub::BlockScan's exclusive sum (top_k.cu) over shared storage and two barriers
namespace cub {
template <class T, int THREADS>
struct BlockScan {
  struct TempStorage {
    T v[THREADS];
  };
  TempStorage& s;
  explicit BlockScan(TempStorage& storage) : s(storage) {}
  void ExclusiveSum(T in, T& out, T& aggregate) {
    const Dim3Index i = index();
    s.v[i] = in;
    __syncthreads();
    T sum{}, all{};
    for (int t = 0; t < THREADS; ++t) {
      if (t == i) sum = all;
      all += s.v[t];
    }
    out = sum;
    aggregate = all;
    __syncthreads();
  }
  void ExclusiveSum(T in, T& out) {
    T aggregate;
    ExclusiveSum(in, out, aggregate);
  }

 private:
  using Dim3Index = int;
  static int index() {
    const ::lll::emu::Dim3 &t = ::lll::emu::thread_idx(), &d = ::lll::emu::block_dim();
    return (int)(t.x + d.x * (t.y + d.y * t.z));
  }
};
}  // namespace cub

namespace lll::cuda {
using std::fabs;
using std::isinf;
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
