// The part of the CUDA runtime API the backend calls, for a build whose kernels run on the CPU
// (LOCALLLM_CUDA=EMULATED: native/cuda/emulated.cuh, the warp emulator). One emulated device whose memory is host
// memory; every call is synchronous (a stream is only a name); a launch runs its kernel at once, or, while the
// stream captures, is recorded with its arguments by value, as a CUDA graph records it, and runs when the graph is
// launched (memcpy and memset likewise). For tests only: it says nothing about a card's speed.
#pragma once
#include <cstddef>
#include <functional>

#include "../warp_emulator.h"

enum cudaError_t { cudaSuccess = 0, cudaErrorInvalidValue = 1, cudaErrorMemoryAllocation = 2, cudaErrorStreamCapture = 900 };
enum cudaMemcpyKind { cudaMemcpyHostToHost, cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost, cudaMemcpyDeviceToDevice, cudaMemcpyDefault };
enum cudaStreamCaptureMode { cudaStreamCaptureModeGlobal, cudaStreamCaptureModeThreadLocal, cudaStreamCaptureModeRelaxed };
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
constexpr unsigned cudaStreamNonBlocking = 1;

struct CUstream_st;
struct CUgraph_st;
struct CUgraphExec_st;
struct CUgraphNode_st;
struct CUevent_st;
using cudaEvent_t = CUevent_st*;
using cudaStream_t = CUstream_st*;
using cudaGraph_t = CUgraph_st*;
using cudaGraphExec_t = CUgraphExec_st*;
using cudaGraphNode_t = CUgraphNode_st*;

struct cudaDeviceProp {
  char name[256];
  size_t totalGlobalMem;
  int major, minor, multiProcessorCount;
};

struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
  operator ::lll::emu::Dim3() const { return {x, y, z}; }
};

cudaError_t cudaGetDeviceCount(int* n);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int device);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaMemGetInfo(size_t* free, size_t* total);
cudaError_t cudaRuntimeGetVersion(int* v);
cudaError_t cudaDriverGetVersion(int* v);
cudaError_t cudaGetLastError();
const char* cudaGetErrorString(cudaError_t e);
cudaError_t cudaMalloc(void** p, size_t bytes);
template <class T>
cudaError_t cudaMalloc(T** p, size_t bytes) {
  return cudaMalloc(reinterpret_cast<void**>(p), bytes);
}
cudaError_t cudaFree(void* p);
constexpr unsigned cudaHostAllocDefault = 0;
constexpr unsigned cudaEventDisableTiming = 2;
cudaError_t cudaHostAlloc(void** p, size_t bytes, unsigned flags);
cudaError_t cudaFreeHost(void* p);
// events: a recorded event is complete at once (the stream is synchronous), or when a graph replays past it
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned flags);
cudaError_t cudaEventDestroy(cudaEvent_t e);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s = nullptr);
cudaError_t cudaEventSynchronize(cudaEvent_t e);
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream = nullptr);
cudaError_t cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                              cudaMemcpyKind kind, cudaStream_t stream = nullptr);
cudaError_t cudaMemset(void* p, int value, size_t bytes);
cudaError_t cudaMemsetAsync(void* p, int value, size_t bytes, cudaStream_t stream = nullptr);
cudaError_t cudaDeviceSynchronize();
cudaError_t cudaStreamCreate(cudaStream_t* s);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode mode);
cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t* g);
cudaError_t cudaGraphGetNodes(cudaGraph_t g, cudaGraphNode_t* nodes, size_t* count);
cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t g, unsigned long long flags = 0);
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t s);
cudaError_t cudaGraphDestroy(cudaGraph_t g);
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec);
template <class F>
cudaError_t cudaFuncSetAttribute(F*, cudaFuncAttribute, int) {
  return cudaSuccess;
}

namespace lll::emu {
// runs op now, or records it on the stream's capture
void enqueue(cudaStream_t stream, std::function<void()> op);

// kernel<<<grid, block, smem, stream>>>(args...) (LLL_LAUNCH): the arguments copied, as a launch copies them
template <class F>
struct Launch {
  Dim3 grid, block;
  size_t smem;
  cudaStream_t stream;
  F kernel;
  template <class... A>
  void operator()(A... args) const {
    const Dim3 g = grid, b = block;
    const size_t s = smem;
    const F k = kernel;
    enqueue(stream, [=] { launch(g, b, [&] { k(args...); }, s); });
  }
};
template <class F>
Launch<F> make_launch(dim3 grid, dim3 block, size_t smem, cudaStream_t stream, F kernel) {
  return {grid, block, smem, stream, kernel};
}
}  // namespace lll::emu
