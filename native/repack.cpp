// Load-time regrouping of weight rows (repack.h).
#include "repack.h"

#include <algorithm>
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

#include "quant_formats.h"
#include "thread_pool.h"

namespace lll {

int repacked_type(int type_id, int row_len) {
  // Q5_0X8 holds spans of 8 blocks and one last span of 4: rows of a whole number of 4 blocks
  if (type_id == (int)QType::Q5_0 && row_len > 0 && row_len % (4 * QK) == 0) return (int)QType::Q5_0X8;
  return -1;
}

// one span of n (8 or 4) Q5_0 blocks -> the Q5_0X8 span (quant_formats.h), n * 22 bytes
static void repack_q5_0_span(const block_q5_0* b, int n, uint8_t* out) {
  uint8_t* d = out;
  uint8_t* qs = out + 2 * n;
  uint8_t* qh = qs + 16 * n;
  std::memset(qs, 0, 16 * n);
  std::memset(qh, 0, n == 8 ? 32 : 16);
  for (int i = 0; i < n; ++i) {
    std::memcpy(d + 2 * i, &b[i].d, 2);
    uint32_t h;
    std::memcpy(&h, b[i].qh, 4);
    for (int j = 0; j < QK; ++j) {
      const int q4 = j < 16 ? b[i].qs[j] & 15 : b[i].qs[j - 16] >> 4;
      qs[32 * (i / 2) + j] |= (uint8_t)(q4 << (4 * (i & 1)));
      const int bit = (h >> j) & 1;
      if (n == 8) qh[j] |= (uint8_t)(bit << i);
      else qh[j & 15] |= (uint8_t)(bit << (i + 4 * (j >> 4)));
    }
  }
}

void repack_rows(int type_id, const uint8_t* src, size_t src_stride, int rows, int row_len, uint8_t* dst) {
  if (repacked_type(type_id, row_len) != (int)QType::Q5_0X8)
    throw std::invalid_argument("repack: no internal layout for type id " + std::to_string(type_id) +
                                " with rows of " + std::to_string(row_len) + " weights");
  const int nb = row_len / QK;
  const size_t row_bytes = (size_t)nb * sizeof(block_q5_0);
  for (int r = 0; r < rows; ++r) {
    const block_q5_0* b = (const block_q5_0*)(src + (size_t)r * src_stride);
    uint8_t* out = dst + (size_t)r * row_bytes;
    for (int s0 = 0; s0 < nb; s0 += Q5_0X8_SPAN) {
      const int n = nb - s0 >= Q5_0X8_SPAN ? Q5_0X8_SPAN : nb - s0;  // 8, or the last 4
      repack_q5_0_span(b + s0, n, out + (size_t)s0 * sizeof(block_q5_0));
    }
  }
}

WeightView RepackedWeights::view(const KernelTable& kt, const WeightView& w, ThreadPool* pool) {
  if (!w.present() || w.type < 0 || w.type >= N_TYPE_IDS || !kt.repack[w.type]) return w;
  const int to = repacked_type(w.type, w.row_len);
  if (to < 0) return w;
  const size_t row_bytes = (size_t)(w.row_len / QK) * sizeof(block_q5_0), bytes = row_bytes * w.rows;
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
