// Weights regrouped at load for the kernels of one CPU path: a GGML type whose blocks a path decodes slowly as they
// lie in the file is copied once into an internal layout (quant_formats.h: the X8 layouts, of the same bytes per row;
// Q4_Kx, 152 bytes per 144 of Q4_K), which that path's small-N kernels decode with fewer instructions. The products
// give the same bits either way (the weights, scales and groups are unchanged), so a repacked matrix keeps the
// batch-invariance contract of kernels.h.
//
// What the caller does: where kt.repack[type] and repacked_type(type, row_len) >= 0, allocate rows * row_bytes_of(the
// internal type) bytes, repack_rows into them, and point the weight's view there (type repacked_type, its row_bytes)
// (RepackedWeights does all of it). The copy costs anonymous memory for those tensors; where the rows lay in a file
// map, RepackedWeights then unmaps the pages it read from the process (madvise DONTNEED: they stay in the page cache,
// and a later read faults them back in), so the process holds those weights once, not twice.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <utility>
#include <vector>

#include "kernels.h"
#include "model_config.h"

namespace lll {

// the internal type rows of `type_id` with row_len weights repack to, or -1 where none applies
int repacked_type(int type_id, int row_len);

// rows [rows][row_len] of type_id at src (row r at src + r * src_stride, row_bytes(type_id) each) -> dst, rows of the
// internal type's row_bytes, packed (row r at dst + r * row_bytes). Throws where repacked_type(type_id, row_len) < 0.
void repack_rows(int type_id, const uint8_t* src, size_t src_stride, int rows, int row_len, uint8_t* dst);

class ThreadPool;

// Owns the repacked copies of one CPU stage's (or one measurement's) weights. The copies are anonymous memory, which
// the OS cannot page back to the file as it can the map: a stage repacks at most half the memory available when it
// is made (MemAvailable), so a model near the machine's memory keeps running from its file map, as it lies.
class RepackedWeights {
 public:
  RepackedWeights();
  // w as kt's kernels want it: a view of a repacked copy (held here) where kt.repack asks for one and the layout
  // applies, else w itself. pool (optional) spreads the copying over its threads.
  WeightView view(const KernelTable& kt, const WeightView& w, ThreadPool* pool = nullptr);
  size_t bytes() const { return bytes_; }

 private:
  struct Free {
    void operator()(uint8_t* p) const { std::free(p); }
  };
  std::vector<std::unique_ptr<uint8_t[], Free>> bufs_;
  size_t bytes_ = 0;
  size_t budget_;  // bytes it may copy
  std::vector<std::pair<uintptr_t, uintptr_t>> file_maps_;  // [start, end) of file-backed maps (read once, Linux)
  bool maps_read_ = false;
  void release_file_pages(const uint8_t* p, size_t n);
};

}  // namespace lll
