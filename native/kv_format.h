// The row formats of the KV cache: f16, or GGML's q8_0 / q4_0 blocks of 32 along head_dim
// (block_q8_0 / block_q4_0 of quant_formats.h, byte-identical to ggml's quantize_row_*_ref), and the
// orthogonal Hadamard rotation applied per head before quantizing (q . k and sum p v are unchanged).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "quant_formats.h"

namespace lll {

enum class KvType : int { F16 = (int)QType::F16, Q8_0 = (int)QType::Q8_0, Q4_0 = (int)QType::Q4_0 };

// "f16", "q8_0", "q4_0"; kv_type_of throws std::invalid_argument naming `what` for any other name
const char* kv_type_name(KvType t);
KvType kv_type_of(const std::string& name, const char* what);

// bytes of n values in type t; n must be a multiple of 32 for q8_0 / q4_0 (kv_check_len)
size_t kv_row_bytes(KvType t, int n);
// throws std::invalid_argument naming `what` unless n values fit whole blocks of t
void kv_check_len(KvType t, int n, const char* what);

// scalar references. x: [n] float -> dst: kv_row_bytes(t, n) bytes (f16: round to nearest even;
// q8_0: d = amax / 127, q = roundf(x / d); q4_0: d = max / -8 with max the value of largest magnitude,
// q = min(15, (int)(x / d + 8.5)), element j and j + 16 of a block share byte j, low nibble first)
void kv_quantize_row(KvType t, const float* x, int n, uint8_t* dst);
// src: kv_row_bytes(t, n) bytes -> y: [n] float, exactly d * q (q8_0), d * (q - 8) (q4_0), or the half
void kv_dequantize_row(KvType t, const uint8_t* src, int n, float* y);

// x: [n_vecs][dim], each vector replaced by H x / sqrt(m) over consecutive groups of m dims, m the largest
// power of two dividing dim (m = dim for head_dim 64, 128, 256): an orthogonal, symmetric map, its own
// inverse. Butterflies in float32 in a fixed order (fast Walsh-Hadamard, stride 1, 2, 4, ...), then the scale.
void hadamard_rotate(float* x, int n_vecs, int dim);

}  // namespace lll
