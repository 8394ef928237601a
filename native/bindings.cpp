// The only file that includes pybind11. Checks dtype, shape and contiguity of every array, releases
// the GIL around native work, and turns C++ exceptions into Python ones (invalid_argument -> ValueError).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>

#include "backend.h"
#include "bandwidth.h"
#include "cpu_features.h"
#include "matmul.h"

namespace py = pybind11;
using namespace lll;

namespace {

std::unique_ptr<CpuBackend> g_backend;
std::mutex g_mu;

int default_threads() {
  const unsigned n = std::thread::hardware_concurrency();
  return n ? (int)n : 1;
}

CpuBackend& backend() {
  std::lock_guard<std::mutex> lk(g_mu);
  if (!g_backend) {
    const char* env = std::getenv("LOCALLLM_CPU");
    g_backend.reset(new CpuBackend(kernels_for(env ? env : ""), default_threads()));
  }
  return *g_backend;
}

void configure(const std::string& path, int threads) {
  if (threads < 0 || threads > 1024) throw std::invalid_argument("threads must be between 1 and 1024");
  const KernelTable* kt = kernels_for(path);
  std::lock_guard<std::mutex> lk(g_mu);
  g_backend.reset(new CpuBackend(kt, threads ? threads : default_threads()));
}

using u8array = py::array_t<uint8_t, py::array::forcecast>;

// a [rows, row_bytes] uint8 matrix whose rows are contiguous (any row stride)
void check_rows(const py::array& w, const char* what) {
  if (w.dtype().kind() != 'u' || w.itemsize() != 1) throw std::invalid_argument(std::string(what) + " must be uint8");
  if (w.ndim() != 2) throw std::invalid_argument(std::string(what) + " must be 2-D [rows, row_bytes]");
  if (w.shape(1) > 1 && w.strides(1) != 1)
    throw std::invalid_argument(std::string(what) + " rows must be contiguous");
  if (w.strides(0) < w.shape(1)) throw std::invalid_argument(std::string(what) + " rows overlap");
}

py::array_t<float> matmul_py(int type_id, const py::array& w, int k, const py::array& x_in) {
  check_rows(w, "weights");
  if (x_in.ndim() != 2) throw std::invalid_argument("x must be 2-D [n, k] float32");
  if (!py::isinstance<py::array_t<float>>(x_in)) throw std::invalid_argument("x must be float32");
  auto x = py::array_t<float, py::array::c_style>::ensure(x_in);
  if (!x) throw std::invalid_argument("x must be a C-contiguous float32 array");
  if (x.shape(1) != k) throw std::invalid_argument("x has " + std::to_string(x.shape(1)) + " columns, expected k=" + std::to_string(k));
  const TypeInfo* ti = type_info(type_id);
  if (!ti) throw std::invalid_argument("unsupported tensor type id " + std::to_string(type_id));
  if (k <= 0 || k % ti->block_size)
    throw std::invalid_argument(std::string(ti->name) + ": k=" + std::to_string(k) + " is not a whole number of blocks");
  if (w.shape(1) != (py::ssize_t)(k / ti->block_size) * ti->type_size)
    throw std::invalid_argument(std::string(ti->name) + ": weight rows are " + std::to_string(w.shape(1)) +
                                " bytes, expected " + std::to_string(k / ti->block_size * ti->type_size) + " for k=" + std::to_string(k));
  const int m = (int)w.shape(0), n = (int)x.shape(0);
  py::array_t<float> y({(py::ssize_t)n, (py::ssize_t)m});
  const uint8_t* wp = (const uint8_t*)w.data();
  const size_t stride = (size_t)w.strides(0);
  const float* xp = x.data();
  float* yp = y.mutable_data();
  CpuBackend& be = backend();
  {
    py::gil_scoped_release nogil;
    be.matmul(type_id, wp, stride, m, k, xp, n, yp);
  }
  return y;
}

py::array_t<float> dequantize_py(int type_id, const py::array& w, int k) {
  check_rows(w, "data");
  const TypeInfo* ti = type_info(type_id);
  if (!ti) throw std::invalid_argument("unsupported tensor type id " + std::to_string(type_id));
  if (k <= 0 || k % ti->block_size || w.shape(1) != (py::ssize_t)(k / ti->block_size) * ti->type_size)
    throw std::invalid_argument(std::string(ti->name) + ": rows of " + std::to_string(w.shape(1)) +
                                " bytes do not hold k=" + std::to_string(k) + " weights");
  const int rows = (int)w.shape(0);
  py::array_t<float> out({(py::ssize_t)rows, (py::ssize_t)k});
  const uint8_t* wp = (const uint8_t*)w.data();
  const size_t stride = (size_t)w.strides(0);
  float* op = out.mutable_data();
  CpuBackend& be = backend();
  {
    py::gil_scoped_release nogil;
    be.dequantize(type_id, wp, stride, rows, k, op);
  }
  return out;
}

py::tuple quantize_x_py(const py::array_t<float, py::array::c_style | py::array::forcecast>& x) {
  if (x.ndim() != 2 || x.shape(1) % 32) throw std::invalid_argument("x must be [n, k] with k a multiple of 32");
  CpuBackend& be = backend();
  QuantizedX q;
  {
    py::gil_scoped_release nogil;
    quantize_x(be.kernels(), x.data(), (int)x.shape(0), (int)x.shape(1), (size_t)x.shape(1), q, be.pool());
  }
  const py::ssize_t n = x.shape(0), k = x.shape(1);
  py::array_t<int8_t> xq({n, k});
  py::array_t<float> dx({n, k / 32});
  py::array_t<int32_t> s16({n, k / 16});
  std::copy(q.xq.begin(), q.xq.end(), xq.mutable_data());
  std::copy(q.dx.begin(), q.dx.end(), dx.mutable_data());
  std::copy(q.sum16.begin(), q.sum16.end(), s16.mutable_data());
  return py::make_tuple(xq, dx, s16);
}

uint64_t stream_read_py(const py::array& buf) {
  if (buf.ndim() != 1 || buf.itemsize() != 1 || !(buf.flags() & py::array::c_style))
    throw std::invalid_argument("buffer must be a contiguous 1-D uint8 array");
  const uint8_t* p = (const uint8_t*)buf.data();
  const size_t n = (size_t)buf.shape(0);
  CpuBackend& be = backend();
  py::gil_scoped_release nogil;
  return stream_read(p, n, be.pool());
}

// GGUF string arrays: [u64 length][bytes] * count from byte pos of buf. Returns (starts, ends, end) or
// raises ValueError("index N: ...") naming the first bad element; lengths are bounded by the buffer.
py::tuple scan_strings_py(const py::array& buf, size_t pos, size_t count) {
  if (buf.ndim() != 1 || buf.itemsize() != 1) throw std::invalid_argument("buf must be 1-D uint8");
  const uint8_t* p = (const uint8_t*)buf.data();
  const size_t end = (size_t)buf.shape(0);
  if (count > (end - std::min(pos, end)) / 8) throw std::invalid_argument("index 0: absurd array length");
  py::array_t<int64_t> starts((py::ssize_t)count), ends((py::ssize_t)count);
  int64_t* s = starts.mutable_data();
  int64_t* e = ends.mutable_data();
  for (size_t i = 0; i < count; ++i) {
    if (pos > end || end - pos < 8) throw std::invalid_argument("index " + std::to_string(i) + ": truncated");
    uint64_t n;
    std::memcpy(&n, p + pos, 8);
    pos += 8;
    if (n > end - pos) throw std::invalid_argument("index " + std::to_string(i) + ": absurd string length " + std::to_string(n));
    s[i] = (int64_t)pos;
    pos += n;
    e[i] = (int64_t)pos;
  }
  return py::make_tuple(starts, ends, pos);
}

}  // namespace

PYBIND11_MODULE(_native, m) {
  m.doc() = "localllm native core (private: import localllm.kernels instead)";
  m.def("available_paths", &available_paths, "CPU kernel paths this machine can run, best last");
  m.def("configure", &configure, py::arg("path") = "", py::arg("threads") = 0,
        "select the CPU path ('' = best) and thread count (0 = all cores); rebuilds the thread pool");
  m.def("current_path", [] { return std::string(backend().kernels().name); });
  m.def("threads", [] { return backend().threads(); });
  m.def("type_supported", [](int id) { return type_info(id) != nullptr; });
  m.def("matmul", &matmul_py, py::arg("type_id"), py::arg("w"), py::arg("k"), py::arg("x"),
        "y[n, m] = x[n, k] @ W[m, k]^T for GGML-typed weight rows");
  m.def("dequantize", &dequantize_py, py::arg("type_id"), py::arg("w"), py::arg("k"));
  m.def("quantize_x", &quantize_x_py, py::arg("x"), "activations -> (xq int8 [n,k], dx [n,k/32], sum16 [n,k/16])");
  m.def("stream_read", &stream_read_py, py::arg("buf"));
  m.def("scan_strings", &scan_strings_py, py::arg("buf"), py::arg("pos"), py::arg("count"));
}
