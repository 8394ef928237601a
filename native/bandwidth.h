// Streaming read bandwidth: the decode roofline. Sums a buffer with every pool thread.
#pragma once
#include <cstddef>
#include <cstdint>

#include "thread_pool.h"

namespace lll {
// reads all n bytes once (threads split the buffer); returns a checksum so the reads are not elided
uint64_t stream_read(const uint8_t* p, size_t n, ThreadPool& pool);
}  // namespace lll
