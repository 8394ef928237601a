// emulated_runtime.h: one device made of host memory, synchronous streams, graphs as recorded lists of operations.
#include "emulated_runtime.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <unordered_set>
#include <vector>

struct CUstream_st {
  std::vector<std::function<void()>>* capture = nullptr;  // the operations recorded while capturing
};
struct CUgraph_st {
  std::vector<std::function<void()>> ops;
};
struct CUgraphExec_st {
  std::vector<std::function<void()>> ops;
};

namespace {
constexpr size_t MEMORY = size_t(16) << 30;  // what the device says it has (host memory backs it as used)
CUstream_st g_default_stream;
thread_local cudaError_t g_last = cudaSuccess;

cudaError_t fail(cudaError_t e) {
  g_last = e;
  return e;
}
CUstream_st& stream_of(cudaStream_t s) { return s ? *s : g_default_stream; }
}  // namespace

namespace lll::emu {
void enqueue(cudaStream_t stream, std::function<void()> op) {
  CUstream_st& s = stream_of(stream);
  if (s.capture) s.capture->push_back(std::move(op));
  else op();
}
}  // namespace lll::emu

cudaError_t cudaGetDeviceCount(int* n) {
  *n = 1;
  return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int device) {
  if (device != 0) return fail(cudaErrorInvalidValue);
  std::memset(p, 0, sizeof *p);
  std::strncpy(p->name, "CUDA emulated on the CPU", sizeof p->name - 1);
  p->totalGlobalMem = MEMORY;
  p->major = 9;
  p->minor = 0;
  p->multiProcessorCount = 1;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) { return device == 0 ? cudaSuccess : fail(cudaErrorInvalidValue); }
cudaError_t cudaMemGetInfo(size_t* free, size_t* total) {
  *free = *total = MEMORY;
  return cudaSuccess;
}
cudaError_t cudaRuntimeGetVersion(int* v) {
  *v = 12000;
  return cudaSuccess;
}
cudaError_t cudaDriverGetVersion(int* v) {
  *v = 12000;
  return cudaSuccess;
}
cudaError_t cudaGetLastError() {
  const cudaError_t e = g_last;
  g_last = cudaSuccess;
  return e;
}
const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorStreamCapture: return "operation not permitted when stream is capturing";
  }
  return "unknown error";
}
cudaError_t cudaMalloc(void** p, size_t bytes) {
  *p = std::aligned_alloc(256, (std::max<size_t>(bytes, 1) + 255) / 256 * 256);
  return *p ? cudaSuccess : fail(cudaErrorMemoryAllocation);
}
cudaError_t cudaFree(void* p) {
  std::free(p);
  return cudaSuccess;
}
cudaError_t cudaHostAlloc(void** p, size_t bytes, unsigned) { return cudaMalloc(p, bytes); }
cudaError_t cudaFreeHost(void* p) { return cudaFree(p); }
struct CUevent_st {};
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned) {
  *e = new CUevent_st;
  return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t e) {
  delete e;
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t, cudaStream_t) { return cudaSuccess; }
cudaError_t cudaEventSynchronize(cudaEvent_t) { return cudaSuccess; }
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind) {
  if (bytes) std::memmove(dst, src, bytes);
  return cudaSuccess;
}
cudaError_t cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                              cudaMemcpyKind, cudaStream_t s) {
  lll::emu::enqueue(s, [=] {
    for (size_t r = 0; r < height; ++r)
      std::memmove(static_cast<char*>(dst) + r * dpitch, static_cast<const char*>(src) + r * spitch, width);
  });
  return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind, cudaStream_t s) {
  lll::emu::enqueue(s, [=] {
    if (bytes) std::memmove(dst, src, bytes);
  });
  return cudaSuccess;
}
cudaError_t cudaMemset(void* p, int value, size_t bytes) {
  std::memset(p, value, bytes);
  return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void* p, int value, size_t bytes, cudaStream_t s) {
  lll::emu::enqueue(s, [=] { std::memset(p, value, bytes); });
  return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize() { return cudaSuccess; }
cudaError_t cudaStreamCreate(cudaStream_t* s) {
  *s = new CUstream_st;
  return cudaSuccess;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned) { return cudaStreamCreate(s); }
cudaError_t cudaStreamDestroy(cudaStream_t s) {
  delete s;
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  return stream_of(s).capture ? fail(cudaErrorStreamCapture) : cudaSuccess;
}
cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode) {
  CUstream_st& st = stream_of(s);
  if (st.capture) return fail(cudaErrorStreamCapture);
  st.capture = new std::vector<std::function<void()>>;
  return cudaSuccess;
}
cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t* g) {
  CUstream_st& st = stream_of(s);
  if (!st.capture) return fail(cudaErrorStreamCapture);
  std::unique_ptr<std::vector<std::function<void()>>> ops(st.capture);
  st.capture = nullptr;
  *g = new CUgraph_st{std::move(*ops)};
  return cudaSuccess;
}
cudaError_t cudaGraphGetNodes(cudaGraph_t g, cudaGraphNode_t* nodes, size_t* count) {
  if (nodes) return fail(cudaErrorInvalidValue);  // the count is all the backend asks
  *count = g->ops.size();
  return cudaSuccess;
}
cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t g, unsigned long long) {
  *exec = new CUgraphExec_st{g->ops};
  return cudaSuccess;
}
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t s) {
  for (const auto& op : exec->ops) lll::emu::enqueue(s, op);
  return cudaSuccess;
}
cudaError_t cudaGraphDestroy(cudaGraph_t g) {
  delete g;
  return cudaSuccess;
}
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  delete exec;
  return cudaSuccess;
}
