// Runs the source of a CUDA kernel on the CPU, for tests: the device code of native/cuda/*.cuh compiled for the host
// (native/cuda/emulated.cuh maps CUDA's built-ins onto this), so that a kernel that has never met a card has still
// run, its indexing, shared memory, barriers and warp collectives included, and its bits can be compared with
// another kernel's (tests/native/test_cuda_emulated.py).
//
// Every thread of a block is a fiber on the calling thread. A fiber runs until it reaches a barrier: __syncthreads
// (the block's live threads) or a warp collective (the 32 lanes of its warp: __shfl_xor_sync, mma), which
// exchanges each lane's value through the warp's scratch. Blocks run one after another, so a kernel's __shared__
// arrays can be static. Semantics, not speed, and not everything CUDA allows: warps are whole (blockDim a multiple
// of 32), every lane of a warp reaches each collective, no atomics, no dynamic shared memory. A thread's exit
// releases a block barrier that only exited threads held up, as PTX's exit does. A std::logic_error, where a
// card's behaviour would be undefined or a hang:
// - a deadlock (threads waiting at barriers that others never reach);
// - an exit with lanes of the thread's warp still in a collective;
// - threads meeting one __syncthreads at different places in the source (file and line): CUDA's __syncthreads is
//   PTX's barrier.sync.aligned, which every thread of the block must execute at the same instruction, so a barrier
//   in code that threads reach by different paths is undefined even where a card happens to release it.
// An exception a thread throws ends the launch and is rethrown by launch().
#pragma once
#include <cstddef>
#include <functional>

namespace lll::emu {

struct Dim3 {
  unsigned x = 1, y = 1, z = 1;
};

// the running thread's coordinates (valid inside launch's body)
const Dim3& thread_idx();
const Dim3& block_idx();
const Dim3& block_dim();
const Dim3& grid_dim();
// the running thread's lane in its warp (linear thread index % 32)
int lane();

// __syncthreads at file:line (the call site, for the aligned-barrier check): wait until every live thread of the
// block has reached it
void sync_block(const char* file = __builtin_FILE(), int line = __builtin_LINE());
// A warp collective: every lane of the running thread's warp gives `bytes` bytes (at most 64) of `mine`; each gets
// all 32 lanes' in `all` (lane i's at all + i * bytes)
void warp_exchange(const void* mine, size_t bytes, void* all);
// the same collective when a lane wants one lane's value: lane src's bytes into *theirs
void warp_exchange_one(const void* mine, size_t bytes, int src, void* theirs);

// __syncwarp: wait until every lane of the running thread's warp has reached it
void sync_warp();
// the block's dynamic shared memory (launch's smem bytes, 16-byte aligned; zeroed before each block)
void* dynamic_shared();

// Runs body once per thread of every block of the grid, block by block in x, y, z order (the reverse order under
// set_reverse), with smem bytes of dynamic shared memory per block.
void launch(Dim3 grid, Dim3 block, const std::function<void()>& body, size_t smem = 0);

// The order blocks run in, and the order a block's threads run between barriers: forward (x, y, z; thread 0 first)
// or reversed. A card promises neither, so a kernel must give the same bits both ways: a read of what another
// thread writes between the same two barriers, or a "last block" that assumes which block ends last, shows as a
// difference. Starts reversed where LOCALLLM_EMULATOR_ORDER=reverse (read at the first launch: forward or reverse,
// anything else an error there); returns whether it was reversed.
bool set_reverse(bool reverse);

}  // namespace lll::emu
