#include "bandwidth.h"

#include <cstring>
#include <vector>

namespace lll {

uint64_t stream_read(const uint8_t* p, size_t n, ThreadPool& pool) {
  const int nt = pool.size();
  std::vector<uint64_t> sums(nt * 8, 0);
  const size_t per = (n / nt) & ~(size_t)63;
  pool.run(nt, [&](int t, int) {
    const size_t b = t * per, e = t == nt - 1 ? n : b + per;
    uint64_t a[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    size_t i = b;
    for (; i + 64 <= e; i += 64) {
      uint64_t v[8];
      std::memcpy(v, p + i, 64);
      for (int j = 0; j < 8; ++j) a[j] += v[j];
    }
    for (; i < e; ++i) a[0] += p[i];
    for (int j = 0; j < 8; ++j) sums[t * 8 + j] = a[j];
  });
  uint64_t s = 0;
  for (uint64_t v : sums) s += v;
  return s;
}

}  // namespace lll
