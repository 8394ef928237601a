// emulated_products.h: the device source under LLL_CUDA_EMULATED (native/cuda/emulated.cuh), launched as qgemv.cu
// launches it.
#define LLL_CUDA_EMULATED 1
#include "emulated_products.h"

#include <stdexcept>
#include <string>
#include <vector>

#include "cuda/mmq_kernel.cuh"
#include "cuda/qgemv_kernel.cuh"
#include "warp_emulator.h"

namespace lll {

void emulated_int8_product(int type_id, const uint8_t* w, size_t row_bytes, int m, int k, const float* x, int n,
                           float* y, const float* bias, bool add_to_y, bool mmq) {
  using namespace cuda;
  switch ((QType)type_id) {
    case QType::Q4_0: case QType::Q4_1: case QType::Q5_0: case QType::Q8_0: case QType::Q4_K: case QType::Q6_K:
      break;
    default:
      throw std::invalid_argument("emulated int8 product: type " + std::to_string(type_id) + " is not one the device's int8 products take");
  }
  if (m < 1 || n < 1 || k < 32 || k % 32) throw std::invalid_argument("emulated int8 product: bad shape");
  std::vector<int8_t> xq((size_t)n * k);
  std::vector<float> xd((size_t)n * (k / 32));
  emu::launch({(unsigned)n, (unsigned)(k / 32), 1}, {32, 1, 1},
              [&] { quantize_x_kernel(x, k, xq.data(), xd.data()); });
  const QuantX xs{xq.data(), xd.data(), k};
  const QgemvMat M{type_id, w, row_bytes, m, y, bias, add_to_y};
  if (mmq) {
    const emu::Dim3 grid{(unsigned)((m + MMQ_ROWS - 1) / MMQ_ROWS), (unsigned)((n + MMQ_COLS - 1) / MMQ_COLS), 1};
    emu::launch(grid, {MMQ_THREADS, 1, 1}, [&] {
      switch ((QType)type_id) {
        case QType::Q4_0: mmq_kernel<(int)QType::Q4_0>(M, xs, n); break;
        case QType::Q4_1: mmq_kernel<(int)QType::Q4_1>(M, xs, n); break;
        case QType::Q5_0: mmq_kernel<(int)QType::Q5_0>(M, xs, n); break;
        case QType::Q8_0: mmq_kernel<(int)QType::Q8_0>(M, xs, n); break;
        case QType::Q4_K: mmq_kernel<(int)QType::Q4_K>(M, xs, n); break;
        default: mmq_kernel<(int)QType::Q6_K>(M, xs, n); break;
      }
    });
    return;
  }
  QgemvMats ms{};
  ms.count = 1;
  ms.m[0] = M;
  ms.end[0] = (m + QGEMV_WARPS - 1) / QGEMV_WARPS;
  const int nc = n > QGEMV_MAX_N ? QGEMV_WIDE_N : QGEMV_MAX_N;
  const emu::Dim3 grid{(unsigned)ms.end[0], (unsigned)((n + nc - 1) / nc), 1};
  emu::launch(grid, {32, QGEMV_WARPS, 1}, [&] {
    if (nc == QGEMV_WIDE_N) qgemv_kernel<QGEMV_WIDE_N>(ms, xs, n);
    else qgemv_kernel<QGEMV_MAX_N>(ms, xs, n);
  });
}

}  // namespace lll
