// Load-time regrouping of weight rows (repack.h).
#include "repack.h"

#include <algorithm>
#include <array>
#include <fstream>
#include <sstream>
#if defined(__linux__)
#include <sys/mman.h>
#include <unistd.h>
#endif
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>

#include "matmul.h"
#include "quant_formats.h"
#include "thread_pool.h"

namespace lll {

namespace {

// where a 32-weight block type keeps its fields (quant_formats.h), and its X8 type
struct BlockFormat {
  QType x8;
  int bytes, m_at, qh_at, qs_at;  // field offsets; -1: absent
};
bool block_format(int type_id, BlockFormat& f) {
  switch ((QType)type_id) {
    case QType::Q4_0: f = {QType::Q4_0X8, (int)sizeof(block_q4_0), -1, -1, 2}; return true;
    case QType::Q4_1: f = {QType::Q4_1X8, (int)sizeof(block_q4_1), 2, -1, 4}; return true;
    case QType::Q5_0: f = {QType::Q5_0X8, (int)sizeof(block_q5_0), -1, 2, 6}; return true;
    case QType::Q5_1: f = {QType::Q5_1X8, (int)sizeof(block_q5_1), 2, 4, 8}; return true;
    default: return false;
  }
}

// one span of n (8 or 4) blocks -> the X8 span (quant_formats.h), n * f.bytes bytes
void repack_span(const BlockFormat& f, const uint8_t* src, int n, uint8_t* out) {
  const bool min = f.m_at >= 0, hi = f.qh_at >= 0;
  uint8_t* qs = out + 2 * n * (min ? 2 : 1);
  uint8_t* qh = qs + 16 * n;
  if (hi) std::memset(qh, 0, n == 8 ? 32 : 16);
  // the fifth bits 8 at a time: bits -> bytes of 0 / 1 (a table), shifted to bit i (n = 4: i or 4 + i) of the plane
  static const auto spread = [] {
    std::array<uint64_t, 256> t{};
    for (int v = 0; v < 256; ++v)
      for (int k = 0; k < 8; ++k) t[v] |= (uint64_t)((v >> k) & 1) << (8 * k);
    return t;
  }();
  for (int i = 0; i < n; i += 2) {  // blocks i and i + 1 (n is even) share 32 bytes of nibbles
    // weight j < 16 of block i: the low nibble of byte j, of block i + 1: its high nibble; weight 16 + j: byte 16 + j.
    // Through local copies (no char aliasing between source and output), so the compiler vectorizes the loop
    uint8_t a[16], b[16], v[32];
    std::memcpy(a, src + (size_t)i * f.bytes + f.qs_at, 16);
    std::memcpy(b, src + (size_t)(i + 1) * f.bytes + f.qs_at, 16);
    for (int j = 0; j < 16; ++j) {
      v[j] = (uint8_t)((a[j] & 15) | (b[j] << 4));
      v[16 + j] = (uint8_t)((a[j] >> 4) | (b[j] & 0xF0));
    }
    std::memcpy(qs + 16 * i, v, 32);
  }
  for (int i = 0; i < n; ++i) {
    const uint8_t* b = src + (size_t)i * f.bytes;
    std::memcpy(out + 2 * i, b, 2);  // d is every type's first field
    if (min) std::memcpy(out + 2 * n + 2 * i, b + f.m_at, 2);
    if (!hi) continue;
    for (int c = 0; c < 4; ++c) {  // weights 8c .. 8c + 7
      const uint64_t bits = spread[b[f.qh_at + c]] << (n == 8 ? i : i + 4 * (c >> 1));
      uint8_t* at = qh + (n == 8 ? 8 * c : 8 * (c & 1));
      uint64_t cur;
      std::memcpy(&cur, at, 8);
      cur |= bits;
      std::memcpy(at, &cur, 8);
    }
  }
}

// a Q4_K super-block -> Q4_Kx (quant_formats.h): the scales as ggml's get_scale_min_k4 unpacks them
void repack_q4_k(const block_q4_K& b, block_q4_kx& out) {
  out.d = f16_to_f32(b.d);
  out.mdmin = -f16_to_f32(b.dmin);
  uint8_t sc[16];
  scales_k4(b.scales, sc);
  std::memcpy(out.sc, sc, 8);
  std::memcpy(out.mn, sc + 8, 8);
  std::memcpy(out.qs, b.qs, sizeof(out.qs));
}

}  // namespace

int repacked_type(int type_id, int row_len) {
  if (row_len <= 0) return -1;
  if ((QType)type_id == QType::Q4_K) return row_len % QK_K == 0 ? (int)QType::Q4_KX : -1;
  // X8 layouts hold spans of 8 blocks and one last span of 4: rows of a whole number of 4 blocks
  BlockFormat f;
  if (block_format(type_id, f) && row_len % (4 * QK) == 0) return (int)f.x8;
  return -1;
}

void repack_rows(int type_id, const uint8_t* src, size_t src_stride, int rows, int row_len, uint8_t* dst) {
  const int to = repacked_type(type_id, row_len);
  if (to < 0)
    throw std::invalid_argument("repack: no internal layout for type id " + std::to_string(type_id) +
                                " with rows of " + std::to_string(row_len) + " weights");
  const size_t row_bytes = row_bytes_of(*type_info(to), row_len);
  if ((QType)to == QType::Q4_KX) {
    for (int r = 0; r < rows; ++r) {
      const block_q4_K* b = (const block_q4_K*)(src + (size_t)r * src_stride);
      block_q4_kx* out = (block_q4_kx*)(dst + (size_t)r * row_bytes);
      for (int i = 0; i < row_len / QK_K; ++i) repack_q4_k(b[i], out[i]);
    }
    return;
  }
  BlockFormat f;
  block_format(type_id, f);
  const int nb = row_len / QK;
  for (int r = 0; r < rows; ++r) {
    const uint8_t* b = src + (size_t)r * src_stride;
    uint8_t* out = dst + (size_t)r * row_bytes;
    for (int s0 = 0; s0 < nb; s0 += X8_SPAN) {
      const int n = nb - s0 >= X8_SPAN ? X8_SPAN : nb - s0;  // 8, or the last 4
      repack_span(f, b + (size_t)s0 * f.bytes, n, out + (size_t)s0 * f.bytes);
    }
  }
}

// half the memory the OS says is available now (MemAvailable: free and reclaimable), or a quarter of the physical
// memory where that cannot be read
static size_t repack_budget() {
#if defined(__linux__)
  std::ifstream meminfo("/proc/meminfo");
  std::string line, key;
  while (std::getline(meminfo, line)) {  // "MemAvailable:   23989364 kB"
    std::istringstream in(line);
    size_t kib = 0;
    if (in >> key >> kib && key == "MemAvailable:") return kib * 1024 / 2;
  }
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  if (pages > 0 && page > 0) return (size_t)pages * (size_t)page / 4;
#endif
  return 0;
}

RepackedWeights::RepackedWeights() : budget_(repack_budget()) {}

WeightView RepackedWeights::view(const KernelTable& kt, const WeightView& w, ThreadPool* pool) {
  if (!w.present() || w.type < 0 || w.type >= N_TYPE_IDS || !kt.repack[w.type]) return w;
  const int to = repacked_type(w.type, w.row_len);
  if (to < 0) return w;
  const size_t row_bytes = row_bytes_of(*type_info(to), w.row_len), bytes = row_bytes * w.rows;
  if (bytes_ + bytes > budget_) return w;  // past the budget: the file's layout, paged from the map
  uint8_t* p = (uint8_t*)std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  if (!p) throw std::bad_alloc();
  bufs_.emplace_back(p);
  bytes_ += bytes;
  const int parts = pool ? std::min(w.rows, 4 * pool->size()) : 1;
  auto part = [&](int i, int) {
    const int r0 = (int)((int64_t)w.rows * i / parts), r1 = (int)((int64_t)w.rows * (i + 1) / parts);
    repack_rows(w.type, w.data + (size_t)r0 * w.row_bytes, w.row_bytes, r1 - r0, w.row_len, p + (size_t)r0 * row_bytes);
  };
  if (pool && parts > 1) pool->run(parts, part);
  else part(0, 0);
  release_file_pages(w.data, (size_t)w.rows * w.row_bytes);
  WeightView v = w;
  v.data = p;
  v.type = to;
  v.row_bytes = row_bytes;
  return v;
}

// Drops the process's mapping of the whole pages of [p, p + n) where they lie in a file-backed map: the file's pages
// stay in the page cache. Never on anonymous memory (a caller's arrays), where DONTNEED would zero them.
void RepackedWeights::release_file_pages(const uint8_t* p, size_t n) {
#if defined(__linux__)
  if (!maps_read_) {
    maps_read_ = true;
    std::ifstream maps("/proc/self/maps");
    std::string line;
    while (std::getline(maps, line)) {  // start-end perms offset dev inode [path]
      std::istringstream in(line);
      std::string range, perms, offset, dev;
      unsigned long inode = 0;
      if (!(in >> range >> perms >> offset >> dev >> inode) || inode == 0) continue;
      const size_t dash = range.find('-');
      if (dash == std::string::npos) continue;
      file_maps_.push_back({std::stoul(range.substr(0, dash), nullptr, 16), std::stoul(range.substr(dash + 1), nullptr, 16)});
    }
  }
  const uintptr_t a = (uintptr_t)p, b = a + n;
  const bool mapped = std::any_of(file_maps_.begin(), file_maps_.end(),
                                  [&](const std::pair<uintptr_t, uintptr_t>& m) { return m.first <= a && b <= m.second; });
  if (!mapped) return;
  const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
  const uintptr_t lo = (a + page - 1) / page * page, hi = b / page * page;  // whole pages only: neighbours stay
  if (hi > lo) madvise((void*)lo, hi - lo, MADV_DONTNEED);
#else
  (void)p;
  (void)n;
#endif
}

}  // namespace lll
