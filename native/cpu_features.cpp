// CPU feature detection and the choice of kernel table by name (cpu_features.h).
#include "cpu_features.h"

#include <stdexcept>

namespace lll {

std::vector<std::string> known_paths() { return {"scalar", "avx2", "avx512s8", "avx512"}; }

std::vector<std::string> available_paths() {
  std::vector<std::string> v{"scalar"};
#if defined(LLL_X86)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c"))
    v.push_back("avx2");
#if defined(LLL_EMULATED_AVX512)
  // a test build (CMakeLists.txt): the AVX-512 kernels over SIMDe, which need only AVX2
  const bool avx512 = v.back() == "avx2";
#else
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
#endif
  if (avx512) {
    v.push_back("avx512s8");
    v.push_back("avx512");
  }
#endif
  return v;
}

const KernelTable* kernels_for(const std::string& name) {
  const auto paths = available_paths();
  const std::string want = name.empty() ? paths.back() : name;
  bool ok = false;
  for (const auto& p : paths) ok |= p == want;
  if (!ok) {
    std::string list;
    for (const auto& p : paths) list += (list.empty() ? "" : ", ") + p;
    bool known = false;
    for (const auto& p : known_paths()) known |= p == want;
    if (!known) {
      std::string all;
      for (const auto& p : known_paths()) all += (all.empty() ? "" : ", ") + p;
      throw std::invalid_argument("unknown CPU path '" + want + "' (expected one of " + all + ")");
    }
    throw std::invalid_argument("CPU path '" + want + "' is not supported on this machine (available: " + list + ")");
  }
#if defined(LLL_X86)
  if (want == "avx512") return kernels_avx512();
  if (want == "avx512s8") return kernels_avx512s8();
  if (want == "avx2") return kernels_avx2();
#endif
  return kernels_scalar();
}

}  // namespace lll
