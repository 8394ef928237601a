// The KV row formats' quantize / dequantize references and the Hadamard rotation (kv_format.h).
#include "kv_format.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "ops.h"

#if defined(LLL_X86) && defined(__GNUC__)
#include <immintrin.h>
#endif

namespace lll {

#if defined(LLL_X86) && defined(__GNUC__)
// f16 -> f32 with the F16C instruction (exact, like the table): 8 values a step, n a multiple of 8
__attribute__((target("avx,f16c"))) static void f16_to_f32_f16c(const f16_t* x, int n, float* y) {
  for (int i = 0; i < n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(x + i))));
}
// f32 -> f16 rounding to nearest even, as f32_to_f16 does (the same bits but for a NaN's payload): the KV write
__attribute__((target("avx,f16c"))) static void f32_to_f16_f16c(const float* x, int n, f16_t* y) {
  for (int i = 0; i < n; i += 8)
    _mm_storeu_si128((__m128i*)(y + i), _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
}
static const bool have_f16c = __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx");
#endif

const char* kv_type_name(KvType t) {
  switch (t) {
    case KvType::F16: return "f16";
    case KvType::Q8_0: return "q8_0";
    case KvType::Q4_0: return "q4_0";
  }
  return "?";
}

KvType kv_type_of(const std::string& name, const char* what) {
  for (KvType t : {KvType::F16, KvType::Q8_0, KvType::Q4_0})
    if (name == kv_type_name(t)) return t;
  throw std::invalid_argument(std::string(what) + ": '" + name + "' is not one of f16, q8_0, q4_0");
}

size_t kv_row_bytes(KvType t, int n) {
  const TypeInfo* ti = type_info((int)t);  // KvType values are their GGML type ids
  return (size_t)(n / ti->block_size) * ti->type_size;
}

void kv_check_len(KvType t, int n, const char* what) {
  if (n <= 0 || (t != KvType::F16 && n % QK))
    throw std::invalid_argument(std::string(what) + ": " + kv_type_name(t) + " needs a head_dim that is a multiple of " +
                                std::to_string(QK) + ", got " + std::to_string(n));
}

// The q4_0 scale d of one block of QK values with the least squared error sum (x - d q)^2, q = clamp(round(x / d),
// -8, 7): ggml's reference scale (the signed extreme maps to -8) and 2 * 10 scales around it, each refined to the
// least-squares d for its q (llama.cpp's make_qx_quants search). Never worse than the reference scale.
static float q4_0_scale(const float* x) {
  float amax = 0.f, max = 0.f;
  for (int j = 0; j < QK; ++j)
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  if (amax == 0.f) return 0.f;
  float best_d = max / -8.f, best_err = INFINITY;
  for (int is = -10; is <= 10; ++is) {
    const float id = -(8.f + 0.1f * is) / max;
    double sxq = 0, sqq = 0;
    int q[QK];
    for (int j = 0; j < QK; ++j) {
      q[j] = std::max(-8, std::min(7, (int)std::lround(x[j] * id)));
      sxq += (double)x[j] * q[j];
      sqq += (double)q[j] * q[j];
    }
    if (sqq <= 0) continue;
    for (const float d : {(float)(sxq / sqq), 1.f / id}) {
      const float d16 = f16_table()[f32_to_f16(d)];  // the scale as stored
      const float idd = d16 ? 1.f / d16 : 0.f;
      double err = 0;
      for (int j = 0; j < QK; ++j) {
        const int qq = std::max(-8, std::min(7, (int)std::lround(x[j] * idd)));
        const double e = x[j] - (double)d16 * qq;
        err += e * e;
      }
      if (err < best_err) {
        best_err = (float)err;
        best_d = d16;
      }
    }
  }
  return best_d;
}

void kv_quantize_row(KvType t, const float* x, int n, uint8_t* dst) {
  if (t == KvType::F16) {
    f16_t* y = (f16_t*)dst;
#if defined(LLL_X86) && defined(__GNUC__)
    if (have_f16c && n % 8 == 0) return f32_to_f16_f16c(x, n, y);
#endif
    for (int i = 0; i < n; ++i) y[i] = f32_to_f16(x[i]);
    return;
  }
  for (int b = 0; b < n / QK; ++b) {
    const float* xb = x + (size_t)b * QK;
    if (t == KvType::Q8_0) {
      block_q8_0* y = (block_q8_0*)dst + b;
      float amax = 0.f;
      for (int j = 0; j < QK; ++j) amax = std::max(amax, std::fabs(xb[j]));
      const float d = amax / 127.f, id = d ? 1.f / d : 0.f;
      y->d = f32_to_f16(d);
      for (int j = 0; j < QK; ++j) y->qs[j] = (int8_t)std::roundf(xb[j] * id);
    } else {
      block_q4_0* y = (block_q4_0*)dst + b;
      const float d = q4_0_scale(xb), id = d ? 1.f / d : 0.f;
      y->d = f32_to_f16(d);
      for (int j = 0; j < QK / 2; ++j) {
        const int q0 = std::max(0, std::min(15, (int)std::lround(xb[j] * id) + 8));
        const int q1 = std::max(0, std::min(15, (int)std::lround(xb[j + QK / 2] * id) + 8));
        y->qs[j] = (uint8_t)(q0 | q1 << 4);
      }
    }
  }
}

void kv_dequantize_row(KvType t, const uint8_t* src, int n, float* y) {
  const float* h2f = f16_table();
  if (t == KvType::F16) {
    const f16_t* x = (const f16_t*)src;
#if defined(LLL_X86) && defined(__GNUC__)
    if (have_f16c && n % 8 == 0) return f16_to_f32_f16c(x, n, y);  // the attention's hot path at long contexts
#endif
    for (int i = 0; i < n; ++i) y[i] = h2f[x[i]];
    return;
  }
  for (int b = 0; b < n / QK; ++b) {
    float* yb = y + (size_t)b * QK;
    if (t == KvType::Q8_0) {
      const block_q8_0* x = (const block_q8_0*)src + b;
      const float d = h2f[x->d];
      for (int j = 0; j < QK; ++j) yb[j] = d * x->qs[j];
    } else {
      const block_q4_0* x = (const block_q4_0*)src + b;
      const float d = h2f[x->d];
      for (int j = 0; j < QK / 2; ++j) {
        yb[j] = d * ((x->qs[j] & 15) - 8);
        yb[j + QK / 2] = d * ((x->qs[j] >> 4) - 8);
      }
    }
  }
}

void hadamard_rotate(float* x, int n_vecs, int dim) {
  const int m = dim & -dim;  // largest power of two dividing dim
  const float scale = 1.f / std::sqrt((float)m);
  for (size_t g = 0; g < (size_t)n_vecs * dim / m; ++g) {
    float* v = x + g * m;
    for (int h = 1; h < m; h *= 2)
      for (int i = 0; i < m; i += 2 * h)
        for (int j = i; j < i + h; ++j) {
          const float a = v[j], b = v[j + h];
          v[j] = a + b;
          v[j + h] = a - b;
        }
    for (int j = 0; j < m; ++j) v[j] *= scale;
  }
}

}  // namespace lll
