// The compute backend seam: the CPU implements it today; a CUDA backend (native/cuda/*.cu, built when
// nvcc is found and LOCALLLM_CUDA is ON) implements the same interface.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "kernels.h"
#include "matmul.h"
#include "thread_pool.h"

namespace lll {

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  // y: [n][m] = W [m][k] (type_id rows, row_bytes apart) times x: [n][k]
  virtual void matmul(int type_id, const uint8_t* w, size_t row_bytes, int m, int k, const float* x, int n,
                      float* y) = 0;
  // y_j = W_j x for products sharing x: [n][k] (one activation quantization, one dispatch at small n)
  virtual void matmul_multi(const MatmulJob* jobs, int n_jobs, int k, const float* x, int n) = 0;
  // out: [rows][k]
  virtual void dequantize(int type_id, const uint8_t* w, size_t row_bytes, int rows, int k, float* out) = 0;
};

class CpuBackend final : public Backend {
 public:
  CpuBackend(const KernelTable* kt, int n_threads);
  std::string name() const override;
  void matmul(int type_id, const uint8_t* w, size_t row_bytes, int m, int k, const float* x, int n,
              float* y) override;
  void matmul_multi(const MatmulJob* jobs, int n_jobs, int k, const float* x, int n) override;
  void dequantize(int type_id, const uint8_t* w, size_t row_bytes, int rows, int k, float* out) override;

  const KernelTable& kernels() const { return *kt_; }
  ThreadPool& pool() { return *pool_; }
  int threads() const { return pool_->size(); }

 private:
  const KernelTable* kt_;
  std::unique_ptr<ThreadPool> pool_;
};

}  // namespace lll
