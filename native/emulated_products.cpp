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

namespace {

void check_shape(int type_id, int m, int k, int n) {
  switch ((QType)type_id) {
    case QType::Q4_0: case QType::Q4_1: case QType::Q5_0: case QType::Q8_0:
    case QType::Q4_K: case QType::Q6_K:
      break;
    default:
      throw std::invalid_argument("emulated int8 product: type " + std::to_string(type_id) + " is not one the device's int8 products take");
  }
  if (m < 1 || n < 1 || k < 32 || k % 32) throw std::invalid_argument("emulated int8 product: bad shape");
}

struct Quantized {
  std::vector<int8_t> q;
  std::vector<float> d;
};

Quantized quantize(const float* x, int n, int k) {
  Quantized out{std::vector<int8_t>((size_t)n * k), std::vector<float>((size_t)n * (k / 32))};
  emu::launch({(unsigned)n, (unsigned)(k / 32), 1}, {32, 1, 1},
              [&] { cuda::quantize_x_kernel(x, k, out.q.data(), out.d.data()); });
  return out;
}

struct Mats {
  const cuda::QgemvMat* m;
  unsigned count;
};

// the decode kernel over these matrices, launched as qgemv_multi launches it
void run_qgemv(Mats mats, const cuda::QuantX& xs, int n, const cuda::QgemvThen& then, bool own_sums = false) {
  using namespace cuda;
  QgemvMats ms{};
  ms.count = (int)mats.count;
  int blocks = 0;
  for (unsigned i = 0; i < mats.count; ++i) {
    ms.m[i] = mats.m[i];
    blocks += (mats.m[i].m + QGEMV_WARPS - 1) / QGEMV_WARPS;
    ms.end[i] = blocks;
  }
  const int nc = qgemv_row_group(n);
  const emu::Dim3 grid{(unsigned)blocks, (unsigned)((n + nc - 1) / nc), 1};
  const auto kernel =
      nc == QGEMV_WIDE_N ? qgemv_kernel_for<QGEMV_WIDE_N>(!own_sums) : qgemv_kernel_for<QGEMV_MAX_N>(!own_sums);
  emu::launch(grid, {32, QGEMV_WARPS, 1}, [&] { kernel(ms, xs, n, then); });
}

}  // namespace

void emulated_int8_product(int type_id, const uint8_t* w, size_t row_bytes, int m, int k, const float* x, int n,
                           float* y, const float* bias, bool add_to_y, bool mmq, bool own_sums) {
  using namespace cuda;
  check_shape(type_id, m, k, n);
  const Quantized q = quantize(x, n, k);
  const QuantX xs{q.q.data(), q.d.data(), k};
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
  run_qgemv({&M, 1}, xs, n, QgemvThen{}, own_sums);
}

void emulated_int8_then(int type_id, const uint8_t* w, const uint8_t* w2, size_t row_bytes, int m, int k,
                        const float* x, int n, float* y, float* y2, bool silu, const float* norm_w, float eps,
                        float* out, int8_t* xq_out, float* xd_out) {
  using namespace cuda;
  check_shape(type_id, m, k, n);
  if (m % 32) throw std::invalid_argument("emulated int8 product: a follow-up needs m a multiple of 32");
  const Quantized q = quantize(x, n, k);
  const QuantX xs{q.q.data(), q.d.data(), k};
  std::vector<int> counters(qgemv_then_counters(m, n), 0);
  QgemvThen then;
  then.silu = silu;
  then.w = norm_w;
  then.eps = eps;
  then.out = out;
  then.xq = xq_out;
  then.xd = xd_out;
  then.counters = counters.data();
  QgemvMat mats[2] = {{type_id, w, row_bytes, m, y, nullptr, !w2}, {type_id, w2, row_bytes, m, y2, nullptr, false}};
  then.kind = w2 ? QgemvThen::ACT_MUL : QgemvThen::RMS_NORM;
  run_qgemv({mats, w2 ? 2u : 1u}, xs, n, then);
  for (size_t i = 0; i < counters.size(); ++i)
    if (counters[i]) throw std::logic_error("emulated qgemv follow-up: counter " + std::to_string(i) + " left at " + std::to_string(counters[i]));
}

int emulated_barrier_case(const char* name) {
  const std::string c = name;
  static int cell[64];
  int total = 0;
  auto run = [&](auto body) { emu::launch({1, 1, 1}, {64, 1, 1}, body); };
  if (c == "aligned") {
    run([&] {
      const int t = (int)emu::thread_idx().x;
      cell[t] = t;
      for (int round = 0; round < 2; ++round) {
        __syncthreads();
        const int other = cell[63 - t];
        __syncthreads();
        cell[t] = other + 1;
      }
      __syncthreads();
      if (t == 0)
        for (int i = 0; i < 64; ++i) total += cell[i];
    });
  } else if (c == "early-exit") {
    run([&] {
      const int t = (int)emu::thread_idx().x;
      if (t >= 32) return;
      cell[t] = 1;
      __syncthreads();
      if (t == 0)
        for (int i = 0; i < 32; ++i) total += cell[i];
    });
  } else if (c == "divergent") {
    run([&] {
      if (emu::thread_idx().x < 32) {
        __syncthreads();
      } else {
        __syncthreads();
      }
    });
  } else if (c == "deadlock") {
    run([&] {
      if (emu::thread_idx().x >= 48) __syncwarp();  // half of warp 1 waits for the half that never comes
      __syncthreads();
    });
  } else if (c == "exit-in-collective") {
    run([&] {
      if (emu::lane() >= 16) return;
      (void)__shfl_xor_sync(0xFFFFFFFFu, 1, 1);
    });
  } else if (c == "racy") {
    for (int& v : cell) v = -1;
    run([&] {  // reads a neighbour's cell with no barrier between its write and the read
      const int t = (int)emu::thread_idx().x;
      cell[t] = t;
      total += cell[(t + 1) % 64];
    });
  } else {
    throw std::invalid_argument("emulated barrier case: unknown case '" + c + "'");
  }
  return total;
}

}  // namespace lll
