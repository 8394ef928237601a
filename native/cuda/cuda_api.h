// The CUDA backend as the C++ side sees it: plain declarations, no CUDA headers, so bind_cuda.cpp and the CPU
// code compile the same with or without the toolkit. Defined in the .cu files of this folder, which CMake builds
// only when it finds nvcc (LLL_CUDA); without them bind_cuda.cpp reports the backend as not compiled.
//
// Errors (no driver, no device, a failing launch) are std::runtime_error carrying the CUDA error string.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace lll::cuda {

struct DeviceInfo {
  int index;
  std::string name;
  size_t total_memory;  // bytes
  int major, minor;     // compute capability
};

// the devices this process sees; empty with *error set (the CUDA error string) when the driver or the device is
// missing: never throws
std::vector<DeviceInfo> devices(std::string* error);
int runtime_version();  // CUDA runtime the module was built with, e.g. 13000
int driver_version();   // what the installed driver supports (0 without a driver)

// y [n][m] = x [n][k] . W^T on device 0 for m rows of a quantized type (Q4_0, Q4_1, Q5_0, Q8_0, Q4_K, Q6_K),
// row_bytes each, k weights a row (a multiple of the type's block), 1 <= n <= 8: the decode product. Copies w and
// x in, quantizes x per 32 on the device (int8 + scale, as the CPU path), runs the kernel, copies y out. The
// reference is the CPU's matmul over the same rows.
void qgemv(int type_id, const uint8_t* w, size_t row_bytes, int m, int k, const float* x, int n, float* y);
bool qgemv_supports(int type_id);

}  // namespace lll::cuda
