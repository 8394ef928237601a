#include "matmul.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>

namespace lll {

namespace {

constexpr int GEMV_MAX_N = 4;      // up to this many activation rows the lanes-along-k kernels are faster (measured)
constexpr int GEMV_CHUNK_K = 1024;  // it needs no interleave, so it takes longer chunks

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

const TypeInfo& checked_type(const KernelTable& kt, int type_id, int k) {
  const TypeInfo* ti = type_info(type_id);
  if (!ti || type_id < 0 || type_id >= 40 || (!kt.unpack[type_id] && !kt.unpack_f[type_id]))
    throw std::invalid_argument("unsupported tensor type id " + std::to_string(type_id));
  if (k <= 0 || k % ti->block_size)
    throw std::invalid_argument(std::string(ti->name) + ": row length " + std::to_string(k) +
                                " is not a whole number of blocks");
  return *ti;
}

}  // namespace

const TypeInfo* type_info(int type_id) {
  static const TypeInfo table[] = {
      {QType::F32, "F32", 1, 4},         {QType::F16, "F16", 1, 2},         {QType::Q4_0, "Q4_0", 32, 18},
      {QType::Q4_1, "Q4_1", 32, 20},     {QType::Q5_0, "Q5_0", 32, 22},     {QType::Q5_1, "Q5_1", 32, 24},
      {QType::Q8_0, "Q8_0", 32, 34},     {QType::Q2_K, "Q2_K", 256, 84},    {QType::Q3_K, "Q3_K", 256, 110},
      {QType::Q4_K, "Q4_K", 256, 144},   {QType::Q5_K, "Q5_K", 256, 176},   {QType::Q6_K, "Q6_K", 256, 210},
      {QType::IQ4_NL, "IQ4_NL", 32, 18}, {QType::IQ4_XS, "IQ4_XS", 256, 136}, {QType::BF16, "BF16", 1, 2},
  };
  for (const auto& t : table)
    if ((int)t.type == type_id) return &t;
  return nullptr;
}

QuantLayout quant_layout(QType t) {
  switch (t) {
    case QType::Q4_0: return {32, 8, false};
    case QType::Q5_0: return {32, 16, false};
    case QType::Q8_0: return {32, 128, false};
    case QType::IQ4_NL: return {32, 128, false};
    case QType::IQ4_XS: return {32, 128, false};
    case QType::Q4_1: return {32, 0, true};
    case QType::Q5_1: return {32, 0, true};
    case QType::Q4_K: return {32, 0, true};
    case QType::Q5_K: return {32, 0, true};
    case QType::Q2_K: return {16, 0, true};
    case QType::Q3_K: return {16, 4, false};
    case QType::Q6_K: return {16, 32, false};
    default: return {0, 0, false};
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

static void matmul_quant(const KernelTable& kt, const TypeInfo& ti, const uint8_t* w, size_t row_bytes, int m, int k,
                         const float* x, int n, float* y, ThreadPool& pool) {
  const QuantLayout L = quant_layout(ti.type);
  const UnpackFn unpack = kt.unpack[(int)ti.type];
  // thread_local storage is named through references: a lambda body naming a thread_local would
  // reach the worker thread's own (empty) instance
  thread_local QuantizedX tls_x;
  thread_local std::vector<float> tls_xd, tls_xm, tls_dxe;
  thread_local std::vector<int32_t> tls_xc, tls_xce;
  QuantizedX& X = tls_x;
  quantize_x(kt, x, n, k, k, X, pool);

  // per-layout group tables, packed in panels of CB columns (see XGroups); padding columns are zero
  const int G = L.group, ng = k / G, CB = kt.qgemm_cb;
  const bool gemv = kt.qgemv_chunk && n <= GEMV_MAX_N;
  const auto fused = gemv ? kt.qgemv_fused[(int)ti.type] : nullptr;
  const int n_panels = (n + CB - 1) / CB, n_pad = gemv ? n : n_panels * CB;
  thread_local std::vector<int8_t> tls_xp;
  std::vector<int8_t>& xp = tls_xp;
  std::vector<float>& xd = tls_xd;
  std::vector<float>& xm = tls_xm;
  std::vector<int32_t>& xc = tls_xc;
  const size_t n_slots = (size_t)n_pad * ng;  // [panel][g][j] or, for the small-N path, [c][g]
  xd.assign(n_slots, 0.f);
  xm.assign(L.has_min || gemv ? n_slots : 1, 0.f);
  xc.assign(n_slots, 0);
  if (!gemv) xp.assign((size_t)n_pad * k, 0);
  for (int c = 0; c < n; ++c)
    for (int g = 0; g < ng; ++g) {
      const int k0 = g * G;
      int32_t sum = 0;
      for (int h = k0 / 16; h < (k0 + G) / 16; ++h) sum += X.sum16[(size_t)c * (k / 16) + h];
      const float d = X.dx[(size_t)c * (k / 32) + k0 / 32];
      const size_t slot = gemv ? (size_t)c * ng + g : ((size_t)(c / CB) * ng + g) * CB + c % CB;
      xd[slot] = d;
      xc[slot] = -L.offset * sum;
      if (L.has_min || gemv) xm[slot] = d * (float)sum;  // the small-N kernels may fold the offset in with it
      if (!gemv) std::memcpy(xp.data() + slot * G, X.xq.data() + (size_t)c * k + k0, G);
    }

  const int n_tiles = (m + TILE_M - 1) / TILE_M;
  const int nt = pool.size();
  // weights per chunk: the fused small-N kernels take what their table asks (AVX2: whole rows, each row
  // streamed front to back; chunks of 1024 decoded the 0.5B at 25 tok/s instead of 34); they keep no
  // unpacked copy, so cu, the unpacked chunk, is 0 for them
  const int ck = fused ? (kt.fused_chunk_k ? std::min(k, kt.fused_chunk_k) : k) : gemv ? GEMV_CHUNK_K : CHUNK_K;
  const int cu = fused ? 0 : ck;
  const int sw = std::max(16, ((cu / G) + 15) / 16 * 16);     // floats per row in the scale tables
  std::vector<float>& dxe = tls_dxe;
  std::vector<int32_t>& xce = tls_xce;
  dxe.resize(gemv ? (size_t)n * (k / 4) : 0);
  xce.resize(gemv ? (size_t)n * (k / 4) : 0);
  for (int c = 0; gemv && c < n; ++c)
    for (int l = 0; l < k / 4; ++l) {
      const int8_t* q = X.xq.data() + (size_t)c * k + 4 * l;
      dxe[(size_t)c * (k / 4) + l] = X.dx[(size_t)c * (k / 32) + l / 8];
      xce[(size_t)c * (k / 4) + l] = -L.offset * (q[0] + q[1] + q[2] + q[3]);
    }
  const size_t acc_n = (size_t)TILE_M * n_pad * (gemv ? 16 : 1);
  const size_t scratch_bytes = 2 * padded(TILE_M * cu) + 4 * padded(sizeof(float) * TILE_M * sw) +
                               padded(sizeof(float) * acc_n);
  struct Scratch {
    uint8_t *u_rows, *u_il;
    float *s_rows, *m_rows, *s, *mm, *acc;
  };
  auto tile_fn = [&](int tile) {
    thread_local Arena arena;
    uint8_t* cur = arena.reserve(scratch_bytes);
    Scratch S;
    S.u_rows = carve<uint8_t>(cur, TILE_M * cu);
    S.u_il = carve<uint8_t>(cur, TILE_M * cu);
    S.s_rows = carve<float>(cur, TILE_M * sw);
    S.m_rows = carve<float>(cur, TILE_M * sw);
    S.s = carve<float>(cur, TILE_M * sw);
    S.mm = carve<float>(cur, TILE_M * sw);
    S.acc = carve<float>(cur, acc_n);
    const int r0 = tile * TILE_M, nr = std::min(TILE_M, m - r0);
    std::memset(S.acc, 0, sizeof(float) * acc_n);
    for (int k0 = 0; k0 < k; k0 += ck) {
      const int kc = std::min(ck, k - k0);
      const size_t boff = (size_t)(k0 / ti.block_size) * ti.type_size;
      if (!fused && r0 + TILE_M < m) {
        // the next tile's rows of this chunk, into L2 (the fused kernels prefetch inside): an L1 prefetch
        // (or none) leaves too few misses in flight to stream at full bandwidth
        const size_t cbytes = (size_t)(kc / ti.block_size) * ti.type_size;
        const int nn = std::min(TILE_M, m - r0 - TILE_M);
        for (int r = 0; r < nn; ++r)
          for (size_t off = 0; off < cbytes; off += 64)
            __builtin_prefetch(w + (size_t)(r0 + TILE_M + r) * row_bytes + boff + off, 0, 2);
      }
      if (gemv) {
        const XLanes Xl{X.xq.data() + k0, (size_t)k, dxe.data() + k0 / 4, xce.data() + k0 / 4, (size_t)k / 4,
                        xm.data() + k0 / G, (size_t)ng, xd.data() + k0 / G};
        if (fused) {
          fused(w + (size_t)r0 * row_bytes + boff, row_bytes, nr, kc, n, Xl, S.acc);
          continue;
        }
        unpack(w + (size_t)r0 * row_bytes + boff, row_bytes, nr, kc, S.u_rows, S.s_rows, S.m_rows, sw);
        kt.qgemv_chunk(L, S.u_rows, S.s_rows, S.m_rows, sw, kc, nr, n, Xl, S.acc);
        continue;
      }
      unpack(w + (size_t)r0 * row_bytes + boff, row_bytes, nr, kc, S.u_rows, S.s_rows, S.m_rows, sw);
      kt.interleave16(S.u_rows, kc, S.u_il);
      kt.interleave16((const uint8_t*)S.s_rows, 4 * sw, (uint8_t*)S.s);
      if (L.has_min) kt.interleave16((const uint8_t*)S.m_rows, 4 * sw, (uint8_t*)S.mm);
      const XGroups Xg{xp.data(), xd.data(), xc.data(), L.has_min ? xm.data() : nullptr, ng, k0 / G, n_panels};
      kt.qgemm_chunk(L, S.u_il, S.s, S.mm, kc, Xg, S.acc);
    }
    if (!gemv) {  // one block copy per column: a row of y per column is a different page for large m
      for (int c = 0; c < n; ++c) std::memcpy(y + (size_t)c * m + r0, S.acc + (size_t)c * TILE_M, sizeof(float) * nr);
      return;
    }
    for (int c = 0; c < n; ++c) kt.reduce16(S.acc + (size_t)c * TILE_M * 16, nr, y + (size_t)c * m + r0);
  };
  // tiles go out in contiguous ranges (a thread streams one span of weights: prefetchers follow it),
  // a few ranges per thread so a thread the OS delays does not hold up the others (8 for small N, whose
  // short calls otherwise leave one thread waiting up to an eighth of the call for the other; 16 measured
  // slower on the 1.5B, its ranges too short for the prefetchers)
  const int n_parts = std::min(n_tiles, nt == 1 ? 1 : (gemv ? 8 : 4) * nt);
  pool.run(n_parts, [&](int part, int) {
    const int t0 = (int)((int64_t)n_tiles * part / n_parts), t1 = (int)((int64_t)n_tiles * (part + 1) / n_parts);
    for (int t = t0; t < t1; ++t) tile_fn(t);
  });
}

static void matmul_float(const KernelTable& kt, const TypeInfo& ti, const uint8_t* w, size_t row_bytes, int m, int k,
                         const float* x, int n, float* y, ThreadPool& pool) {
  const UnpackFloatFn unpack = kt.unpack_f[(int)ti.type];
  const int n_tiles = (m + TILE_M - 1) / TILE_M;
  const size_t scratch_bytes = 2 * padded(sizeof(float) * TILE_M * CHUNK_K) + padded(sizeof(float) * TILE_M * n);
  pool.run(n_tiles, [&](int tile, int) {
    thread_local Arena arena;
    uint8_t* cur = arena.reserve(scratch_bytes);
    float* rows = carve<float>(cur, TILE_M * CHUNK_K);
    float* wt = carve<float>(cur, TILE_M * CHUNK_K);
    float* acc = carve<float>(cur, (size_t)TILE_M * n);
    const int r0 = tile * TILE_M, nr = std::min(TILE_M, m - r0);
    std::memset(acc, 0, sizeof(float) * TILE_M * n);
    for (int k0 = 0; k0 < k; k0 += CHUNK_K) {
      const int kc = std::min(CHUNK_K, k - k0);
      for (int r = 0; r < TILE_M; ++r) {
        if (r < nr) unpack(w + (size_t)(r0 + r) * row_bytes + (size_t)k0 * ti.type_size, kc, rows + r * kc);
        else std::memset(rows + r * kc, 0, sizeof(float) * kc);
      }
      for (int r = 0; r < TILE_M; ++r)
        for (int kk = 0; kk < kc; ++kk) wt[kk * TILE_M + r] = rows[r * kc + kk];
      kt.fgemm_chunk(wt, kc, n, x + k0, (size_t)k, acc);
    }
    for (int c = 0; c < n; ++c)
      for (int r = 0; r < nr; ++r) y[(size_t)c * m + r0 + r] = acc[c * TILE_M + r];
  });
}

void matmul(const KernelTable& kt, int type_id, const uint8_t* w, size_t row_bytes, int m, int k, const float* x,
            int n, float* y, ThreadPool& pool) {
  const TypeInfo& ti = checked_type(kt, type_id, k);
  if (row_bytes < (size_t)(k / ti.block_size) * ti.type_size)
    throw std::invalid_argument(std::string(ti.name) + ": row stride too small for " + std::to_string(k) + " weights");
  if (m <= 0 || n <= 0) return;
  if (kt.unpack[type_id]) matmul_quant(kt, ti, w, row_bytes, m, k, x, n, y, pool);
  else matmul_float(kt, ti, w, row_bytes, m, k, x, n, y, pool);
}

void dequantize(const KernelTable& kt, int type_id, const uint8_t* w, size_t row_bytes, int rows, int k, float* out) {
  const TypeInfo& ti = checked_type(kt, type_id, k);
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
