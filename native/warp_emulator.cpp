// The fibers behind warp_emulator.h: on x86-64 a stack switch of the callee-saved registers (a few nanoseconds, so
// a kernel's millions of barrier waits stay cheap); elsewhere ucontext.
#include "warp_emulator.h"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#if !defined(__x86_64__)
#include <ucontext.h>
#endif

namespace lll::emu {
namespace {

#if defined(__x86_64__)
// saves the callee-saved registers, MXCSR and the x87 control word on the current stack, stores the stack pointer
// in *from, and resumes the stack `to` saved the same way
extern "C" void lll_emu_switch(void** from, void* to);
asm(R"(
  .text
  .p2align 4
  .globl lll_emu_switch
  .type lll_emu_switch, @function
lll_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size lll_emu_switch, .-lll_emu_switch
)");
#endif

constexpr size_t STACK_BYTES = 256 * 1024;
constexpr int WARP = 32, MAX_EXCHANGE = 64;

struct Barrier {
  int arrived = 0;
  unsigned generation = 0;
};

struct Fiber {
  Dim3 thread;
  int warp = 0, lane = 0;
  bool done = false;
  std::unique_ptr<char[]> stack;
#if defined(__x86_64__)
  void* sp = nullptr;
#else
  ucontext_t ctx;
#endif
};

struct Block {
  Dim3 grid, dim, index;
  std::vector<Fiber> fibers;
  std::vector<Barrier> warp_barriers;
  std::vector<int> warp_exited;  // lanes of each warp that have exited
  std::vector<unsigned char> scratch;  // [warp][lane][MAX_EXCHANGE]
  std::vector<std::max_align_t> shared;  // dynamic shared memory
  Barrier block_barrier;
  const char* block_site_file = nullptr;  // where the threads waiting at block_barrier called __syncthreads
  int block_site_line = 0;
  int live = 0;
  unsigned long progress = 0;  // arrivals and exits: a scheduler pass without any is a deadlock
  Fiber* current = nullptr;
  const std::function<void()>* body = nullptr;
  std::exception_ptr error;
#if defined(__x86_64__)
  void* scheduler_sp = nullptr;
#else
  ucontext_t scheduler;
#endif
};

Block* g_block = nullptr;

int g_reverse = -1;  // -1: not yet read from LOCALLLM_EMULATOR_ORDER (read at the first launch, so that a bad value
                     // is an error there, not at the module's load)

bool reverse_order() {
  if (g_reverse < 0) {
    const char* env = std::getenv("LOCALLLM_EMULATOR_ORDER");
    if (env && *env && std::strcmp(env, "forward") != 0 && std::strcmp(env, "reverse") != 0)
      throw std::invalid_argument(std::string("LOCALLLM_EMULATOR_ORDER must be forward or reverse, got '") + env + "'");
    g_reverse = env && std::strcmp(env, "reverse") == 0;
  }
  return g_reverse;
}

Fiber& me() {
  if (!g_block || !g_block->current) throw std::logic_error("warp emulator: called outside a launch");
  return *g_block->current;
}

void yield() {
  Block& b = *g_block;
  Fiber& f = *b.current;
#if defined(__x86_64__)
  lll_emu_switch(&f.sp, b.scheduler_sp);
#else
  swapcontext(&f.ctx, &b.scheduler);
#endif
}

const char* const EXITED_IN_COLLECTIVE =
    "warp emulator: a thread exited while its warp's lanes wait in a collective (every lane takes part)";

// the launch's error (the first one stands); the running fiber is parked: the scheduler stops at the error and never
// resumes it
[[noreturn]] void fail(const std::string& what) {
  Block& b = *g_block;
  if (!b.error) b.error = std::make_exception_ptr(std::logic_error(what));
  for (;;) yield();
}

// every one of `size` participants arrives once per round
void wait(Barrier& bar, int size) {
  Block& b = *g_block;
  ++b.progress;
  const unsigned gen = bar.generation;
  if (++bar.arrived >= size) {
    bar.arrived = 0;
    ++bar.generation;
    return;
  }
  while (bar.generation == gen) yield();
}

// a warp collective's round: every lane of the warp, none of which may have exited (in either order a card runs
// them: a lane that left before the others arrive is the same error as one leaving while they wait)
void warp_wait(Block& b, int warp) {
  if (b.warp_exited[warp]) fail(EXITED_IN_COLLECTIVE);
  wait(b.warp_barriers[warp], WARP);
}

[[noreturn]] void fiber_main() {
  Block& b = *g_block;
  try {
    (*b.body)();
  } catch (...) {
    if (!b.error) b.error = std::current_exception();
  }
  Fiber& f = *b.current;
  f.done = true;
  --b.live;
  ++b.progress;
  // a block barrier the exited thread no longer holds up
  if (b.block_barrier.arrived && b.block_barrier.arrived >= b.live) {
    b.block_barrier.arrived = 0;
    b.block_site_file = nullptr;
    ++b.block_barrier.generation;
  }
  ++b.warp_exited[f.warp];
  if (b.warp_barriers[f.warp].arrived && !b.error) b.error = std::make_exception_ptr(std::logic_error(EXITED_IN_COLLECTIVE));
  for (;;) yield();  // the scheduler never resumes a finished fiber
}

#if !defined(__x86_64__)
void fiber_entry_ucontext() { fiber_main(); }
#endif

void start(Block& b, Fiber& f) {
#if defined(__x86_64__)
  // the stack lll_emu_switch resumes: control words, six registers, then fiber_main as the return address, with
  // the stack 16-byte aligned as a call would have left it
  uintptr_t top = reinterpret_cast<uintptr_t>(f.stack.get() + STACK_BYTES) & ~uintptr_t(15);
  uint64_t* s = reinterpret_cast<uint64_t*>(top);
  *--s = 0;                                                // fiber_main's own return address: never used
  *--s = reinterpret_cast<uint64_t>(&fiber_main);          // where the switch returns to
  for (int i = 0; i < 6; ++i) *--s = 0;                    // rbp rbx r12 r13 r14 r15
  --s;
  uint32_t csr;
  uint16_t fcw;
  asm volatile("stmxcsr %0" : "=m"(csr));
  asm volatile("fnstcw %0" : "=m"(fcw));
  std::memcpy(s, &csr, 4);
  std::memcpy(reinterpret_cast<char*>(s) + 4, &fcw, 2);
  f.sp = s;
#else
  getcontext(&f.ctx);
  f.ctx.uc_stack.ss_sp = f.stack.get();
  f.ctx.uc_stack.ss_size = STACK_BYTES;
  f.ctx.uc_link = &b.scheduler;
  makecontext(&f.ctx, &fiber_entry_ucontext, 0);
#endif
}

void resume(Block& b, Fiber& f) {
  b.current = &f;
#if defined(__x86_64__)
  lll_emu_switch(&b.scheduler_sp, f.sp);
#else
  swapcontext(&b.scheduler, &f.ctx);
#endif
  b.current = nullptr;
}

}  // namespace

const Dim3& thread_idx() { return me().thread; }
const Dim3& block_idx() { return me(), g_block->index; }
const Dim3& block_dim() { return me(), g_block->dim; }
const Dim3& grid_dim() { return me(), g_block->grid; }
int lane() { return me().lane; }

void sync_block(const char* file, int line) {
  me();
  Block& b = *g_block;
  if (!b.block_barrier.arrived) {
    b.block_site_file = file;
    b.block_site_line = line;
  } else if (line != b.block_site_line || std::strcmp(file, b.block_site_file) != 0) {
    fail("warp emulator: threads of a block met __syncthreads at different places (" + std::string(b.block_site_file) +
         ":" + std::to_string(b.block_site_line) + " and " + file + ":" + std::to_string(line) +
         "): CUDA leaves that undefined");
  }
  wait(b.block_barrier, b.live);
}

void warp_exchange(const void* mine, size_t bytes, void* all) {
  Fiber& f = me();
  Block& b = *g_block;
  if (bytes > (size_t)MAX_EXCHANGE) throw std::logic_error("warp emulator: more than 64 bytes a lane in one collective");
  unsigned char* w = b.scratch.data() + (size_t)f.warp * WARP * MAX_EXCHANGE;
  std::memcpy(w + (size_t)f.lane * MAX_EXCHANGE, mine, bytes);
  warp_wait(b, f.warp);  // every lane has written
  for (int l = 0; l < WARP; ++l) std::memcpy((unsigned char*)all + l * bytes, w + (size_t)l * MAX_EXCHANGE, bytes);
  warp_wait(b, f.warp);  // every lane has read, so the scratch may be written again
}

void sync_warp() {
  Fiber& f = me();
  warp_wait(*g_block, f.warp);
}

void* dynamic_shared() {
  me();
  return g_block->shared.data();
}

void warp_exchange_one(const void* mine, size_t bytes, int src, void* theirs) {
  Fiber& f = me();
  Block& b = *g_block;
  if (bytes > (size_t)MAX_EXCHANGE) throw std::logic_error("warp emulator: more than 64 bytes a lane in one collective");
  unsigned char* w = b.scratch.data() + (size_t)f.warp * WARP * MAX_EXCHANGE;
  std::memcpy(w + (size_t)f.lane * MAX_EXCHANGE, mine, bytes);
  warp_wait(b, f.warp);
  std::memcpy(theirs, w + (size_t)(src & (WARP - 1)) * MAX_EXCHANGE, bytes);
  warp_wait(b, f.warp);
}

bool set_reverse(bool reverse) {
  const bool was = reverse_order();
  g_reverse = reverse;
  return was;
}

void launch(Dim3 grid, Dim3 block, const std::function<void()>& body, size_t smem) {
  if (g_block) throw std::logic_error("warp emulator: a launch inside a launch");
  const bool reverse = reverse_order();
  const size_t threads = (size_t)block.x * block.y * block.z;
  if (!threads || threads % WARP || threads > 1024)
    throw std::invalid_argument("warp emulator: a block is 32 to 1024 threads, whole warps, got " + std::to_string(threads));
  Block b;
  b.grid = grid;
  b.dim = block;
  b.body = &body;
  b.fibers.resize(threads);
  b.warp_barriers.resize(threads / WARP);
  b.warp_exited.resize(threads / WARP);
  b.scratch.resize(threads * MAX_EXCHANGE);
  for (Fiber& f : b.fibers) f.stack.reset(new char[STACK_BYTES]);
  g_block = &b;
  struct Reset {
    ~Reset() { g_block = nullptr; }
  } reset;
  const size_t blocks = (size_t)grid.x * grid.y * grid.z;
  for (size_t n = 0; n < blocks; ++n) {
    const size_t i = reverse ? blocks - 1 - n : n;
    b.index = {(unsigned)(i % grid.x), (unsigned)(i / grid.x % grid.y), (unsigned)(i / ((size_t)grid.x * grid.y))};
    b.shared.assign((smem + sizeof(std::max_align_t) - 1) / sizeof(std::max_align_t), std::max_align_t{});
    b.live = (int)threads;
    b.block_barrier = {};
    b.block_site_file = nullptr;
    for (Barrier& w : b.warp_barriers) w = {};
    for (int& e : b.warp_exited) e = 0;
    for (size_t t = 0; t < threads; ++t) {
      Fiber& f = b.fibers[t];
      f.thread = {(unsigned)(t % block.x), (unsigned)(t / block.x % block.y), (unsigned)(t / ((size_t)block.x * block.y))};
      f.warp = (int)(t / WARP);
      f.lane = (int)(t % WARP);
      f.done = false;
      start(b, f);
    }
    while (b.live && !b.error) {
      const unsigned long before = b.progress;
      for (size_t t = 0; t < threads; ++t) {
        Fiber& f = b.fibers[reverse ? threads - 1 - t : t];
        if (!f.done && !b.error) resume(b, f);
      }
      if (b.progress == before && b.live && !b.error)
        b.error = std::make_exception_ptr(
            std::logic_error("warp emulator: deadlock (threads wait at barriers that others never reach)"));
    }
    if (b.error) std::rethrow_exception(b.error);
  }
}

}  // namespace lll::emu
