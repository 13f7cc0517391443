// The CUDA emulator's block scheduler (tests/cuda_emu/README.md): a block's threads run as fibers
// on the calling OS thread; a fiber runs until it reaches a barrier or ends. Context switches are
// a few instructions of x86-64 assembly (callee-saved registers, MXCSR and the x87 control word),
// so a block of 256 threads that meets ten barriers costs microseconds, not a system call each.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "tests/cuda_emu/emu.hpp"
#include "tests/cuda_emu/emu_internal.hpp"

#if !defined(__x86_64__)
#error "the CUDA emulator's fibers are written for x86-64"
#endif

extern "C" void ferry_emu_switch(void** save_sp, void* new_sp);
extern "C" void ferry_emu_trampoline();

// ferry_emu_switch(save, next): pushes the callee-saved state on the current stack, stores the
// stack pointer in *save, and continues on `next` by popping the same layout from it.
// A new fiber's stack is prepared with that layout and ferry_emu_trampoline as the return
// address; the trampoline passes r12 (the fiber) to ferry_emu_fiber_main.
asm(R"(
.pushsection .text
.globl ferry_emu_switch
.type ferry_emu_switch,@function
ferry_emu_switch:
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
.size ferry_emu_switch, .-ferry_emu_switch
.globl ferry_emu_trampoline
.type ferry_emu_trampoline,@function
ferry_emu_trampoline:
  movq %r12, %rdi
  call ferry_emu_fiber_main
  ud2
.size ferry_emu_trampoline, .-ferry_emu_trampoline
.popsection
)");

namespace ferry_emu {

thread_local const ThreadState* current = nullptr;

namespace {

constexpr size_t kStackBytes = 256 * 1024;  // kernels keep small arrays in registers; ample
constexpr unsigned kWarp = 32;

enum class FiberState { runnable, at_block_barrier, at_warp_barrier, done };

struct Fiber {
  void* sp = nullptr;
  FiberState state = FiberState::runnable;
  ThreadState ts{};
  unsigned warp = 0;
};

struct WarpState {
  unsigned live = 0, arrived = 0;
  alignas(16) unsigned char slots[kWarp * 16];
};

// One block being run on this OS thread.
struct BlockRun {
  std::vector<Fiber> fibers;
  std::vector<WarpState> warps;
  unsigned live = 0, arrived = 0;
  const char* barrier_file = nullptr;  // the __syncthreads the first arriving thread called
  int barrier_line = 0;
  std::string fault;                   // a divergent __syncthreads, a bad table pointer, ...
  void* scheduler_sp = nullptr;
  Fiber* running = nullptr;
  const std::function<void()>* body = nullptr;
  std::vector<unsigned char>* dynamic_shared = nullptr;
};

thread_local BlockRun* block_run = nullptr;

// Fiber stacks of this OS thread, reused by every block it runs; a guard page below each.
struct StackPool {
  std::vector<unsigned char*> stacks;
  ~StackPool() {
    for (auto* s : stacks) munmap(s - page(), kStackBytes + page());
  }
  static size_t page() { return static_cast<size_t>(sysconf(_SC_PAGESIZE)); }
  unsigned char* get(size_t i) {
    while (stacks.size() <= i) {
      void* m = mmap(nullptr, kStackBytes + page(), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (m == MAP_FAILED) throw std::runtime_error("cuda emulator: cannot map a fiber stack");
      mprotect(m, page(), PROT_NONE);
      stacks.push_back(static_cast<unsigned char*>(m) + page());
    }
    return stacks[i];
  }
};
thread_local StackPool stack_pool;

void yield_to_scheduler(Fiber& f) { ferry_emu_switch(&f.sp, block_run->scheduler_sp); }

void release_block_barrier(BlockRun& b) {
  for (auto& f : b.fibers)
    if (f.state == FiberState::at_block_barrier) f.state = FiberState::runnable;
  b.arrived = 0;
}

void release_warp_barrier(BlockRun& b, unsigned w) {
  const size_t lo = size_t{w} * kWarp, hi = std::min(b.fibers.size(), lo + kWarp);
  for (size_t i = lo; i < hi; ++i)
    if (b.fibers[i].state == FiberState::at_warp_barrier) b.fibers[i].state = FiberState::runnable;
  b.warps[w].arrived = 0;
}

}  // namespace
}  // namespace ferry_emu

extern "C" [[noreturn]] void ferry_emu_fiber_main(ferry_emu::Fiber* f) {
  using namespace ferry_emu;
  (*block_run->body)();
  BlockRun& b = *block_run;
  f->state = FiberState::done;
  --b.live;
  --b.warps[f->warp].live;
  // An ended thread no longer holds back the barriers of the others.
  if (b.arrived > 0 && b.arrived == b.live) release_block_barrier(b);
  WarpState& w = b.warps[f->warp];
  if (w.arrived > 0 && w.arrived == w.live) release_warp_barrier(b, f->warp);
  ferry_emu_switch(&f->sp, b.scheduler_sp);
  __builtin_unreachable();
}

namespace ferry_emu {

void sync_block(const char* file, int line) {
  BlockRun& b = *block_run;
  Fiber& f = *b.running;
  // Threads meeting at different __syncthreads calls: undefined behaviour in CUDA (a hang or a
  // silent mismatch on hardware), an error here.
  if (b.arrived == 0) {
    b.barrier_file = file;
    b.barrier_line = line;
  } else if ((line != b.barrier_line || std::strcmp(file, b.barrier_file) != 0) && b.fault.empty()) {
    b.fault = "divergent barrier: thread " + std::to_string(f.ts.thread_idx.x) + " reached a different __syncthreads than thread(s) already waiting";
  }
  if (++b.arrived == b.live) {
    release_block_barrier(b);
    return;  // the last to arrive goes on without a switch
  }
  f.state = FiberState::at_block_barrier;
  yield_to_scheduler(f);
}

void sync_warp() {
  BlockRun& b = *block_run;
  Fiber& f = *b.running;
  WarpState& w = b.warps[f.warp];
  if (++w.arrived == w.live) {
    release_warp_barrier(b, f.warp);
    return;
  }
  f.state = FiberState::at_warp_barrier;
  yield_to_scheduler(f);
}

void fail_block(const std::string& why) {
  if (block_run && block_run->fault.empty()) block_run->fault = why;
}

unsigned char* warp_exchange_slots() { return block_run->warps[block_run->running->warp].slots; }

void* dynamic_shared() { return block_run->dynamic_shared->data(); }

bool reverse_order() {
  static const bool r = [] {
    const char* v = std::getenv("FERRY_CUDA_EMU_ORDER");
    return v && std::strcmp(v, "reverse") == 0;
  }();
  return r;
}

void run_block(const LaunchShape& shape, uint3 block_idx, const std::function<void()>& body,
               std::vector<unsigned char>& shared) {
  const unsigned n = shape.block.x * shape.block.y * shape.block.z;
  BlockRun b;
  b.fibers.resize(n);
  b.warps.resize((n + kWarp - 1) / kWarp);
  b.live = n;
  b.body = &body;
  b.dynamic_shared = &shared;
  for (unsigned i = 0; i < n; ++i) {
    Fiber& f = b.fibers[i];
    f.ts.thread_idx = uint3{i % shape.block.x, (i / shape.block.x) % shape.block.y, i / (shape.block.x * shape.block.y)};
    f.ts.block_idx = block_idx;
    f.ts.block_dim = shape.block;
    f.ts.grid_dim = shape.grid;
    f.ts.lane = i % kWarp;
    f.warp = i / kWarp;
    ++b.warps[f.warp].live;
    // Initial frame, as ferry_emu_switch leaves it: control words, r15..r12, rbx, rbp, return.
    auto* top = reinterpret_cast<uint64_t*>(stack_pool.get(i) + kStackBytes);
    uint64_t* sp = top - 8;
    sp[0] = 0x1F80u | (uint64_t{0x037Fu} << 32);  // MXCSR default, x87 control word default
    sp[1] = 0;                                      // r15
    sp[2] = 0;                                      // r14
    sp[3] = 0;                                      // r13
    sp[4] = reinterpret_cast<uint64_t>(&f);         // r12: the trampoline's argument
    sp[5] = 0;                                      // rbx
    sp[6] = 0;                                      // rbp
    sp[7] = reinterpret_cast<uint64_t>(&ferry_emu_trampoline);
    f.sp = sp;
  }
  BlockRun* outer = block_run;
  const ThreadState* outer_current = current;
  block_run = &b;
  unsigned done = 0;
  while (done < n) {
    bool progressed = false;
    const bool reverse = reverse_order();
    for (unsigned k = 0; k < n; ++k) {
      Fiber& f = b.fibers[reverse ? n - 1 - k : k];
      if (f.state != FiberState::runnable) continue;
      b.running = &f;
      current = &f.ts;
      ferry_emu_switch(&b.scheduler_sp, f.sp);
      progressed = true;
      if (f.state == FiberState::done) ++done;
    }
    if (!b.fault.empty()) {
      block_run = outer;
      current = outer_current;
      throw std::runtime_error("block (" + std::to_string(block_idx.x) + "," + std::to_string(block_idx.y) + "," +
                               std::to_string(block_idx.z) + "): " + b.fault);
    }
    if (!progressed) {
      unsigned at_block = 0, at_warp = 0;
      for (auto& f : b.fibers) {
        at_block += f.state == FiberState::at_block_barrier;
        at_warp += f.state == FiberState::at_warp_barrier;
      }
      block_run = outer;
      current = outer_current;
      // The stacks of the stuck fibers are simply reused by the next block.
      throw std::runtime_error("deadlock in block (" + std::to_string(block_idx.x) + "," +
                               std::to_string(block_idx.y) + "," + std::to_string(block_idx.z) + "): " +
                               std::to_string(at_block) + " threads wait in __syncthreads, " +
                               std::to_string(at_warp) + " in a warp barrier, " + std::to_string(done) +
                               " ended — a barrier not reached by every live thread");
    }
  }
  block_run = outer;
  current = outer_current;
}

}  // namespace ferry_emu
