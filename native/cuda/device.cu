// Device discovery: what `localllm.backends()` reports. Never throws: a machine without a driver or a GPU gets an
// empty list and the CUDA error string.
#include "device_compat.cuh"

#include "cuda_api.h"

namespace lll::cuda {

std::vector<DeviceInfo> devices(std::string* error) {
  std::vector<DeviceInfo> out;
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    if (error) *error = cudaGetErrorString(e);
    cudaGetLastError();  // clear the sticky-free error so later calls start clean
    return out;
  }
  for (int i = 0; i < n; ++i) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, i) != cudaSuccess) continue;
    // free memory of device 0 only, the one a model goes to: asking opens a context (hundreds of MB) on the device
    size_t free = 0, total = 0;
    if (i == 0 && (cudaSetDevice(0) != cudaSuccess || cudaMemGetInfo(&free, &total) != cudaSuccess)) {
      free = 0;
      cudaGetLastError();
    }
    out.push_back({i, p.name, p.totalGlobalMem, free, p.major, p.minor});
  }
  if (out.empty() && error) *error = "no CUDA device found";
  return out;
}

int runtime_version() {
  int v = 0;
  cudaRuntimeGetVersion(&v);
  return v;
}

int driver_version() {
  int v = 0;
  if (cudaDriverGetVersion(&v) != cudaSuccess) return 0;
  return v;
}

}  // namespace lll::cuda
