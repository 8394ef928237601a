// The scalar reference path: the generic kernels built without vectorisation (CMake adds
// -fno-tree-vectorize for this file). Every SIMD path is tested against it.
#define LLL_NS scalar
#include "kernels_generic.inc"

namespace lll {
const KernelTable* kernels_scalar() {
  static KernelTable t = [] {
    KernelTable k{};
    scalar::fill_generic(k);
    k.name = "scalar";
    return k;
  }();
  return &t;
}
}  // namespace lll
