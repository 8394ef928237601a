// Streaming read bandwidth over a buffer with every pool thread (bandwidth.h).
#include "bandwidth.h"

#include <algorithm>
#include <cstring>
#include <vector>

namespace lll {

namespace {

// the 64-byte chunks [i0, i1) of p summed as 8 uint64 words into a
inline void sum_chunks(const uint8_t* p, size_t i0, size_t i1, uint64_t a[8]) {
  for (size_t i = i0; i < i1; i += 64) {
    uint64_t v[8];
    std::memcpy(v, p + i, 64);
    for (int j = 0; j < 8; ++j) a[j] += v[j];
  }
}

}  // namespace

uint64_t stream_read(const uint8_t* p, size_t n, ThreadPool& pool, int streams) {
  const int nt = pool.size();
  const int S = std::max(1, std::min(streams, 16));
  std::vector<uint64_t> sums(nt * 8, 0);
  const size_t per = (n / nt) & ~(size_t)63;  // whole chunks per thread; the last thread takes the rest
  pool.run(nt, [&](int t, int) {
    const size_t b = t * per, e = t == nt - 1 ? n : b + per;
    const size_t e64 = b + ((e - b) & ~(size_t)63);
    uint64_t a[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    size_t done = b;
    if (S > 1) {
      // S interleaved streams, each prefetched 1 KiB ahead: more misses in flight than one stream and the
      // hardware prefetcher keep (a server core with a long memory latency reads about 1.5x as fast this way)
      const size_t part = ((e64 - b) / S) & ~(size_t)63;
      for (size_t i = 0; i < part; i += 64)
        for (int s = 0; s < S; ++s) {
          const uint8_t* q = p + b + s * part + i;
          __builtin_prefetch(q + (i + 1024 < part ? 1024 : 0), 0, 3);  // never past the stream's end
          uint64_t v[8];
          std::memcpy(v, q, 64);
          for (int j = 0; j < 8; ++j) a[j] += v[j];
        }
      done = b + S * part;
    }
    sum_chunks(p, done, e64, a);
    for (size_t i = e64; i < e; ++i) a[0] += p[i];
    for (int j = 0; j < 8; ++j) sums[t * 8 + j] = a[j];
  });
  uint64_t s = 0;
  for (uint64_t v : sums) s += v;
  return s;
}

}  // namespace lll
