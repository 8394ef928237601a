// The process's worker threads behind every ThreadPool handle (thread_pool.h).
#include "thread_pool.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

namespace lll {

namespace {

// a spin-wait hint: lets the sibling hyper-thread run and saves power while a worker waits for work
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Worker w (1..) serves a run when w < the run's thread count. The run's generation and thread count travel in
// one atomic word (generation << 16 | threads), so a worker never pairs one run's generation with another's count.
class Workers {
 public:
  static Workers& get() {
    static Workers* w = new Workers;  // never destroyed: its threads may be waited on until the process exits
    return *w;
  }

  void grow(int n_threads) {
    std::lock_guard<std::mutex> run_lk(run_mu_);  // no run in progress while threads are added
    std::lock_guard<std::mutex> lk(mu_);
    while ((int)threads_.size() + 1 < n_threads) {
      const int id = (int)threads_.size() + 1;
      try {
        threads_.emplace_back(&Workers::worker, this, id, state_.load(std::memory_order_relaxed) >> 16);
      } catch (const std::system_error& e) {
        // the threads started so far stay (they sleep until a run needs them); this pool is not made
        throw std::runtime_error("cannot start " + std::to_string(n_threads) + " threads (the system refused thread " +
                                 std::to_string(id + 1) + ": " + e.what() + ")");
      }
    }
  }

  void run(int n_tasks, const std::function<void(int, int)>& fn, int n_threads) {
    std::lock_guard<std::mutex> run_lk(run_mu_);
    bool wake_idle;
    {
      std::lock_guard<std::mutex> lk(mu_);
      fn_ = &fn;
      n_tasks_ = n_tasks;
      next_.store(0, std::memory_order_relaxed);
      busy_.store(n_threads - 1, std::memory_order_relaxed);
      const uint64_t gen = (state_.load(std::memory_order_relaxed) >> 16) + 1;
      state_.store(gen << 16 | (uint64_t)n_threads, std::memory_order_release);
      // a worker sleeping in idle_cv_ sat out the last run it saw and every run since: last_threads_ <= its id
      wake_idle = n_threads > last_threads_;
      last_threads_ = n_threads;
    }
    cv_.notify_all();
    if (wake_idle) idle_cv_.notify_all();
    drain(0);
    // the others finish within microseconds of this thread: spin with pause first, yield (a syscall) only
    // if that takes long (an over-subscribed machine)
    for (unsigned spins = 0; busy_.load(std::memory_order_acquire) != 0; ++spins) {
      if (spins < 4096) cpu_relax();
      else std::this_thread::yield();
    }
  }

 private:
  void drain(int id) {
    for (;;) {
      const int t = next_.fetch_add(1, std::memory_order_relaxed);
      if (t >= n_tasks_) break;
      (*fn_)(t, id);
    }
  }

  void worker(int id, uint64_t seen) {
    bool sat_out = true;  // a new worker sleeps until a run needs it
    for (;;) {
      uint64_t s;
      if (sat_out) {
        std::unique_lock<std::mutex> lk(mu_);
        idle_cv_.wait(lk, [&] {
          s = state_.load(std::memory_order_acquire);
          return s >> 16 != seen && (int)(s & 0xffff) > id;
        });
      } else {
        // spin briefly (decode issues hundreds of small products per token), then sleep
        auto t0 = std::chrono::steady_clock::now();
        for (unsigned spins = 1; (s = state_.load(std::memory_order_acquire)) >> 16 == seen; ++spins) {
          cpu_relax();
          if (spins % 256 == 0 && std::chrono::steady_clock::now() - t0 > std::chrono::microseconds(200)) {
            std::unique_lock<std::mutex> lk(mu_);
            cv_.wait(lk, [&] { return (s = state_.load(std::memory_order_acquire)) >> 16 != seen; });
            break;
          }
        }
      }
      seen = s >> 16;
      sat_out = (int)(s & 0xffff) <= id;
      if (sat_out) continue;
      drain(id);
      busy_.fetch_sub(1, std::memory_order_acq_rel);
    }
  }

  std::mutex run_mu_;                // one run at a time in the process
  std::mutex mu_;                    // publishes a run; guards the sleeps
  std::condition_variable cv_;       // a new run (workers that served the last one sleep here)
  std::condition_variable idle_cv_;  // a run that needs a worker which sat out the runs before it
  std::vector<std::thread> threads_;
  const std::function<void(int, int)>* fn_ = nullptr;
  int n_tasks_ = 0;
  int last_threads_ = 1;
  std::atomic<int> next_{0};
  std::atomic<int> busy_{0};
  std::atomic<uint64_t> state_{1};  // generation << 16 | the run's thread count
};

}  // namespace

ThreadPool::ThreadPool(int n_threads) : n_threads_(n_threads < 1 ? 1 : n_threads) {
  if (n_threads_ > 1) Workers::get().grow(n_threads_);
}

void ThreadPool::run(int n_tasks, const std::function<void(int, int)>& fn) const {
  if (n_tasks <= 0) return;
  if (n_threads_ == 1 || n_tasks == 1) {
    for (int t = 0; t < n_tasks; ++t) fn(t, 0);
    return;
  }
  Workers::get().run(n_tasks, fn, n_threads_);
}

}  // namespace lll
