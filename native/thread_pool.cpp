#include "thread_pool.h"

#include <chrono>

namespace lll {

// a spin-wait hint: lets the sibling hyper-thread run and saves power while a worker waits for work
static inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

ThreadPool::ThreadPool(int n_threads) : n_threads_(n_threads < 1 ? 1 : n_threads) {
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back(&ThreadPool::worker, this, i);
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
    generation_.fetch_add(1);
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::drain(int id) {
  for (;;) {
    const int t = next_.fetch_add(1, std::memory_order_relaxed);
    if (t >= n_tasks_) break;
    (*fn_)(t, id);
  }
}

void ThreadPool::worker(int id) {
  uint64_t seen = 0;
  for (;;) {
    // spin briefly (decode issues hundreds of small products per token), then sleep
    auto t0 = std::chrono::steady_clock::now();
    for (unsigned spins = 1; generation_.load(std::memory_order_acquire) == seen; ++spins) {
      cpu_relax();
      if (spins % 256 == 0 && std::chrono::steady_clock::now() - t0 > std::chrono::microseconds(200)) {
        std::unique_lock<std::mutex> lk(mu_);
        cv_.wait(lk, [&] { return generation_.load(std::memory_order_acquire) != seen; });
        break;
      }
    }
    seen = generation_.load(std::memory_order_acquire);
    if (stop_) return;
    drain(id);
    busy_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::run(int n_tasks, const std::function<void(int, int)>& fn) {
  if (n_tasks <= 0) return;
  if (n_threads_ == 1 || n_tasks == 1) {
    for (int t = 0; t < n_tasks; ++t) fn(t, 0);
    return;
  }
  {
    std::lock_guard<std::mutex> lk(mu_);
    fn_ = &fn;
    n_tasks_ = n_tasks;
    next_.store(0, std::memory_order_relaxed);
    busy_.store(n_threads_ - 1, std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_release);
  }
  cv_.notify_all();
  drain(0);
  // the others finish within microseconds of this thread: spin with pause first, yield (a syscall) only
  // if that takes long (an over-subscribed machine)
  for (unsigned spins = 0; busy_.load(std::memory_order_acquire) != 0; ++spins) {
    if (spins < 4096) cpu_relax();
    else std::this_thread::yield();
  }
}

}  // namespace lll
