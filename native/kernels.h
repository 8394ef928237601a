// Kernel tables: one per CPU path (scalar, avx2, avx512), all built from the same generic source plus
// hand-written SIMD where it pays. The scalar table is the reference every other path is tested against.
//
// Integer path, for every quantized type: a weight row is unpacked into unsigned bytes u with a float
// scale per group of G weights (G = 16 or 32), so that
//     w = s_g * (u - offset)          (symmetric types: offset is a per-type constant, a power of two)
//     w = s_g * u + m_g               (types with a min: offset = 0)
// Activations are quantized per 32 (Q8_0-style: x ~= dx * xq, xq int8) once per matmul and reused for
// every weight row, on every path and for every N (per-256 blocks flatten the massive activations some
// models carry at a few positions: issue 18). Sixteen unpacked rows are interleaved ([kc/4][16 rows][4 bytes])
// so one 512-bit VNNI instruction computes 4-term dot products for 16 rows at once.
//
// The canonical reduction (batch invariance): every kernel of a table computes each output y[c][r] from the
// same per-group terms, for every N, chunking of k, row split and thread count:
//     for each group g of the row (G = 16 or 32 weights, g counted from the row's start; dx_g the scale of its
//     32-block):
//       isum_g = sum_{k in g} u_k * xq_k - offset * sum_{k in g} xq_k        exact, int32
//                (offset-128 types: the signed weights q_k = u_k - 128 times xq_k, the same integer)
//       sd_g = s_g * dx_g                                                      one float product
//       xm_g = dx_g * (float)sum_{k in g} xq_k                                 types with a min only
// and sums them in an order fixed per table (S = acc_sets accumulators per output, each starting at +0):
//   avx2 (S = 8): group g goes to set g % 8, the groups of a set in k order,
//       acc[g % 8] = fma((float)isum_g, sd_g, acc[g % 8]);  then acc[g % 8] = fma(m_g, xm_g, acc[g % 8]) (min)
//     y = ((((((acc[0] + acc[1]) + acc[2]) + acc[3]) + acc[4]) + acc[5]) + acc[6]) + acc[7]
//     The tile kernel (qgemm_chunk) takes set g % 8 for group g of a chunk (chunks start at multiples of 256
//     weights); the small-N kernels (qgemv_chunk, qgemv_fused) stream a row and reduce 8 consecutive groups at
//     once into one vector whose lane j is set j. Eight independent sets let the small-N kernels convert and
//     scale 8 groups with one instruction each.
//   avx512 (S = 1): the groups in k order, acc = fma((float)isum_g, sd_g, acc), then acc = fma(m_g, xm_g, acc);
//     y = acc. The tile kernel and the small-N kernel (qgemv_fused, N <= 16) run one group step (group_madd, 16 rows
//     as lanes) over weights unpacked straight into the tile layout (unpack_il); they differ only in how they
//     reach the activations (packed panels, or the rows as they are).
//   avx512s8 (S = 8): the avx2 order, its small-N kernels (on 256-bit vpdpbusd: gemv_avx2.inc) and repacked layouts;
//     the tile kernel runs group_madd (vpdpbusd) into set g % 8. The same bits as avx2: on a CPU whose 512-bit
//     permutes are slow (Zen 4) the avx2 decode with an AVX-512 prefill.
//   scalar (S = 1): the same sequence without fused multiply-adds (acc = acc + (float)isum_g * sd_g, then
//     acc = acc + m_g * xm_g). One kernel for every N.
// The kernels leave the S sets in acc; the caller (matmul.cpp, reduce_sets) adds them in the order above. Each path is
// batch-invariant; the paths do not match each other bit for bit. The SIMD paths' products are at least as accurate as
// the scalar path's (tests/native/test_kernels.py), but the next product's int8 activation rounding turns a last-bit
// difference into a whole rounding step, and the layers compound it: on smollm2 the paths' logits differ by up to ~2.6
// on prose while each is as close to a float64 forward (tests/runtime/test_float64_forward.py).
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
  int last_cols; // real (unpadded) columns of the last panel described (1 .. CB): kernels may skip the rest
};

// Small-N activation tables, already offset to the chunk: the same per-group values the tile path packs
// (XGroups), unpacked as [n][K/G] rows.
struct XLanes {
  const int8_t* xq;    // [n][K], leading dimension ldx
  size_t ldx;
  const float* xd;     // [n][K/G] dx of the 32-block holding each group (leading dimension ldg)
  const int32_t* xc;   // [n][K/G] -offset * sum(xq over the group) (0 for types with a min)
  const float* xm;     // [n][K/G] dx * sum(xq over the group) (types with a min)
  size_t ldg;
};

// unpacks kc weights (whole blocks) of rows w + r * row_bytes, r < nrows <= 16, into u[r * kc + k],
// s[r * sw + g] and m[r * sw + g] (sw >= kc/G, a multiple of 8; m is scratch for types without a min).
// Rows nrows..15 are zero-filled.
using UnpackFn = void (*)(const uint8_t* w, size_t row_bytes, int nrows, int kc, uint8_t* u, float* s, float* m,
                          int sw);
// unpacks kc float-type weights of one row into out[kc]
using UnpackFloatFn = void (*)(const uint8_t* row, int kc, float* out);
// unpacks kc weights (whole blocks) of rows w + r * row_bytes, r < nrows <= 16, straight into the tile layout
// (what unpack + interleave16 give): u_il [kc/4][16][4], s [kc/G][16] and, for types with a min, m [kc/G][16].
// Lanes nrows..15 hold copies of row nrows - 1 (their outputs are never read).
using UnpackIlFn = void (*)(const uint8_t* w, size_t row_bytes, int nrows, int kc, uint8_t* u_il, float* s, float* m);

struct KernelTable {
  const char* name;
  UnpackFn unpack[N_TYPE_IDS];        // by QType id; nullptr for float types and unsupported ids
  UnpackFloatFn unpack_f[N_TYPE_IDS]; // F32, F16, BF16
  // the float tile of the same types: rows 0 .. nr - 1 (nr <= 16, row r at w + r * row_bytes), weights 0 .. kc - 1
  // (kc <= CHUNK_K) -> wt [kc][16] (row r of weight k at wt[k * 16 + r]), rows nr .. 15 zero; the values unpack_f
  // gives, moved
  void (*tile_f[N_TYPE_IDS])(const uint8_t* w, size_t row_bytes, int nr, int kc, float* wt);
  // by GGML type id: this path's small-N kernels want the type's rows repacked at load (repack.h), where
  // repacked_type applies; every path reads the internal layouts (unpack), only the ones asking for them fast
  bool repack[N_TYPE_IDS];
  // u_rows: [16][kc] row-major -> u_il: [kc/4][16][4] (kc a multiple of 32); also turns [16][8j] float
  // scale tables into [8j][16]
  void (*interleave16)(const uint8_t* u_rows, int kc, uint8_t* u_il);
  UnpackIlFn unpack_il[N_TYPE_IDS];  // by QType id (optional: nullptr where unpack + interleave16 serve)
  // adds the chunk's groups to acc in the canonical order (above), for r < 16 and every (padded) column c
  // w_il: [kc/4][16][4]; s, m: [kc/G][16]; acc: [n_panels * qgemm_cb][acc_sets][16]
  void (*qgemm_chunk)(const QuantLayout& L, const uint8_t* w_il, const float* s, const float* m, int kc,
                      const XGroups& X, float* acc);
  int qgemm_cb;  // activation columns per panel
  int acc_sets;  // S: accumulator sets per output of the canonical order (1, or 8 on AVX2); the kernels' acc
                 // holds S floats per output, reduced by the caller (reduce_sets)
  // small N (optional, nullptr where absent): u_rows [16][kc], s/m [16][sw] (sw >= 16) straight from
  // unpack, no interleave; acc: [n][16 rows][acc_sets], each output's running sets in the canonical order
  // (above), so any chunking of k (at multiples of 256 weights) gives the same bits. init: the chunk is the first of its rows, so acc is written without
  // being read (nobody zeroes it); else the chunk adds to it. Rows nr..15 of acc are left undefined.
  void (*qgemv_chunk)(const QuantLayout& L, const uint8_t* u_rows, const float* s, const float* m, int sw, int kc,
                      int nr, int n, const XLanes& X, bool init, float* acc);
  // small N, fused (optional per type): reads the weight blocks of rows w + r * row_bytes (r < nr, already
  // offset to the chunk) directly, with no unpacked copy; same acc contract as qgemv_chunk
  void (*qgemv_fused[N_TYPE_IDS])(const uint8_t* w, size_t row_bytes, int nr, int kc, int n, const XLanes& X, bool init,
                          float* acc);
  // outputs from the small-N kernels' acc (optional: nullptr where the caller's scalar loop serves): acc
  // [n][16 rows][acc_sets] -> y[c * ldy + r] for r < nr, c < n, each the canonical reduction of its sets (above),
  // the same bits as that loop. A fused row of 896 weights costs ~130 cycles on Zen 3; the loop's dependent adds
  // were ~4% of the 0.5B's decode
  void (*reduce_rows)(const float* acc, int nr, int n, float* y, size_t ldy);
  int fused_chunk_k;  // weights per call of a fused kernel (a multiple of 256), or 0: whole rows
  int gemv_max_n;     // products of up to this many activation rows run the small-N kernels (where there are some)
  int gemv_max_n_unpacked;  // the same for a type without a fused kernel (qgemv_chunk over unpack's copy)
  // float path: w: [kc][16] (row r at w[k*16 + r]); x: [n][ldx] float; acc: [n][16]; acc[c][r] += w[k][r] * x[c][k]
  // for k in order, one fused multiply-add a step on a path that has them (AVX2, AVX-512), a product then a sum on
  // the scalar path: the float matrices' whole order (fgemv takes the same steps at small N)
  void (*fgemm_chunk)(const float* w, int kc, int n, const float* x, size_t ldx, float* acc);
  // float path, small N (optional per type, nullptr where the tile serves every N): whole rows of k weights
  // w + r * row_bytes, r < nr <= 16, times x [n][ldx] -> acc [n][16] written (rows nr .. 15 undefined), in
  // fgemm_chunk's order and bits, for n <= fgemv_max_n: no tile is stored and read back
  void (*fgemv[N_TYPE_IDS])(const uint8_t* w, size_t row_bytes, int nr, int k, int n, const float* x, size_t ldx,
                            float* acc);
  int fgemv_max_n;
  // x: [k] float -> xq: [k] int8, dx: [k/32] (k a multiple of 32), sum16: [k/16] (sum of xq per 16);
  // x ~= dx * xq with dx = amax / 127 of the 32-block, xq = x * (127 / amax) rounded to nearest even (0 where
  // 127 / amax overflows); for finite x, every path the same bytes (NaN or infinite x: unspecified bytes)
  void (*quantize_row_x)(const float* x, int k, int8_t* xq, float* dx, int32_t* sum16);
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
const KernelTable* kernels_avx512s8();  // the avx2 order (S = 8) with an AVX-512 VNNI tile kernel
#endif

}  // namespace lll
