// Bindings of the kernels: matrix products and dequantization over GGML-typed weight rows, the CPU path and
// the kernel entry points' thread count (kernel_context.h), and the roofline loops of `bench kernels`.
// Checks dtype, shape and contiguity of every array and releases the GIL around native work.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "bandwidth.h"
#include "bindings.h"
#include "cpu_features.h"
#include "kernel_context.h"
#include "matmul.h"
#include "repack.h"

namespace py = pybind11;

namespace lll {

namespace {

// a [rows, row_bytes] uint8 matrix whose rows are contiguous (any row stride)
void check_rows(const py::array& w, const char* what) {
  if (w.dtype().kind() != 'u' || w.itemsize() != 1) throw std::invalid_argument(std::string(what) + " must be uint8");
  if (w.ndim() != 2) throw std::invalid_argument(std::string(what) + " must be 2-D [rows, row_bytes]");
  if (w.shape(1) > 1 && w.strides(1) != 1)
    throw std::invalid_argument(std::string(what) + " rows must be contiguous");
  if (w.strides(0) < w.shape(1)) throw std::invalid_argument(std::string(what) + " rows overlap");
}

}  // namespace

// rows w: [m, row_bytes] of type_id holding k weights each; std::invalid_argument naming `what` otherwise
void check_weight_rows(const KernelTable& kt, int type_id, const py::array& w, int k, const char* what) {
  check_rows(w, what);
  const TypeInfo& ti = checked_type(kt, type_id, k, what);
  if (w.shape(1) != (py::ssize_t)row_bytes_of(ti, k))
    throw std::invalid_argument(std::string(ti.name) + ": " + what + " rows are " + std::to_string(w.shape(1)) +
                                " bytes, expected " + std::to_string(row_bytes_of(ti, k)) + " for k=" +
                                std::to_string(k));
}

// the checked x [n][k] float32 of a product with weight rows w of type_id
py::array_t<float, py::array::c_style> checked_product(const KernelTable& kt, int type_id, const py::array& w, int k,
                                                       const py::array& x_in) {
  if (x_in.ndim() != 2) throw std::invalid_argument("x must be 2-D [n, k] float32");
  if (!py::isinstance<py::array_t<float>>(x_in)) throw std::invalid_argument("x must be float32");
  auto x = py::array_t<float, py::array::c_style>::ensure(x_in);
  if (!x) throw std::invalid_argument("x must be a C-contiguous float32 array");
  if (x.shape(1) != k) throw std::invalid_argument("x has " + std::to_string(x.shape(1)) + " columns, expected k=" + std::to_string(k));
  check_weight_rows(kt, type_id, w, k, "weights");
  return x;
}

namespace {

py::array_t<float> matmul_py(int type_id, const py::array& w, int k, const py::array& x_in) {
  KernelContext ctx = kernel_context();
  auto x = checked_product(*ctx.kernels, type_id, w, k, x_in);
  const int m = (int)w.shape(0), n = (int)x.shape(0);
  py::array_t<float> y({(py::ssize_t)n, (py::ssize_t)m});
  const uint8_t* wp = (const uint8_t*)w.data();
  const size_t stride = (size_t)w.strides(0);
  const float* xp = x.data();
  float* yp = y.mutable_data();
  {
    py::gil_scoped_release nogil;
    matmul(*ctx.kernels, type_id, wp, stride, m, k, xp, n, yp, ctx.pool);
  }
  return y;
}

py::array_t<float> dequantize_py(int type_id, const py::array& w, int k) {
  KernelContext ctx = kernel_context();
  check_weight_rows(*ctx.kernels, type_id, w, k, "data");
  const int rows = (int)w.shape(0);
  py::array_t<float> out({(py::ssize_t)rows, (py::ssize_t)k});
  const uint8_t* wp = (const uint8_t*)w.data();
  const size_t stride = (size_t)w.strides(0);
  float* op = out.mutable_data();
  {
    py::gil_scoped_release nogil;
    dequantize(*ctx.kernels, type_id, wp, stride, rows, k, op);
  }
  return out;
}

// rows w [m, row_bytes] of type_id (k weights each) -> (internal type id, packed rows) of repack.h; ValueError where no
// internal layout applies
py::tuple repack_py(int type_id, const py::array& w, int k) {
  KernelContext ctx = kernel_context();
  check_weight_rows(*ctx.kernels, type_id, w, k, "weights");
  const int to = repacked_type(type_id, k);
  if (to < 0)
    throw std::invalid_argument("repack: no internal layout for " + std::string(type_info(type_id)->name) +
                                " rows of " + std::to_string(k) + " weights");
  const int m = (int)w.shape(0);
  const size_t rb = row_bytes_of(*type_info(to), k);
  py::array_t<uint8_t> out({(py::ssize_t)m, (py::ssize_t)rb});
  repack_rows(type_id, (const uint8_t*)w.data(), (size_t)w.strides(0), m, k, out.mutable_data());
  return py::make_tuple(to, out);
}

// whether `path`'s kernels want rows of type_id repacked at load (KernelTable::repack)
bool wants_repack_py(const std::string& path, int type_id) {
  if (type_id < 0 || type_id >= N_TYPE_IDS) return false;
  return kernels_for(path)->repack[type_id];
}

uint64_t stream_read_py(const py::array& buf, int streams) {
  if (buf.ndim() != 1 || buf.itemsize() != 1 || !(buf.flags() & py::array::c_style))
    throw std::invalid_argument("buffer must be a contiguous 1-D uint8 array");
  const uint8_t* p = (const uint8_t*)buf.data();
  const size_t n = (size_t)buf.shape(0);
  KernelContext ctx = kernel_context();
  py::gil_scoped_release nogil;
  return stream_read(p, n, ctx.pool, streams);
}

// the current path's int8 peak loop (kernels.h) on every kernel thread, iters steps each: (multiply-adds done in
// all, the checksum of thread 0's chains; every thread computes the same); None where the path has no such loop
py::object int8_peak_py(int64_t iters) {
  if (iters < 1) throw std::invalid_argument("iters must be positive");
  KernelContext ctx = kernel_context();
  const KernelTable& kt = *ctx.kernels;
  if (!kt.int8_peak) return py::none();
  const int nt = ctx.pool.size();
  std::vector<uint64_t> sums(nt);
  {
    py::gil_scoped_release nogil;
    ctx.pool.run(nt, [&](int t, int) { sums[t] = kt.int8_peak(iters); });
  }
  return py::make_tuple(py::int_((uint64_t)nt * (uint64_t)iters * (uint64_t)kt.int8_peak_macs), py::int_(sums[0]));
}

// Best-of-reps seconds for one product per matrix of mats [(type_id, rows uint8 [m, row_bytes], k)] with n random
// activation rows, on the kernel path `path` with `threads` threads (not the process's settings: nothing else
// changes). Measures how fast each path runs a model's own shapes (localllm.model.cpu_path).
double time_products_py(const std::string& path, const py::list& mats, int n, int reps, int threads) {
  if (n < 1 || reps < 1) throw std::invalid_argument("n and reps must be positive");
  if (threads < 1 || threads > 1024) throw std::invalid_argument("threads must be between 1 and 1024");
  const KernelTable& kt = *kernels_for(path);
  ThreadPool pool(threads);
  struct Mat {
    int type_id, m, k;
    const uint8_t* w;
    size_t stride;
  };
  std::vector<Mat> ms;
  RepackedWeights repacked;
  size_t max_k = 0, max_m = 0;
  for (const auto& item : mats) {
    auto t = item.cast<py::tuple>();
    if (t.size() != 3) throw std::invalid_argument("each matrix is (type_id, rows, k)");
    const int type_id = t[0].cast<int>(), k = t[2].cast<int>();
    py::array w = py::array::ensure(t[1]);
    check_weight_rows(kt, type_id, w, k, "weights");
    // as a model's CPU stage would hold them on this path (repack.h)
    WeightView v{(const uint8_t*)w.data(), type_id, (int)w.shape(0), k, (size_t)w.strides(0)};
    v = repacked.view(kt, v, &pool);
    ms.push_back({v.type, v.rows, k, v.data, v.row_bytes});
    max_k = std::max(max_k, (size_t)k);
    max_m = std::max(max_m, (size_t)w.shape(0));
  }
  std::vector<float> x((size_t)n * max_k), y((size_t)n * max_m);
  for (size_t i = 0; i < x.size(); ++i) x[i] = (float)((int)(i * 2654435761u % 2001) - 1000) / 1000.0f;
  double best = 1e30;
  py::gil_scoped_release nogil;
  for (int r = 0; r <= reps; ++r) {  // the first pass warms the caches and pages the weights in, untimed
    const auto t0 = std::chrono::steady_clock::now();
    for (const Mat& mt : ms) matmul(kt, mt.type_id, mt.w, mt.stride, mt.m, mt.k, x.data(), n, y.data(), pool);
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (r > 0) best = std::min(best, dt);
  }
  return best;
}

}  // namespace

void bind_kernels(py::module_& m) {
  m.def("available_paths", &available_paths, "CPU kernel paths this machine can run, best last");
#if defined(LLL_EMULATED_AVX512)
  m.attr("EMULATED_AVX512") = true;
#else
  m.attr("EMULATED_AVX512") = false;
#endif
  m.def("known_paths", &known_paths, "every CPU kernel path a build can have, whatever this machine runs");
  m.def("configure", &configure_kernels, py::arg("path") = "", py::arg("threads") = 0,
        "select the CPU path ('' = best) and the kernel entry points' thread count (0 = every hardware thread)");
  m.def("current_path", [] { return std::string(kernel_context().kernels->name); });
  m.def("threads", [] { return kernel_context().pool.size(); });
  m.def("matmul", &matmul_py, py::arg("type_id"), py::arg("w"), py::arg("k"), py::arg("x"),
        "y[n, m] = x[n, k] @ W[m, k]^T for GGML-typed weight rows");
  m.def("dequantize", &dequantize_py, py::arg("type_id"), py::arg("w"), py::arg("k"));
  m.def("stream_read", &stream_read_py, py::arg("buf"), py::arg("streams") = 1);
  m.def("int8_peak", &int8_peak_py, py::arg("iters"));
  m.def("repack", &repack_py, py::arg("type_id"), py::arg("rows"), py::arg("k"),
        "(internal type id, rows) of repack.h's layout for rows of type_id (ValueError where none applies)");
  m.def("wants_repack", &wants_repack_py, py::arg("path"), py::arg("type_id"),
        "whether `path`'s kernels read rows of type_id repacked (a model's CPU stage repacks them at load)");
  m.def("time_products", &time_products_py, py::arg("path"), py::arg("mats"), py::arg("n"), py::arg("reps"),
        py::arg("threads"),
        "best-of-reps seconds of one product per (type_id, rows, k) with n activation rows on `path`");
}

}  // namespace lll
