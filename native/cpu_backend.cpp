#include "backend.h"
#include "matmul.h"

namespace lll {

CpuBackend::CpuBackend(const KernelTable* kt, int n_threads) : kt_(kt), pool_(new ThreadPool(n_threads)) {}

std::string CpuBackend::name() const { return std::string("cpu-") + kt_->name; }

void CpuBackend::matmul(int type_id, const uint8_t* w, size_t row_bytes, int m, int k, const float* x, int n,
                        float* y) {
  lll::matmul(*kt_, type_id, w, row_bytes, m, k, x, n, y, *pool_);
}

void CpuBackend::matmul_multi(const MatmulJob* jobs, int n_jobs, int k, const float* x, int n) {
  lll::matmul_multi(*kt_, jobs, n_jobs, k, x, n, *pool_);
}

void CpuBackend::dequantize(int type_id, const uint8_t* w, size_t row_bytes, int rows, int k, float* out) {
  lll::dequantize(*kt_, type_id, w, row_bytes, rows, k, out);
}

}  // namespace lll
