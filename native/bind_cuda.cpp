// Bindings of the CUDA backend (native/cuda/cuda_api.h): what was compiled in, the devices found, and the device
// kernels' test entry points. Built with or without the toolkit: without it (no LLL_CUDA) the backend reports
// itself absent and the entry points raise.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <stdexcept>
#include <string>

#include "bindings.h"
#include "cuda/cuda_api.h"
#include "kernel_context.h"
#include "matmul.h"

namespace py = pybind11;

namespace lll {

namespace {

#ifdef LLL_CUDA
constexpr bool kCompiled = true;
#else
constexpr bool kCompiled = false;
#endif

py::dict cuda_info() {
  py::dict d;
  d["compiled"] = kCompiled;
  py::list devs;
  std::string error = kCompiled ? "" : "not compiled in (built without nvcc or with LOCALLLM_CUDA=OFF)";
#ifdef LLL_CUDA
  for (const cuda::DeviceInfo& di : cuda::devices(&error)) {
    py::dict e;
    e["index"] = di.index;
    e["name"] = di.name;
    e["total_memory"] = di.total_memory;
    e["compute_capability"] = py::make_tuple(di.major, di.minor);
    devs.append(e);
  }
  d["runtime_version"] = cuda::runtime_version();
  d["driver_version"] = cuda::driver_version();
#endif
  d["devices"] = devs;
  d["error"] = error;
  return d;
}

py::array_t<float> cuda_qgemv_py(int type_id, const py::array& w, int k, const py::array& x_in) {
  const KernelTable& kt = *kernel_context().kernels;
  auto x = checked_product(kt, type_id, w, k, x_in);
  const int m = (int)w.shape(0), n = (int)x.shape(0);
  py::array_t<float> y({(py::ssize_t)n, (py::ssize_t)m});
#ifdef LLL_CUDA
  const uint8_t* wp = static_cast<const uint8_t*>(w.data());
  const size_t row_bytes = (size_t)w.strides(0);
  const float* xp = x.data();
  float* yp = y.mutable_data();
  py::gil_scoped_release release;
  cuda::qgemv(type_id, wp, row_bytes, m, k, xp, n, yp);
#else
  (void)m;
  (void)n;
  throw std::runtime_error("the CUDA backend is not compiled in");
#endif
  return y;
}

}  // namespace

void bind_cuda(py::module_& m, py::module_& testing) {
  m.def("cuda_info", &cuda_info, "the CUDA backend: compiled, devices, versions, the reason when absent");
  testing.def("cuda_qgemv", &cuda_qgemv_py, py::arg("type_id"), py::arg("w"), py::arg("k"), py::arg("x"),
              "y[n, m] = x[n, k] @ W[m, k]^T on CUDA device 0 (n <= 8): the decode product kernel");
}

}  // namespace lll
