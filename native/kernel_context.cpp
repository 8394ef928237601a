// The process's kernel path and kernel-entry thread count (kernel_context.h).
#include "kernel_context.h"

#include <cstdlib>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "cpu_features.h"

namespace lll {

namespace {

std::mutex g_mu;
std::unique_ptr<KernelContext> g_context;

int hardware_threads() {
  const unsigned n = std::thread::hardware_concurrency();
  return n ? (int)n : 1;
}

}  // namespace

KernelContext kernel_context() {
  std::lock_guard<std::mutex> lk(g_mu);
  if (!g_context) {
    const char* env = std::getenv("LOCALLLM_CPU");
    g_context.reset(new KernelContext{kernels_for(env ? env : ""), ThreadPool(hardware_threads())});
  }
  return *g_context;
}

void configure_kernels(const std::string& path, int threads) {
  if (threads < 0 || threads > 1024) throw std::invalid_argument("threads must be between 1 and 1024");
  const KernelTable* kt = kernels_for(path);
  ThreadPool pool(threads ? threads : hardware_threads());
  std::lock_guard<std::mutex> lk(g_mu);
  g_context.reset(new KernelContext{kt, pool});
}

}  // namespace lll
