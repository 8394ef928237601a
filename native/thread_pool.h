// The thread pool: one set of worker threads per process, shared by every model and the kernel entry points.
// A ThreadPool is a cheap handle with its own thread count n: run() splits n_tasks over the calling thread and
// the process's first n - 1 workers by an atomic counter and returns when every task is done. Workers are
// created once (the first handle that needs them) and spin briefly, then sleep, between runs; a worker that a
// run does not need sleeps until one does. Runs from different handles (threads) take turns, one at a time.
#pragma once
#include <functional>

namespace lll {

class ThreadPool {
 public:
  // n_threads >= 1 (less counts as 1); grows the process's workers to n_threads - 1 where there are fewer
  explicit ThreadPool(int n_threads);

  int size() const { return n_threads_; }
  // fn(task, thread) for task in [0, n_tasks); thread in [0, size()). Not reentrant (fn must not call run).
  void run(int n_tasks, const std::function<void(int, int)>& fn) const;

 private:
  int n_threads_;
};

}  // namespace lll
