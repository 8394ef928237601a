// The process's kernel context: the CPU kernel path every product uses (models take it when they are made)
// and the thread count of the kernel entry points (localllm.native). Set by configure(); the first use
// without one takes LOCALLLM_CPU (or the best path) and every hardware thread.
#pragma once
#include <string>

#include "kernels.h"
#include "thread_pool.h"

namespace lll {

struct KernelContext {
  const KernelTable* kernels;
  ThreadPool pool;  // a handle on the process's workers (thread_pool.h)
};

KernelContext kernel_context();
// path: a name of available_paths() or "" for the best; threads in [1, 1024], or 0 for every hardware thread.
// Throws std::invalid_argument naming a bad path or thread count.
void configure_kernels(const std::string& path, int threads);

}  // namespace lll
