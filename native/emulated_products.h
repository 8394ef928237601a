// The CUDA backend's int8 products run on the CPU by the warp emulator (warp_emulator.h), for tests: the source of
// native/cuda/qgemv_kernel.cuh and mmq_kernel.cuh compiled for the host, so that kernels a card has not run yet are
// still run, and their bits compared (tests/native/test_cuda_emulated.py). Slow (every barrier a fiber switch):
// shapes of a few hundred rows.
#pragma once
#include <cstddef>
#include <cstdint>

namespace lll {

// y [n][m] = x [n][k] . W^T (+ bias [m] when given; + y's own values when add_to_y) for W of m rows of row_bytes of
// a type the device's int8 products take (Q4_0, Q4_1, Q5_0, Q8_0, Q4_K, Q6_K): quantize_x, then the decode
// kernel (qgemv) at the geometry qgemv.cu gives n rows, or the tile kernel (mmq) when mmq; own_sums: the decode
// kernel as LOCALLLM_CUDA_XSUM=0 launches it (each warp finds the activations' sums itself, qgemv_kernel.cuh)
void emulated_int8_product(int type_id, const uint8_t* w, size_t row_bytes, int m, int k, const float* x, int n,
                           float* y, const float* bias, bool add_to_y, bool mmq, bool own_sums = false);

// The decode kernel with a follow-up in its tail (QgemvThen, cuda/qmat.cuh), launched at qgemv's geometry for n
// rows whatever n: with w2 (gate W, up w2, both m rows of row_bytes, one launch), y and y2 the two products, then
// the gated activation (SiLU when silu, else GELU) quantized; without, y += x . W^T (the residual stream), then
// y's RMSNorm by norm_w [m] (eps) into out [n][m], quantized. The quantization per 32 into xq [n][m], xd [n][m / 32].
// m a multiple of 32. Throws where a piece's counter is not back to 0 after the launch.
void emulated_int8_then(int type_id, const uint8_t* w, const uint8_t* w2, size_t row_bytes, int m, int k,
                        const float* x, int n, float* y, float* y2, bool silu, const float* norm_w, float eps,
                        float* out, int8_t* xq_out, float* xd_out);

// The warp emulator's own rules, on small kernels of two warps that __syncthreads as cuda/emulated.cuh maps it (for
// tests): "aligned" (every thread at one barrier, twice; returns the sum the threads exchanged through shared
// memory), "early-exit" (one warp returns before a barrier the other waits at: released, as PTX's exit does),
// "divergent" (the warps meet one barrier instance at two places in the source), "deadlock" (half a warp waits in
// __syncwarp while the other threads wait at a barrier), "exit-in-collective" (half a warp leaves while the other
// half waits in a shuffle). Those three throw the emulator's std::logic_error. "racy": each thread reads its
// neighbour's shared cell with no barrier after the neighbour's write; returns the sum read, which depends on the
// order the threads run in (emu::set_reverse).
int emulated_barrier_case(const char* name);

}  // namespace lll
