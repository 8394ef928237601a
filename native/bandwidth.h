// Streaming read bandwidth: the decode roofline. Sums a buffer with every pool thread.
#pragma once
#include <cstddef>
#include <cstdint>

#include "thread_pool.h"

namespace lll {
// reads all n bytes once (threads split the buffer; each thread reads its part as `streams` interleaved streams,
// 1 to 16); returns a checksum so the reads are not elided: the sum mod 2^64 of the buffer's little-endian
// uint64 words over its whole 64-byte chunks, plus its remaining bytes, whatever the split
uint64_t stream_read(const uint8_t* p, size_t n, ThreadPool& pool, int streams = 1);
}  // namespace lll
