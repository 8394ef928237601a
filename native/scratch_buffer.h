// A step's activation scratch, kept from one forward call to the next so a decode step allocates and
// page-faults nothing. On Linux a buffer of 2 MiB or more is 2 MiB aligned and advised as huge pages
// (MADV_HUGEPAGE): a prompt step writes each weight tile's results into hundreds of activation rows,
// one 4 KiB page each with small pages. Contents are undefined after floats(); callers write before reading.
#pragma once
#include <cstddef>
#include <cstdlib>
#include <new>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace lll {

class ScratchBuffer {
 public:
  ScratchBuffer() = default;
  ScratchBuffer(const ScratchBuffer&) = delete;
  ScratchBuffer& operator=(const ScratchBuffer&) = delete;
  ~ScratchBuffer() { release(); }

  // at least n floats; a larger n reallocates (earlier pointers become invalid)
  float* floats(size_t n) {
    const size_t bytes = n * sizeof(float);
    if (bytes <= bytes_) return (float*)p_;
    release();
#if defined(__linux__)
    constexpr size_t HUGE = size_t(2) << 20;
    const size_t size = (bytes + HUGE - 1) / HUGE * HUGE;
    void* p = mmap(nullptr, size + HUGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    // keep a 2 MiB aligned window of `size` bytes, unmap the rest
    const size_t lead = (HUGE - (size_t)p % HUGE) % HUGE;
    if (lead) munmap(p, lead);
    if (HUGE - lead) munmap((char*)p + lead + size, HUGE - lead);
    p_ = (char*)p + lead;
    madvise(p_, size, MADV_HUGEPAGE);  // advice only: without THP it stays small pages
    bytes_ = size;
#else
    p_ = std::malloc(bytes);
    if (!p_) throw std::bad_alloc();
    bytes_ = bytes;
#endif
    return (float*)p_;
  }

  // gives the memory back (after a long prompt step, so that it is not held while decoding)
  void release() {
    if (!p_) return;
#if defined(__linux__)
    munmap(p_, bytes_);
#else
    std::free(p_);
#endif
    p_ = nullptr;
    bytes_ = 0;
  }

  size_t bytes() const { return bytes_; }

 private:
  void* p_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace lll
