// Matrix products over GGML-typed weight rows (matmul.h): the type table, activation quantization, the
// small-N and tiled paths, and dequantization.
#include "matmul.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace lll {

namespace {

constexpr int GEMV_CHUNK_K = 1024;  // the small-N kernels need no interleave, so they take longer chunks
// int8 activation bytes per column block of the tile path (their per-group dx, offset and min tables add 8-12 bytes
// per group: up to 75% more for 16-weight groups): with the tile's decoded rows and its accumulators, about the
// L2 of the cores this runs on (512 KiB on Zen 3, 1-2 MiB on Zen 4 and recent Xeons); measured, not derived
constexpr size_t XP_BLOCK_BYTES = 256 << 10;

struct Aligned {
  void operator()(void* p) const { std::free(p); }
};
template <class T>
std::unique_ptr<T[], Aligned> aligned_array(size_t n) {
  const size_t bytes = (n * sizeof(T) + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, bytes ? bytes : 64);
  if (!p) throw std::bad_alloc();
  return std::unique_ptr<T[], Aligned>((T*)p);
}

// Per-thread scratch that only grows: products run back to back (hundreds per decoded token), so
// buffers are reused instead of allocated per call.
struct Arena {
  std::unique_ptr<uint8_t[], Aligned> p;
  size_t cap = 0;
  uint8_t* reserve(size_t bytes) {
    if (bytes > cap) {
      p = aligned_array<uint8_t>(bytes);
      cap = bytes;
    }
    return p.get();
  }
};
template <class T>
T* carve(uint8_t*& cur, size_t n) {
  T* r = (T*)cur;
  cur += (n * sizeof(T) + 63) / 64 * 64;
  return r;
}
size_t padded(size_t bytes) { return (bytes + 63) / 64 * 64; }

}  // namespace

const TypeInfo& checked_type(const KernelTable& kt, int type_id, int k, const std::string& what) {
  const TypeInfo* ti = type_info(type_id);
  if (!ti || type_id < 0 || type_id >= N_TYPE_IDS || (!kt.unpack[type_id] && !kt.unpack_f[type_id]))
    throw std::invalid_argument(what + ": tensor type id " + std::to_string(type_id) + " is not supported");
  if (k <= 0 || k % ti->block_size)
    throw std::invalid_argument(what + ": row length " + std::to_string(k) + " is not a whole number of blocks of " +
                                ti->name + " (" + std::to_string(ti->block_size) + " weights)");
  return *ti;
}

const TypeInfo* type_info(int type_id) {
  // block sizes and bytes from the block structs of quant_formats.h (tests/native/test_extension.py checks the
  // table against runtime/model/quant_types.py)
  static const TypeInfo table[] = {
      {QType::F32, "F32", 1, sizeof(float)},
      {QType::F16, "F16", 1, sizeof(f16_t)},
      {QType::Q4_0, "Q4_0", QK, sizeof(block_q4_0)},
      {QType::Q4_1, "Q4_1", QK, sizeof(block_q4_1)},
      {QType::Q5_0, "Q5_0", QK, sizeof(block_q5_0)},
      {QType::Q5_1, "Q5_1", QK, sizeof(block_q5_1)},
      {QType::Q8_0, "Q8_0", QK, sizeof(block_q8_0)},
      {QType::Q2_K, "Q2_K", QK_K, sizeof(block_q2_K)},
      {QType::Q3_K, "Q3_K", QK_K, sizeof(block_q3_K)},
      {QType::Q4_K, "Q4_K", QK_K, sizeof(block_q4_K)},
      {QType::Q5_K, "Q5_K", QK_K, sizeof(block_q5_K)},
      {QType::Q6_K, "Q6_K", QK_K, sizeof(block_q6_K)},
      {QType::IQ4_NL, "IQ4_NL", QK, sizeof(block_iq4_nl)},
      {QType::IQ4_XS, "IQ4_XS", QK_K, sizeof(block_iq4_xs)},
      {QType::BF16, "BF16", 1, sizeof(bf16_t)},
      {QType::MXFP4, "MXFP4", QK, sizeof(block_mxfp4)},
      // internal (repack.h): the X8 layouts take rows of whole 4 blocks
      {QType::Q4_0X8, "Q4_0x8", 4 * QK, 4 * sizeof(block_q4_0)},
      {QType::Q4_1X8, "Q4_1x8", 4 * QK, 4 * sizeof(block_q4_1)},
      {QType::Q5_0X8, "Q5_0x8", 4 * QK, 4 * sizeof(block_q5_0)},
      {QType::Q5_1X8, "Q5_1x8", 4 * QK, 4 * sizeof(block_q5_1)},
      {QType::Q4_KX, "Q4_Kx", QK_K, sizeof(block_q4_kx)},
  };
  for (const auto& t : table)
    if ((int)t.type == type_id) return &t;
  return nullptr;
}

QuantLayout quant_layout(QType t) {
  switch (t) {
    case QType::Q4_0: return {32, 8, false, 15};
    case QType::Q5_0: return {32, 16, false, 31};
    case QType::Q5_0X8: return {32, 16, false, 31};
    case QType::Q4_0X8: return {32, 8, false, 15};
    case QType::Q4_1X8: return {32, 0, true, 15};
    case QType::Q5_1X8: return {32, 0, true, 31};
    case QType::Q8_0: return {32, 128, false, 255};
    case QType::IQ4_NL: return {32, 128, false, 255};
    case QType::IQ4_XS: return {32, 128, false, 255};
    case QType::MXFP4: return {32, 128, false, 255};
    case QType::Q4_1: return {32, 0, true, 15};
    case QType::Q5_1: return {32, 0, true, 31};
    case QType::Q4_K: return {32, 0, true, 15};
    case QType::Q4_KX: return {32, 0, true, 15};
    case QType::Q5_K: return {32, 0, true, 31};
    case QType::Q2_K: return {16, 0, true, 3};
    case QType::Q3_K: return {16, 4, false, 7};
    case QType::Q6_K: return {16, 32, false, 63};
    default: return {0, 0, false, 0};
  }
}

void quantize_x(const KernelTable& kt, const float* x, int n, int k, size_t ldx, QuantizedX& out, ThreadPool& pool) {
  out.n = n;
  out.k = k;
  out.xq.resize((size_t)n * k);
  out.dx.resize((size_t)n * (k / 32));
  out.sum16.resize((size_t)n * (k / 16));
  auto row = [&](int c, int) {
    kt.quantize_row_x(x + (size_t)c * ldx, k, out.xq.data() + (size_t)c * k, out.dx.data() + (size_t)c * (k / 32),
                      out.sum16.data() + (size_t)c * (k / 16));
  };
  if ((size_t)n * k >= (1u << 16)) pool.run(n, row);
  else for (int c = 0; c < n; ++c) row(c, 0);
}

// dx of the 32-block holding group g (G weights, starting at g * G) of activation row c, and sum(xq) over it
static inline float group_sum(const QuantizedX& X, int c, int g, int G, int32_t& sum) {
  const int k = X.k, k0 = g * G;
  sum = 0;
  for (int h = k0 / 16; h < (k0 + G) / 16; ++h) sum += X.sum16[(size_t)c * (k / 16) + h];
  return X.dx[(size_t)c * (k / 32) + k0 / 32];
}

// the small-N activation tables of one weight layout (XLanes): per group [c][k/G] the values the tile path packs
// (dx, -offset * sum(xq), dx * sum(xq)), computed by the same expressions
struct LaneTables {
  QuantLayout L{};
  std::vector<float> xd, xm;
  std::vector<int32_t> xc;
  void build(const QuantLayout& layout, const QuantizedX& X) {
    L = layout;
    const int n = X.n, k = X.k, G = L.group, ng = k / G;
    xd.resize((size_t)n * ng);
    xm.resize((size_t)n * ng);
    xc.resize((size_t)n * ng);
    for (int c = 0; c < n; ++c)
      for (int g = 0; g < ng; ++g) {
        int32_t sum;
        const float d = group_sum(X, c, g, G, sum);
        const size_t i = (size_t)c * ng + g;
        xd[i] = d;
        xc[i] = -L.offset * sum;
        xm[i] = d * (float)sum;
      }
  }
};

// Outputs from their S accumulator sets in the canonical order (kernels.h): y = ((a[0] + a[1]) + a[2]) + ...
// one output, its sets a[0 .. S-1] adjacent (the small-N kernels' acc)
static inline float reduce_sets(const float* a, int S) {
  float y = a[0];
  for (int i = 1; i < S; ++i) y += a[i];
  return y;
}
// 16 rows' outputs, a: [S][16] (the tile kernels' acc), into y[0 .. nr-1]; the same sums, 16 rows as lanes
static inline void reduce_sets16(const float* a, int S, int nr, float* y) {
  float t[TILE_M];
  for (int r = 0; r < TILE_M; ++r) t[r] = a[r];
  for (int i = 1; i < S; ++i)
    for (int r = 0; r < TILE_M; ++r) t[r] += a[(size_t)i * TILE_M + r];
  std::memcpy(y, t, sizeof(float) * nr);
}

// contiguous ranges of n_tiles tiles for nt threads, each 1 / (2 x threads) of what is left (a quarter with two) down
// to one tile: long ranges first (a thread streams one span of weights: prefetchers follow it), short ones at the
// end, so the threads finish within a tile of each other and a thread the OS delays does not hold up the others.
// Equal ranges, 8 per thread, left half of the last one's time idle at every product's end (the 0.5B: ~4% of a
// decode step); 16 per thread measured slower on the 1.5B, its ranges too short for the prefetchers
template <class F>
static void for_each_range(int n_tiles, int nt, F&& f) {
  for (int t0 = 0; t0 < n_tiles;) {
    const int left = n_tiles - t0, len = nt == 1 ? left : (left + 2 * nt - 1) / (2 * nt);
    f(t0, t0 + len);
    t0 += len;
  }
}

// whether a product of n activation rows with weights of type_id runs the small-N kernels
static bool small_n(const KernelTable& kt, int type_id, int n) {
  if (!kt.unpack[type_id]) return false;
  if (kt.qgemv_fused[type_id]) return n <= kt.gemv_max_n;
  return kt.qgemv_chunk && n <= kt.gemv_max_n_unpacked;
}

// small N (small_n: up to the table's gemv_max_n activation rows), no activation packing. Several products sharing x
// (q/k/v, gate/up) go out as one pool dispatch after one activation quantization: decode issues them back to
// back, and each dispatch costs a wake-up and a wait for the slowest thread. Every output is computed whole by
// one kernel call sequence in the canonical order (kernels.h), the same bits the tile path gives.
// xs: nullptr (every job's input is x) or each job's own input xs[j] ([n][k] as x)
static void gemv_jobs(const KernelTable& kt, const MatmulJob* jobs, int n_jobs, int k, const float* x,
                      const float* const* xs, int n, ThreadPool& pool) {
  // thread_local storage is named through references: a lambda body naming a thread_local would
  // reach the worker thread's own (empty) instance
  thread_local std::vector<QuantizedX> tls_x;
  thread_local std::vector<LaneTables> tls_tables;
  std::vector<QuantizedX>& Xs = tls_x;
  std::vector<LaneTables>& tables = tls_tables;
  const int n_x = xs ? n_jobs : 1;
  if ((int)Xs.size() < n_x) Xs.resize(n_x);
  for (int i = 0; i < n_x; ++i) quantize_x(kt, xs ? xs[i] : x, n, k, k, Xs[i], pool);
  auto x_of = [&](int j) -> const QuantizedX& { return Xs[xs ? j : 0]; };
  if ((int)tables.size() < n_jobs) tables.resize(n_jobs);
  std::vector<int> table_of(n_jobs);
  for (int j = 0; j < n_jobs; ++j) {  // one table set per distinct layout (and input)
    const QuantLayout L = quant_layout((QType)jobs[j].type_id);
    table_of[j] = j;
    for (int i = 0; i < j && !xs; ++i) {
      const QuantLayout& M = tables[table_of[i]].L;
      if (table_of[i] == i && M.group == L.group && M.offset == L.offset && M.has_min == L.has_min) {
        table_of[j] = i;
        break;
      }
    }
    if (table_of[j] == j) tables[j].build(L, x_of(j));
  }

  // tiles go out in contiguous ranges (for_each_range)
  struct Part {
    int job, t0, t1;
  };
  std::vector<Part> parts;
  for (int j = 0; j < n_jobs; ++j)
    for_each_range((jobs[j].m + TILE_M - 1) / TILE_M, pool.size(), [&](int t0, int t1) { parts.push_back({j, t0, t1}); });
  struct Plan {  // per product, looked up once per call (a tile runs for a few microseconds)
    const TypeInfo* ti;
    QuantLayout L;
    std::decay_t<decltype(kt.qgemv_fused[0])> fused;
  };
  std::vector<Plan> plans(n_jobs);
  for (int j = 0; j < n_jobs; ++j) {
    Plan& P = plans[j];
    P.ti = type_info(jobs[j].type_id);
    P.L = quant_layout(P.ti->type);
    P.fused = kt.qgemv_fused[jobs[j].type_id];
  }
  const int S = kt.acc_sets;
  const size_t acc_n = (size_t)TILE_M * n * S;  // [n][16 rows][S sets]
  // one part: tiles t0 .. t1 - 1 of one product, set up once (a tile of a small matrix runs for a microsecond or two)
  auto part_fn = [&](const MatmulJob& J, const Plan& P, const LaneTables& T, const QuantizedX& X, int t0, int t1) {
    const TypeInfo& ti = *P.ti;
    const QuantLayout& L = P.L;
    const int G = L.group, ng = k / G;
    const auto fused = P.fused;
    // weights per chunk: the fused kernels take what their table asks (AVX2: whole rows, each row streamed
    // front to back; chunks of 1024 decoded the 0.5B at 25 tok/s instead of 34) and keep no unpacked copy
    const int ck = fused ? (kt.fused_chunk_k ? std::min(k, kt.fused_chunk_k) : k) : GEMV_CHUNK_K;
    const int cu = fused ? 0 : ck;
    const int sw = std::max(16, ((cu / G) + 15) / 16 * 16);  // floats per row in the scale tables
    thread_local Arena arena;
    uint8_t* cur = arena.reserve(padded(TILE_M * cu) + 2 * padded(sizeof(float) * TILE_M * sw) +
                                 padded(sizeof(float) * acc_n));
    uint8_t* u_rows = carve<uint8_t>(cur, TILE_M * cu);
    float* s_rows = carve<float>(cur, TILE_M * sw);
    float* m_rows = carve<float>(cur, TILE_M * sw);
    float* acc = carve<float>(cur, acc_n);
    auto outputs = [&](int r0, int nr) {
      if (kt.reduce_rows) return kt.reduce_rows(acc, nr, n, J.y + r0, (size_t)J.m);
      for (int c = 0; c < n; ++c)
        for (int r = 0; r < nr; ++r) J.y[(size_t)c * J.m + r0 + r] = reduce_sets(acc + ((size_t)c * TILE_M + r) * S, S);
    };
    if (fused && ck == k) {  // whole rows, one call a tile (the 0.5B's rows of 896 weights: ~2 us a tile)
      const XLanes Xl{X.xq.data(), (size_t)k, T.xd.data(), T.xc.data(), T.xm.data(), (size_t)ng};
      for (int tile = t0; tile < t1; ++tile) {
        const int r0 = tile * TILE_M, nr = std::min(TILE_M, J.m - r0);
        fused(J.w + (size_t)r0 * J.row_bytes, J.row_bytes, nr, k, n, Xl, true, acc);
        outputs(r0, nr);
      }
      return;
    }
    for (int tile = t0; tile < t1; ++tile) {
      const int r0 = tile * TILE_M, nr = std::min(TILE_M, J.m - r0);
      // no zeroing: each kernel writes acc on the first chunk of the rows (init) and adds to it after
      for (int k0 = 0; k0 < k; k0 += ck) {
        const bool init = k0 == 0;
        const int kc = std::min(ck, k - k0);
        const uint8_t* w = J.w + (size_t)r0 * J.row_bytes + (size_t)(k0 / ti.block_size) * ti.type_size;
        const size_t go = (size_t)(k0 / G);
        const XLanes Xl{X.xq.data() + k0, (size_t)k, T.xd.data() + go, T.xc.data() + go, T.xm.data() + go, (size_t)ng};
        if (fused) {
          fused(w, J.row_bytes, nr, kc, n, Xl, init, acc);
          continue;
        }
        if (r0 + TILE_M < J.m) {  // the next tile's rows of this chunk, into L2 (the fused kernels prefetch inside)
          const size_t cbytes = (size_t)(kc / ti.block_size) * ti.type_size;
          const int nn = std::min(TILE_M, J.m - r0 - TILE_M);
          for (int r = 0; r < nn; ++r)
            for (size_t off = 0; off < cbytes; off += 64)
              __builtin_prefetch(w + (size_t)(TILE_M + r) * J.row_bytes + off, 0, 2);
        }
        kt.unpack[J.type_id](w, J.row_bytes, nr, kc, u_rows, s_rows, m_rows, sw);
        kt.qgemv_chunk(L, u_rows, s_rows, m_rows, sw, kc, nr, n, Xl, init, acc);
      }
      outputs(r0, nr);
    }
  };
  pool.run((int)parts.size(), [&](int p, int) {
    const Part& P = parts[p];
    part_fn(jobs[P.job], plans[P.job], tables[table_of[P.job]], x_of(P.job), P.t0, P.t1);
  });
}

// x quantized and packed for the tile kernel, shared by the products of one matmul_multi call (q/k/v, gate/up):
// quantized once, packed again only when the weight layout changes
struct TileActivations {
  QuantizedX X;
  std::vector<float> xd, xm;
  std::vector<int32_t> xc;
  std::vector<int8_t> xp;
  bool quantized = false;
  QuantLayout packed{};  // the layout xp .. xc hold (group 0: none)
};

// larger N: 16-row tiles unpacked and interleaved, panels of qgemm_cb columns
static void gemm_quant(const KernelTable& kt, const TypeInfo& ti, const uint8_t* w, size_t row_bytes, int m, int k,
                       const float* x, int n, float* y, ThreadPool& pool, TileActivations& A) {
  const QuantLayout L = quant_layout(ti.type);
  const UnpackFn unpack = kt.unpack[(int)ti.type];
  const UnpackIlFn unpack_il = kt.unpack_il[(int)ti.type];
  QuantizedX& X = A.X;
  if (!A.quantized) {
    quantize_x(kt, x, n, k, k, X, pool);
    A.quantized = true;
    A.packed = QuantLayout{};
  }

  // per-layout group tables, packed in panels of CB columns (see XGroups); padding columns are zero
  const int G = L.group, ng = k / G, CB = kt.qgemm_cb;
  const int n_panels = (n + CB - 1) / CB, n_pad = n_panels * CB;
  std::vector<int8_t>& xp = A.xp;
  std::vector<float>& xd = A.xd;
  std::vector<float>& xm = A.xm;
  std::vector<int32_t>& xc = A.xc;
  if (A.packed.group != L.group || A.packed.offset != L.offset || A.packed.has_min != L.has_min) {
    const size_t n_slots = (size_t)n_pad * ng;  // [panel][g][j]
    xd.assign(n_slots, 0.f);
    xm.assign(L.has_min ? n_slots : 1, 0.f);
    xc.assign(n_slots, 0);
    xp.assign((size_t)n_pad * k, 0);
    // columns in parallel (each writes its own slots): 512 columns of 8960 are 143k groups
    pool.run(n, [&](int c, int) {
      for (int g = 0; g < ng; ++g) {
        const int k0 = g * G;
        int32_t sum;
        const float d = group_sum(X, c, g, G, sum);
        const size_t slot = ((size_t)(c / CB) * ng + g) * CB + c % CB;
        xd[slot] = d;
        xc[slot] = -L.offset * sum;
        if (L.has_min) xm[slot] = d * (float)sum;
        // G as a constant: a call to libc's memmove per group was 2-4.5% of a prompt's samples
        if (G == 32) std::memcpy(xp.data() + slot * 32, X.xq.data() + (size_t)c * k + k0, 32);
        else std::memcpy(xp.data() + slot * G, X.xq.data() + (size_t)c * k + k0, 16);
      }
    });
    A.packed = L;
  }

  const int n_tiles = (m + TILE_M - 1) / TILE_M;
  const int nt = pool.size();
  const int ck = CHUNK_K;
  const int sw = std::max(16, ((ck / G) + 15) / 16 * 16);  // floats per row in the scale tables
  const int S = kt.acc_sets;
  const size_t acc_n = (size_t)TILE_M * n_pad * S;  // [n_pad][S sets][16 rows]
  // Column blocks: a tile multiplies its 16 rows by every column, chunk by chunk, so all of xp (n_pad * k bytes)
  // passes through the core once per tile. Past L2 (2.5 MB at k = 4864, n = 512) every tile streamed it from L3
  // (such products ran 10-40% below the GFLOP/s of short rows). Then the tile's rows are decoded once into
  // whole-row buffers and the columns run in blocks whose activations stay in L2. Each output still sums its
  // chunks in the same order: the results are bit-identical to the unblocked loop.
  const int n_chunks = (k + ck - 1) / ck;
  const int block_panels =
      std::max(1, (int)std::min<size_t>(n_panels, XP_BLOCK_BYTES / ((size_t)CB * (size_t)k)));
  const bool blocked = block_panels < n_panels;
  const size_t il_chunks = blocked ? n_chunks : 1;  // decoded chunks kept per tile
  const size_t il_stride = padded(TILE_M * ck), s_stride = padded(sizeof(float) * TILE_M * sw) / sizeof(float);
  const size_t scratch_bytes = padded(TILE_M * ck) + 2 * padded(sizeof(float) * TILE_M * sw) +
                               il_chunks * (il_stride + 2 * sizeof(float) * s_stride) + padded(sizeof(float) * acc_n);
  auto tile_fn = [&](int tile) {
    thread_local Arena arena;
    uint8_t* cur = arena.reserve(scratch_bytes);
    uint8_t* u_rows = carve<uint8_t>(cur, TILE_M * ck);
    float* s_rows = carve<float>(cur, TILE_M * sw);
    float* m_rows = carve<float>(cur, TILE_M * sw);
    uint8_t* u_il = carve<uint8_t>(cur, il_chunks * il_stride);  // [il_chunks] slots of il_stride bytes
    float* s = carve<float>(cur, il_chunks * s_stride);
    float* mm = carve<float>(cur, il_chunks * s_stride);
    float* acc = carve<float>(cur, acc_n);
    const int r0 = tile * TILE_M, nr = std::min(TILE_M, m - r0);
    if (S == 1) std::memset(acc, 0, sizeof(float) * acc_n);  // kernels with sets write them on a row's first chunk
    // chunk c unpacked and interleaved into slot c (blocked) or slot 0
    auto decode = [&](int c) {
      const int k0 = c * ck, kc = std::min(ck, k - k0);
      const size_t boff = (size_t)(k0 / ti.block_size) * ti.type_size;
      if (r0 + TILE_M < m) {
        // the next tile's rows of this chunk, into L2: an L1 prefetch (or none) leaves too few misses in
        // flight to stream at full bandwidth
        const size_t cbytes = (size_t)(kc / ti.block_size) * ti.type_size;
        const int nn = std::min(TILE_M, m - r0 - TILE_M);
        for (int r = 0; r < nn; ++r)
          for (size_t off = 0; off < cbytes; off += 64)
            __builtin_prefetch(w + (size_t)(r0 + TILE_M + r) * row_bytes + boff + off, 0, 2);
      }
      const size_t slot = blocked ? c : 0;
      if (unpack_il) {
        unpack_il(w + (size_t)r0 * row_bytes + boff, row_bytes, nr, kc, u_il + slot * il_stride, s + slot * s_stride,
                  mm + slot * s_stride);
        return;
      }
      unpack(w + (size_t)r0 * row_bytes + boff, row_bytes, nr, kc, u_rows, s_rows, m_rows, sw);
      kt.interleave16(u_rows, kc, u_il + slot * il_stride);
      kt.interleave16((const uint8_t*)s_rows, 4 * sw, (uint8_t*)(s + slot * s_stride));
      if (L.has_min) kt.interleave16((const uint8_t*)m_rows, 4 * sw, (uint8_t*)(mm + slot * s_stride));
    };
    // chunk c (decoded in slot) times panels p0 .. p0 + np - 1
    auto multiply = [&](int c, size_t slot, int p0, int np) {
      const int k0 = c * ck, kc = std::min(ck, k - k0);
      const size_t po = (size_t)p0 * ng * CB;  // the block's first slot in xd, xc, xm (in xp: G times that)
      const int last_cols = p0 + np == n_panels ? n - (n_panels - 1) * CB : CB;
      const XGroups Xg{xp.data() + po * G, xd.data() + po, xc.data() + po, L.has_min ? xm.data() + po : nullptr,
                       ng, k0 / G, np, last_cols};
      kt.qgemm_chunk(L, u_il + slot * il_stride, s + slot * s_stride, mm + slot * s_stride, kc, Xg,
                     acc + (size_t)p0 * CB * S * TILE_M);
    };
    if (!blocked) {
      for (int c = 0; c < n_chunks; ++c) {
        decode(c);
        multiply(c, 0, 0, n_panels);
      }
    } else {
      for (int c = 0; c < n_chunks; ++c) decode(c);
      for (int p0 = 0; p0 < n_panels; p0 += block_panels)
        for (int c = 0; c < n_chunks; ++c) multiply(c, c, p0, std::min(block_panels, n_panels - p0));
    }
    // column by column: a row of y per column is a different page for large m
    for (int c = 0; c < n; ++c) reduce_sets16(acc + (size_t)c * S * TILE_M, S, nr, y + (size_t)c * m + r0);
  };
  // contiguous tile ranges, 16 per thread: a thread the OS or a busy sibling slows leaves less for the others to
  // wait on at the end (1.5B pp512, alternated runs: mean 58 tok/s with 4 per thread, 62 with 16 or 64)
  const int n_parts = std::min(n_tiles, nt == 1 ? 1 : 16 * nt);
  pool.run(n_parts, [&](int part, int) {
    const int t0 = (int)((int64_t)n_tiles * part / n_parts), t1 = (int)((int64_t)n_tiles * (part + 1) / n_parts);
    for (int t = t0; t < t1; ++t) tile_fn(t);
  });
}

// float weights (F32, F16, BF16): each output sums over k in order (kernels.h, fgemm_chunk). Up to fgemv_max_n
// activation rows the small-N kernel converts whole rows in registers, 16-row tiles in contiguous ranges as
// gemv_jobs hands them out; more, 16-row tiles of CHUNK_K weights converted once into a tile (tile_f) that every
// column reads (fgemm_chunk). The same bits either way.
static void matmul_float(const KernelTable& kt, const TypeInfo& ti, const uint8_t* w, size_t row_bytes, int m, int k,
                         const float* x, int n, float* y, ThreadPool& pool) {
  const int n_tiles = (m + TILE_M - 1) / TILE_M;
  const size_t acc_n = (size_t)TILE_M * n;  // [n][16]
  auto outputs = [&](const float* acc, int r0, int nr) {
    for (int c = 0; c < n; ++c) std::memcpy(y + (size_t)c * m + r0, acc + (size_t)c * TILE_M, sizeof(float) * nr);
  };
  const auto fgemv = kt.fgemv[(int)ti.type];
  if (fgemv && n <= kt.fgemv_max_n) {
    std::vector<std::pair<int, int>> parts;
    for_each_range(n_tiles, pool.size(), [&](int t0, int t1) { parts.emplace_back(t0, t1); });
    pool.run((int)parts.size(), [&](int p, int) {
      thread_local Arena arena;
      float* acc = (float*)arena.reserve(sizeof(float) * acc_n);
      for (int t = parts[p].first; t < parts[p].second; ++t) {
        const int r0 = t * TILE_M, nr = std::min(TILE_M, m - r0);
        fgemv(w + (size_t)r0 * row_bytes, row_bytes, nr, k, n, x, (size_t)k, acc);
        outputs(acc, r0, nr);
      }
    });
    return;
  }
  const auto tile_f = kt.tile_f[(int)ti.type];
  const size_t scratch_bytes = padded(sizeof(float) * TILE_M * CHUNK_K) + padded(sizeof(float) * acc_n);
  pool.run(n_tiles, [&](int tile, int) {
    thread_local Arena arena;
    uint8_t* cur = arena.reserve(scratch_bytes);
    float* wt = carve<float>(cur, TILE_M * CHUNK_K);
    float* acc = carve<float>(cur, acc_n);
    const int r0 = tile * TILE_M, nr = std::min(TILE_M, m - r0);
    std::memset(acc, 0, sizeof(float) * acc_n);
    for (int k0 = 0; k0 < k; k0 += CHUNK_K) {
      const int kc = std::min(CHUNK_K, k - k0);
      tile_f(w + (size_t)r0 * row_bytes + (size_t)k0 * ti.type_size, row_bytes, nr, kc, wt);
      kt.fgemm_chunk(wt, kc, n, x + k0, (size_t)k, acc);
    }
    outputs(acc, r0, nr);
  });
}

static void check_job(const KernelTable& kt, const MatmulJob& J, int k) {
  const TypeInfo& ti = checked_type(kt, J.type_id, k, "weights");
  if (J.row_bytes < row_bytes_of(ti, k))
    throw std::invalid_argument(std::string(ti.name) + ": row stride too small for " + std::to_string(k) + " weights");
}

void matmul(const KernelTable& kt, int type_id, const uint8_t* w, size_t row_bytes, int m, int k, const float* x,
            int n, float* y, ThreadPool& pool) {
  const MatmulJob J{type_id, w, row_bytes, m, y};
  matmul_multi(kt, &J, 1, k, x, n, pool);
}

void matmul_multi(const KernelTable& kt, const MatmulJob* jobs, int n_jobs, int k, const float* x, int n,
                  ThreadPool& pool) {
  for (int j = 0; j < n_jobs; ++j) check_job(kt, jobs[j], k);
  if (n <= 0) return;
  int j0 = 0;
  // the calling thread's, kept between calls so its buffers keep their capacity
  thread_local TileActivations tls_acts;
  TileActivations& acts = tls_acts;
  acts.quantized = false;
  for (int j = 0; j <= n_jobs; ++j) {  // runs of quantized small-N products share one dispatch
    const bool small = j < n_jobs && jobs[j].m > 0 && small_n(kt, jobs[j].type_id, n);
    if (small) continue;
    if (j > j0) gemv_jobs(kt, jobs + j0, j - j0, k, x, nullptr, n, pool);
    j0 = j + 1;
    if (j == n_jobs || jobs[j].m <= 0) continue;
    const MatmulJob& J = jobs[j];
    const TypeInfo& ti = *type_info(J.type_id);
    if (kt.unpack[J.type_id]) {
      gemm_quant(kt, ti, J.w, J.row_bytes, J.m, k, x, n, J.y, pool, acts);
    } else {
      matmul_float(kt, ti, J.w, J.row_bytes, J.m, k, x, n, J.y, pool);
    }
  }
}

void matmul_each(const KernelTable& kt, const MatmulJob* jobs, int n_jobs, int k, const float* const* xs, int n,
                 ThreadPool& pool) {
  for (int j = 0; j < n_jobs; ++j) check_job(kt, jobs[j], k);
  if (n <= 0 || n_jobs <= 0) return;
  const bool all_small = std::all_of(jobs, jobs + n_jobs, [&](const MatmulJob& J) {
    return J.m > 0 && small_n(kt, J.type_id, n);
  });
  if (all_small) return gemv_jobs(kt, jobs, n_jobs, k, nullptr, xs, n, pool);
  for (int j = 0; j < n_jobs; ++j) matmul_multi(kt, jobs + j, 1, k, xs[j], n, pool);
}

void dequantize(const KernelTable& kt, int type_id, const uint8_t* w, size_t row_bytes, int rows, int k, float* out) {
  const TypeInfo& ti = checked_type(kt, type_id, k, "tensor");
  if (kt.unpack_f[type_id]) {
    for (int r = 0; r < rows; ++r) kt.unpack_f[type_id](w + (size_t)r * row_bytes, k, out + (size_t)r * k);
    return;
  }
  const QuantLayout L = quant_layout(ti.type);
  const int ng = k / L.group, sw = (ng + 7) / 8 * 8;
  std::vector<uint8_t> u((size_t)TILE_M * k);
  std::vector<float> s((size_t)TILE_M * sw), mm((size_t)TILE_M * sw);
  for (int r0 = 0; r0 < rows; r0 += TILE_M) {
    const int nr = std::min(TILE_M, rows - r0);
    kt.unpack[type_id](w + (size_t)r0 * row_bytes, row_bytes, nr, k, u.data(), s.data(), mm.data(), sw);
    for (int r = 0; r < nr; ++r) {
      float* o = out + (size_t)(r0 + r) * k;
      const uint8_t* ur = u.data() + (size_t)r * k;
      const float* sr = s.data() + (size_t)r * sw;
      const float* mr = mm.data() + (size_t)r * sw;
      for (int i = 0; i < k; ++i) {
        const int g = i / L.group;
        o[i] = L.has_min ? sr[g] * (float)ur[i] + mr[g] : sr[g] * (float)((int)ur[i] - L.offset);
      }
    }
  }
}

}  // namespace lll
