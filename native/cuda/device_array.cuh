// Device memory for the host test entry points (cuda_api.h): count elements of P, copied in from the host when
// given, freed on scope exit (exceptions included).
#pragma once
#include "device_compat.cuh"

#include <algorithm>
#include <cstddef>

#include "device_ops.cuh"

namespace lll::cuda {

template <class P>
struct DeviceArray {
  P* p = nullptr;
  explicit DeviceArray(size_t count) { check(cudaMalloc(&p, std::max<size_t>(count, 1) * sizeof(P)), "cudaMalloc"); }
  // a copy of host [0, count) (nothing copied from a null host or for count 0)
  DeviceArray(const P* host, size_t count) : DeviceArray(count) {
    if (host && count) check(cudaMemcpy(p, host, count * sizeof(P), cudaMemcpyHostToDevice), "copy to the device");
  }
  ~DeviceArray() { cudaFree(p); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  void copy_out(P* host, size_t count) const {
    if (count) check(cudaMemcpy(host, p, count * sizeof(P), cudaMemcpyDeviceToHost), "copy to the host");
  }
};

}  // namespace lll::cuda
