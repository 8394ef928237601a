// The int8 products' host side: quantize_x, and qgemv / qgemv_multi launching the decode kernel (qgemv_kernel.cuh)
// or, for steps of LOCALLLM_CUDA_MMQ rows or more, the tensor-core tile kernel (mmq_kernel.cuh). The two compute
// every output in the same order from the same integer sums (qstep.cuh), so the choice changes the speed, not the
// bits; tests/native/test_cuda_emulated.py runs both kernels' source on the CPU and compares them bit for bit.
#include "device_compat.cuh"

#include <cstdlib>
#include <stdexcept>
#include <string>

#include "../quant_formats.h"
#include "cuda_api.h"
#include "device_array.cuh"
#include "device_ops.cuh"
#include "mmq_kernel.cuh"
#include "qgemv_kernel.cuh"

namespace lll::cuda {
namespace {

// LOCALLLM_CUDA_MMQ: the smallest step (rows) the tile kernel takes; 0: never
int mmq_from_env() {
  static const int from = [] {
    const char* env = std::getenv("LOCALLLM_CUDA_MMQ");
    if (!env || !*env) return 128;
    char* end = nullptr;
    const long v = std::strtol(env, &end, 10);
    if (*end || v < 0) throw std::invalid_argument(std::string("LOCALLLM_CUDA_MMQ must be a row count (0: off), got ") + env);
    return (int)v;
  }();
  return from;
}

// LOCALLLM_CUDA_XSUM=0: the decode kernel's blocks of several rows find the activations' int8 sums in every warp, as
// before they were shared (qgemv_kernel.cuh, qgemv_row); the same bits, for measuring the difference on a card
bool shared_sums_from_env() {
  static const bool on = [] {
    const char* env = std::getenv("LOCALLLM_CUDA_XSUM");
    if (!env || !*env || std::string(env) == "1") return true;
    if (std::string(env) == "0") return false;
    throw std::invalid_argument(std::string("LOCALLLM_CUDA_XSUM must be 0 or 1, got ") + env);
  }();
  return on;
}

template <int T>
void launch_mmq(const QgemvMat& M, const QuantX& x, int n, cudaStream_t stream) {
  const dim3 grid((M.m + MMQ_ROWS - 1) / MMQ_ROWS, (n + MMQ_COLS - 1) / MMQ_COLS);
  LLL_LAUNCH(mmq_kernel<T>, grid, MMQ_THREADS, 0, stream)(M, x, n);
}

}  // namespace

bool qgemv_supports(int type_id) {
  switch ((QType)type_id) {
    case QType::Q4_0: case QType::Q4_1: case QType::Q5_0: case QType::Q8_0: case QType::Q4_K: case QType::Q6_K:
      return true;
    default:
      return false;
  }
}

void quantize_x(const float* x, int n, int k, int8_t* xq, float* xd, cudaStream_t stream) {
  LLL_LAUNCH(quantize_x_kernel, dim3(n, k / 32), 32, 0, stream)(x, k, xq, xd);
  check_launch("quantize_x");
}

namespace {

void check_then(const QgemvThen& then, const QgemvMat* mats, int n_mats) {
  const char* bad = nullptr;
  if (then.kind == QgemvThen::ACT_MUL && (n_mats != 2 || mats[0].m != mats[1].m))
    bad = "the gated activation follows two products of one size (gate, up)";
  else if (then.kind == QgemvThen::RMS_NORM && (n_mats != 1 || !then.w || !then.out))
    bad = "an RMSNorm follows one product, with its weights and output";
  else if (mats[0].m % 32)
    bad = "a follow-up quantizes per 32: m must be a multiple of 32";
  else if (!then.xq || !then.xd || !then.counters)
    bad = "a follow-up needs its quantized output and its counters";
  if (bad) throw std::invalid_argument(std::string("qgemv: ") + bad);
}

// the follow-up as its own kernel, after products its tail did not take
void launch_then(const QgemvThen& then, const QgemvMat* mats, int n, cudaStream_t stream) {
  const int m = mats[0].m;
  if (then.kind == QgemvThen::ACT_MUL)
    act_mul_quantize(mats[0].y, mats[1].y, (size_t)n * m, then.silu, then.xq, then.xd, stream);
  else
    rms_norm_quantize(mats[0].y, then.w, n, m, then.eps, then.out, then.xq, then.xd, stream);
}

}  // namespace

void qgemv_multi(const QgemvMat* mats, int n_mats, int k, const int8_t* xq, const float* xd, int n,
                 cudaStream_t stream, int mmq_from, const QgemvThen* then_in) {
  if (n < 1 || n > QGEMV_MAX_ROWS)
    throw std::invalid_argument("qgemv: n must be in [1, " + std::to_string(QGEMV_MAX_ROWS) + "], got " +
                                std::to_string(n));
  if (n_mats < 1 || n_mats > QGEMV_MAX_MATS)
    throw std::invalid_argument("qgemv: 1 to " + std::to_string(QGEMV_MAX_MATS) + " matrices a launch, got " +
                                std::to_string(n_mats));
  for (int i = 0; i < n_mats; ++i)
    if (!qgemv_supports(mats[i].type))
      throw std::invalid_argument("qgemv: type " + std::to_string(mats[i].type) + " is not supported on CUDA");
  QgemvThen then;
  if (then_in && then_in->kind != QgemvThen::NONE) {
    check_then(*then_in, mats, n_mats);
    then = *then_in;
  }
  const QuantX xs{xq, xd, k};
  if (mmq_from < 0) mmq_from = mmq_from_env();
  const bool mmq = mmq_from > 0 && n >= mmq_from;
  if (then.kind != QgemvThen::NONE && (mmq || (then.kind == QgemvThen::RMS_NORM && n > QGEMV_THEN_NORM_ROWS))) {
    qgemv_multi(mats, n_mats, k, xq, xd, n, stream, mmq_from);  // the products, then the follow-up's own kernel
    launch_then(then, mats, n, stream);
    return;
  }
  if (mmq) {  // a launch per matrix: at this size a launch is cheap against its work
    for (int i = 0; i < n_mats; ++i) {
      switch ((QType)mats[i].type) {
        case QType::Q4_0: launch_mmq<(int)QType::Q4_0>(mats[i], xs, n, stream); break;
        case QType::Q4_1: launch_mmq<(int)QType::Q4_1>(mats[i], xs, n, stream); break;
        case QType::Q5_0: launch_mmq<(int)QType::Q5_0>(mats[i], xs, n, stream); break;
        case QType::Q8_0: launch_mmq<(int)QType::Q8_0>(mats[i], xs, n, stream); break;
        case QType::Q4_K: launch_mmq<(int)QType::Q4_K>(mats[i], xs, n, stream); break;
        default: launch_mmq<(int)QType::Q6_K>(mats[i], xs, n, stream); break;
      }
      check_launch("mmq");
    }
    return;
  }
  QgemvMats ms{};
  ms.count = n_mats;
  int blocks = 0;
  for (int i = 0; i < n_mats; ++i) {
    ms.m[i] = mats[i];
    blocks += (mats[i].m + QGEMV_WARPS - 1) / QGEMV_WARPS;
    ms.end[i] = blocks;
  }
  const int nc = qgemv_row_group(n);
  const dim3 grid(blocks, (n + nc - 1) / nc), block(32, QGEMV_WARPS);
  const bool shared = shared_sums_from_env();
  const auto kernel = nc == QGEMV_WIDE_N ? qgemv_kernel_for<QGEMV_WIDE_N>(shared) : qgemv_kernel_for<QGEMV_MAX_N>(shared);
  LLL_LAUNCH(kernel, grid, block, 0, stream)(ms, xs, n, then);
  check_launch("qgemv");
}

void qgemv(int type_id, const uint8_t* w, size_t row_bytes, int m, int k, const int8_t* xq, const float* xd, int n,
           float* y, const float* bias, bool add_to_y, cudaStream_t stream) {
  const QgemvMat one{type_id, w, row_bytes, m, y, bias, add_to_y};
  qgemv_multi(&one, 1, k, xq, xd, n, stream);
}

void qgemv_host(int type_id, const uint8_t* w, size_t row_bytes, int m, int k, const float* x, int n, float* y,
                int mmq_from) {
  if (!qgemv_supports(type_id)) throw std::invalid_argument("qgemv: type " + std::to_string(type_id) + " is not supported on CUDA");
  if (n < 1 || n > QGEMV_MAX_ROWS)
    throw std::invalid_argument("qgemv: n must be in [1, " + std::to_string(QGEMV_MAX_ROWS) + "], got " +
                                std::to_string(n));
  if (m < 1 || k < 32 || k % 32) throw std::invalid_argument("qgemv: k must be a positive multiple of 32");
  const TypeInfo* ti = type_info(type_id);
  const size_t packed = (size_t)(k / ti->block_size) * ti->type_size, bytes = (size_t)(m - 1) * row_bytes + packed;
  // the alignment the step reads at: 32-bit words in Q4_1 and Q4_K blocks, 16-bit halves in the rest
  const size_t align = type_id == (int)QType::Q4_1 || type_id == (int)QType::Q4_K ? 4 : 2;
  if (k % ti->block_size || row_bytes < packed || row_bytes % align)
    throw std::invalid_argument("qgemv: rows of " + std::to_string(row_bytes) + " bytes do not hold whole " +
                                std::to_string(align) + "-byte aligned rows of " + std::to_string(k) + " " + ti->name +
                                " weights");
  DeviceArray<uint8_t> dw(w, bytes);
  DeviceArray<float> dx(x, (size_t)n * k), dy((size_t)n * m), dd((size_t)n * (k / 32));
  DeviceArray<int8_t> dq((size_t)n * k);
  quantize_x(dx.p, n, k, dq.p, dd.p, nullptr);
  const QgemvMat one{type_id, dw.p, row_bytes, m, dy.p, nullptr, false};
  qgemv_multi(&one, 1, k, dq.p, dd.p, n, nullptr, mmq_from);
  dy.copy_out(y, (size_t)n * m);
}

}  // namespace lll::cuda
