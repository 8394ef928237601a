// Run-time CPU feature detection and the choice of kernel path (LOCALLLM_CPU=scalar|avx2|avx512s8|avx512).
#pragma once
#include <string>
#include <vector>

#include "kernels.h"

namespace lll {

std::vector<std::string> known_paths();      // every path any build names, in available_paths' order
std::vector<std::string> available_paths();  // those this CPU and this build can run, best last
// the path for a name ("" = best available); throws std::invalid_argument naming the problem
const KernelTable* kernels_for(const std::string& name);

}  // namespace lll
