// AVX-512 emulated for tests on a CPU without it (LOCALLLM_EMULATE_AVX512, CMakeLists.txt): kernels_avx512.cpp
// compiled with -mavx2 finds this header first; it includes the compiler's own, then SIMDe's portable AVX-512
// (Debian/Ubuntu: libsimde-dev), whose native aliases take the intrinsics' names. The forms this SIMDe (0.7.4)
// lacks are written here lane by lane, each as the instruction's reference describes it. Slow: for testing the
// AVX-512 paths' bits on any x86-64 machine, never for timing.
#pragma once
#include_next <immintrin.h>
#ifndef SIMDE_ENABLE_NATIVE_ALIASES
#define SIMDE_ENABLE_NATIVE_ALIASES
#endif
#include <simde/x86/avx512.h>
#include <simde/x86/f16c.h>

#include <cstdint>
#include <cstring>
// AVX512VL+BW forms this SIMDe version lacks, lane by lane
static inline __m256i lll_emu_mm256_maskz_set1_epi8(uint32_t k, char a) {
  alignas(32) char b[32];
  for (int i = 0; i < 32; ++i) b[i] = (k >> i) & 1 ? a : 0;
  return _mm256_load_si256((const __m256i*)b);
}
static inline uint32_t lll_emu_mm256_test_epi8_mask(__m256i a, __m256i b) {
  return (uint32_t)_mm256_movemask_epi8(_mm256_xor_si256(_mm256_cmpeq_epi8(_mm256_and_si256(a, b), _mm256_setzero_si256()), _mm256_set1_epi8(-1)));
}
static inline __m256i lll_emu_mm256_maskz_mov_epi8(uint32_t k, __m256i a) {
  alignas(32) char b[32];
  _mm256_store_si256((__m256i*)b, a);
  for (int i = 0; i < 32; ++i) if (!((k >> i) & 1)) b[i] = 0;
  return _mm256_load_si256((const __m256i*)b);
}
#undef _mm256_maskz_set1_epi8
#define _mm256_maskz_set1_epi8(k, a) lll_emu_mm256_maskz_set1_epi8(k, a)
#undef _mm256_test_epi8_mask
#define _mm256_test_epi8_mask(a, b) lll_emu_mm256_test_epi8_mask(a, b)
#undef _mm256_maskz_mov_epi8
#define _mm256_maskz_mov_epi8(k, a) lll_emu_mm256_maskz_mov_epi8(k, a)
static inline __m512 lll_emu_mm512_cvtepi32_ps(__m512i a) {
  int32_t v[16]; float o[16];
  std::memcpy(v, &a, 64);
  for (int i = 0; i < 16; ++i) o[i] = (float)v[i];
  __m512 r; std::memcpy(&r, o, 64); return r;
}
static inline __m512i lll_emu_mm512_cvtepi8_epi32(__m128i a) {
  int8_t v[16]; int32_t o[16];
  std::memcpy(v, &a, 16);
  for (int i = 0; i < 16; ++i) o[i] = v[i];
  __m512i r; std::memcpy(&r, o, 64); return r;
}
#undef _mm512_cvtepi32_ps
#define _mm512_cvtepi32_ps(a) lll_emu_mm512_cvtepi32_ps(a)
#undef _mm512_cvtepi8_epi32
#define _mm512_cvtepi8_epi32(a) lll_emu_mm512_cvtepi8_epi32(a)
static inline __m512 lll_emu_mm512_cvtph_ps(__m256i a) {
  __m128i lo, hi; std::memcpy(&lo, &a, 16); std::memcpy(&hi, (const char*)&a + 16, 16);
  __m256 fl = _mm256_cvtph_ps(lo), fh = _mm256_cvtph_ps(hi);
  __m512 r; std::memcpy(&r, &fl, 32); std::memcpy((char*)&r + 32, &fh, 32); return r;
}
static inline __m256i lll_emu_mm512_cvtepi32_epi16(__m512i a) {
  int32_t v[16]; int16_t o[16];
  std::memcpy(v, &a, 64);
  for (int i = 0; i < 16; ++i) o[i] = (int16_t)v[i];
  __m256i r; std::memcpy(&r, o, 32); return r;
}
#undef _mm512_cvtph_ps
#define _mm512_cvtph_ps(a) lll_emu_mm512_cvtph_ps(a)
#undef _mm512_cvtepi32_epi16
#define _mm512_cvtepi32_epi16(a) lll_emu_mm512_cvtepi32_epi16(a)
static inline __m512i lll_emu_mm512_srai_epi32(__m512i a, int n) {
  int32_t v[16];
  std::memcpy(v, &a, 64);
  for (int i = 0; i < 16; ++i) v[i] = n > 31 ? (v[i] < 0 ? -1 : 0) : v[i] >> n;
  __m512i r; std::memcpy(&r, v, 64); return r;
}
#undef _mm512_srai_epi32
#define _mm512_srai_epi32(a, n) lll_emu_mm512_srai_epi32(a, n)
static inline __m512i lll_emu_mm512_cvtepu8_epi32(__m128i a) {
  uint8_t v[16]; int32_t o[16];
  std::memcpy(v, &a, 16);
  for (int i = 0; i < 16; ++i) o[i] = v[i];
  __m512i r; std::memcpy(&r, o, 64); return r;
}
static inline __m256 lll_emu_mm512_extractf32x8_ps(__m512 a, int i) {
  __m256 r; std::memcpy(&r, (const char*)&a + 32 * (i & 1), 32); return r;
}
static inline __m512i lll_emu_mm512_i32gather_epi32(__m512i idx, const void* base, int scale) {
  int32_t v[16], o[16];
  std::memcpy(v, &idx, 64);
  for (int i = 0; i < 16; ++i) std::memcpy(&o[i], (const char*)base + (int64_t)v[i] * scale, 4);
  __m512i r; std::memcpy(&r, o, 64); return r;
}
static inline __m512i lll_emu_mm512_shuffle_i64x2(__m512i a, __m512i b, int imm) {
  char va[64], vb[64], o[64];
  std::memcpy(va, &a, 64); std::memcpy(vb, &b, 64);
  for (int i = 0; i < 4; ++i) std::memcpy(o + 16 * i, (i < 2 ? va : vb) + 16 * ((imm >> (2 * i)) & 3), 16);
  __m512i r; std::memcpy(&r, o, 64); return r;
}
#undef _mm512_cvtepu8_epi32
#define _mm512_cvtepu8_epi32(a) lll_emu_mm512_cvtepu8_epi32(a)
#undef _mm512_extractf32x8_ps
#define _mm512_extractf32x8_ps(a, i) lll_emu_mm512_extractf32x8_ps(a, i)
#undef _mm512_i32gather_epi32
#define _mm512_i32gather_epi32(i, b, s) lll_emu_mm512_i32gather_epi32(i, b, s)
#undef _mm512_shuffle_i64x2
#define _mm512_shuffle_i64x2(a, b, i) lll_emu_mm512_shuffle_i64x2(a, b, i)
