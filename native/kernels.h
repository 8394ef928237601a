// Kernel tables: one per CPU path (scalar, avx2, avx512), all built from the same generic source plus
// hand-written SIMD where it pays. The scalar table is the reference every other path is tested against.
//
// Integer path, for every quantized type: a weight row is unpacked into unsigned bytes u with a float
// scale per group of G weights (G = 16 or 32), so that
//     w = s_g * (u - offset)          (symmetric types: offset is a per-type constant, a power of two)
//     w = s_g * u + m_g               (types with a min: offset = 0)
// Activations are quantized per 32 (Q8_0-style: x ~= dx * xq, xq int8) once per matmul and reused for
// every weight row. Sixteen unpacked rows are interleaved ([kc/4][16 rows][4 bytes]) so one 512-bit
// VNNI instruction computes 4-term dot products for 16 rows at once.
#pragma once
#include <cstddef>
#include <cstdint>

#include "quant_formats.h"

namespace lll {

constexpr int TILE_M = 16;   // weight rows per tile
constexpr int CHUNK_K = 256; // weights per unpacked chunk (the last chunk of a row may be shorter)

struct QuantLayout {
  int group;      // G: weights per scale (16 or 32)
  int offset;     // symmetric offset (0 for types with a min)
  bool has_min;   // w = s*u + m
  int umax;       // the largest unpacked u (q + 128 for the offset-128 types): bounds the int16 sums of the kernels
};
QuantLayout quant_layout(QType t);

// Per-matmul activations for the tile kernel, packed in panels of CB columns (the table's qgemm_cb; the
// last panel is zero-padded) so a kernel reaches every column of a panel from one pointer:
//   xq: [n_panels][ng][CB][G] int8     xd, xc, xm: [n_panels][ng][CB]
// xd: dx of the 32-block holding the group; xc: -offset * sum(xq over the group) (0 for types with a
// min); xm: dx * sum(xq over the group) (types with a min). The pointers and n_panels may describe a block of
// consecutive panels (the caller offsets them and the accumulators alike).
struct XGroups {
  const int8_t* xq;
  const float* xd;
  const int32_t* xc;
  const float* xm;
  int ng;        // groups per activation row
  int g0;        // first group of the chunk being computed
  int n_panels;
};

// Small-N activation tables: lanes run along k (4 weights per int32 lane), already offset to the chunk.
struct XLanes {
  const int8_t* xq;    // [n][K], leading dimension ldx
  size_t ldx;
  const float* dxe;    // [n][K/4] dx of the 32-block holding each 4 weights (null unless lane4_tables)
  const int32_t* xce;  // [n][K/4] -offset * sum of the 4 xq, 0 for types with a min (null unless lane4_tables)
  size_t ldl;
  const float* xm;     // [n][K/G] dx * sum(xq over the group) (every type: offset types may use it instead of xce)
  size_t ldg;
  const float* xd;     // [n][K/G] dx of the 32-block holding each group (leading dimension ldg)
};

// unpacks kc weights (whole blocks) of rows w + r * row_bytes, r < nrows <= 16, into u[r * kc + k],
// s[r * sw + g] and m[r * sw + g] (sw >= kc/G, a multiple of 8; m is scratch for types without a min).
// Rows nrows..15 are zero-filled.
using UnpackFn = void (*)(const uint8_t* w, size_t row_bytes, int nrows, int kc, uint8_t* u, float* s, float* m,
                          int sw);
// unpacks kc float-type weights of one row into out[kc]
using UnpackFloatFn = void (*)(const uint8_t* row, int kc, float* out);

// Small-N activation tables for activations quantized per 256 (Q8_K-style), already offset to the chunk.
struct XSuper {
  const int8_t* xq;     // [n][K], leading dimension ldx
  size_t ldx;
  const float* d;       // [n][K/256] dx of each 256
  size_t ldd;
  const int16_t* bsum;  // [n][K/16] sum of xq per 16
  size_t ldb;
};

struct KernelTable {
  const char* name;
  UnpackFn unpack[40];        // by QType id; nullptr for float types and unsupported ids
  UnpackFloatFn unpack_f[40]; // F32, F16, BF16
  // u_rows: [16][kc] row-major -> u_il: [kc/4][16][4] (kc a multiple of 32); also turns [16][8j] float
  // scale tables into [8j][16]
  void (*interleave16)(const uint8_t* u_rows, int kc, uint8_t* u_il);
  // acc[c][r] += sum over the chunk of w[r][k] * x[c][k], for r < 16 and every (padded) column c
  // w_il: [kc/4][16][4]; s, m: [kc/G][16]; acc: [n_panels * qgemm_cb][16]
  void (*qgemm_chunk)(const QuantLayout& L, const uint8_t* w_il, const float* s, const float* m, int kc,
                      const XGroups& X, float* acc);
  int qgemm_cb;  // activation columns per panel
  // small N (optional, nullptr where absent): u_rows [16][kc], s/m [16][sw] (sw >= 16) straight from
  // unpack, no interleave; acc: [n][16 rows][16 lanes] partial sums, reduced by the caller with this table's
  // reduce16 (the AVX2 kernels fill lanes 0..7 only, and its reduce16 reads only those). init: the chunk is the
  // first of its rows, so acc is written without being read (nobody zeroes it); else the chunk adds to it
  void (*qgemv_chunk)(const QuantLayout& L, const uint8_t* u_rows, const float* s, const float* m, int sw, int kc,
                      int nr, int n, const XLanes& X, bool init, float* acc);
  // small N, fused (optional per type): reads the weight blocks of rows w + r * row_bytes (r < nr, already
  // offset to the chunk) directly, with no unpacked copy; same acc contract as qgemv_chunk
  void (*qgemv_fused[40])(const uint8_t* w, size_t row_bytes, int nr, int kc, int n, const XLanes& X, bool init,
                          float* acc);
  int fused_chunk_k;  // weights per call of a fused kernel (a multiple of 256), or 0: whole rows
  bool lane4_tables;  // its small-N kernels read XLanes.dxe and .xce (built only then)
  // small N over activations quantized per 256 (optional per type: K-quants whose super-block sums stay
  // exact in int32); preferred over qgemv_fused where present; same acc contract, always whole rows (kc = K)
  void (*qgemv_super[40])(const uint8_t* w, size_t row_bytes, int nr, int kc, int n, const XSuper& X, bool init,
                          float* acc);
  int super_max_n;  // qgemv_super serves products of up to this many activation rows (every small-N kernel: up
                    // to 4, matmul.cpp's GEMV_MAX_N)
  // float path: w: [kc][16] (row r at w[k*16 + r]); x: [n][ldx] float; acc: [n][16]
  void (*fgemm_chunk)(const float* w, int kc, int n, const float* x, size_t ldx, float* acc);
  // the small-N partial sums of nr <= 16 rows: y[r] = ((0 + acc[r][0]) + acc[r][1]) + ... + acc[r][L - 1], in that
  // order, L the lanes this table's kernels fill (16; 8 on AVX2): results do not depend on the row split or the
  // thread count; acc: [16 rows][16 lanes]
  void (*reduce16)(const float* acc, int nr, float* y);
  // x: [k] float -> xq: [k] int8, dx: [k/block] (block 32 or 256, k a multiple of it), sum16: [k/16] (sum of
  // xq per 16); x ~= dx * xq with dx = amax / 127 of the block, xq rounded to nearest
  void (*quantize_row_x)(const float* x, int k, int block, int8_t* xq, float* dx, int32_t* sum16);
  // the compute roofline of `bench kernels` (optional, nullptr on the scalar path): `iters` steps of
  // PEAK_CHAINS independent chains, each step one multiply-add instruction of this path's int8 products and
  // its accumulation, int8_peak_macs multiply-adds a step in all; returns a checksum (tests: the chains in
  // Python), so nothing is elided. The chains, lanes all alike, x_c starting at bytes c + 1:
  //   avx2:   x_c = x_c + vpmaddubsw(x_c, 3s)  (int16, wrapping; the tile kernel's inner pair for 4-bit weights)
  //   avx512: x_c = vpdpbusd(x_c, x_c, 3s)     (int32, wrapping)
  //   checksum: sum over chains and lanes of the lanes' unsigned values, mod 2^64
  uint64_t (*int8_peak)(int64_t iters);
  int int8_peak_macs;
};
constexpr int PEAK_CHAINS = 12;  // enough to cover a multiply's latency (3-5 cycles) on two pipes

const KernelTable* kernels_scalar();
#if defined(LLL_X86)
const KernelTable* kernels_avx2();
const KernelTable* kernels_avx512();
#endif

}  // namespace lll
