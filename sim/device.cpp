// The simulated device: a grid's blocks one after another in a seeded random order, each
// block's threads as fibers (Boost.Context's fcontext) that run in a seeded random order between the
// points where they must meet (barriers, warp collectives), and the checks a kernel's memory
// accesses go through (sim/README.md):
//  - shared memory: each block's arena, poisoned (0xff) and with a per-byte "written" shadow,
//    so a read of bytes no thread wrote is reported;
//  - global memory: an access outside every allocation the runtime made is reported, with the
//    nearest allocation;
//  - 16-byte accesses must be 16-byte aligned.
// The accesses reach these checks because the SIM build compiles the kernels' translation
// units with GCC's -fsanitize=kernel-address in its outline form: every load and store of
// instrumented code calls __asan_{load,store}N_noabort, which this file defines (a kernel
// sanitizer's hooks; no ASan runtime is linked). Outside a kernel's threads they return at once.
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <random>
#include <sstream>
#include <vector>

#include <boost/context/detail/fcontext.hpp>

#include "sim/sim.h"
#include "cutrain_sim.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#endif

namespace cutrain_sim {

thread_local Builtins t_builtins;

namespace {

constexpr size_t kStackBytes = 256 * 1024;  // per simulated thread (WMMA tiles live there)
constexpr size_t kArenaBytes = kSharedOptin;

enum class State { Ready, AtBarrier, AtWarp, Exited };

// A fiber switch is Boost.Context's jump_fcontext: it saves the callee-saved registers on the
// stack it leaves and restores those of the stack it enters, with no system call (glibc's
// swapcontext also saves and restores the signal mask: a system call per switch, which made
// it half of the simulator's time). jump_fcontext returns, in the context it resumes, the
// context it left: that is how the scheduler and a thread learn where to come back to.
using boost::context::detail::fcontext_t;
using boost::context::detail::jump_fcontext;
using boost::context::detail::make_fcontext;
using boost::context::detail::transfer_t;

struct Fiber {
  fcontext_t ctx = nullptr;  // where the thread resumes (while it is not running)
  char* stack = nullptr;
  uint3 tid{};
  int linear = 0;
  State state = State::Ready;
  // where it waits, and what it brings
  const char* site = "";  // "file:line" of the call
  Collective kind = Collective::Barrier;
  const char* what = "";
  unsigned mask = 0;
  uint64_t bits = 0, result = 0;
  int arg = 0, width = 32, pred = 0;
};

struct SharedVar {
  const char* site;
  const std::type_info* type;
  size_t offset, bytes;
};

// The block running on this host thread. Its storage (stacks, arena, shadow) is reused by the
// next block of the thread: allocated once per host thread, never static.
struct Block {
  const Grid* grid = nullptr;
  uint3 idx{};
  std::vector<Fiber> threads;
  fcontext_t scheduler = nullptr;  // where the running thread returns to
  std::mt19937_64 rng;
  // shared memory: [0, dynamic) the launch's dynamic bytes, then the static variables
  unsigned char* arena = nullptr;
  std::vector<unsigned char> written;  // per byte: has any thread of the block written it?
  size_t used = 0, dynamic = 0;
  std::vector<SharedVar> vars;
  // the stacks of the threads, one mapping
  char* stacks = nullptr;
  size_t stack_count = 0;
  // the first failure
  cudaError_t error = cudaSuccess;
  std::string report;
  // CUTRAIN_SIM_BREAK names a thread of this grid: it stops there (fiber_main)
  bool breaks = false;
  unsigned long break_block = 0, break_thread = 0;
};

thread_local Block* t_block = nullptr;  // the block this host thread runs, if any
thread_local Fiber* t_fiber = nullptr;  // the simulated thread running now (null: scheduler)

std::string dim_str(uint3 d) {
  std::ostringstream s;
  s << "(" << d.x << "," << d.y << "," << d.z << ")";
  return s.str();
}
std::string site_str(const char* site) { return site; }
bool same_site(const char* a, const char* b) { return a == b || std::strcmp(a, b) == 0; }

// Records the block's first failure: what, and where in the grid.
void record(Block* b, cudaError_t e, const std::string& what, const Fiber* who,
            const std::string& detail) {
  if (b->error != cudaSuccess) return;
  b->error = e;
  std::ostringstream s;
  s << "cutrain-sim: " << what << "\n    in kernel " << b->grid->kernel << ", block "
    << dim_str(b->idx);
  if (who) s << ", thread " << dim_str(who->tid);
  s << "\n";
  if (!detail.empty()) s << "    " << detail << "\n";
  b->report = s.str();
}

// ---- fibers ----------------------------------------------------------------------------------
#if defined(__SANITIZE_ADDRESS__)
// AddressSanitizer must know which stack is live across a switch.
thread_local void* t_fake_stack = nullptr;
void start_switch(const void* bottom, size_t size) {
  __sanitizer_start_switch_fiber(&t_fake_stack, bottom, size);
}
void finish_switch() { __sanitizer_finish_switch_fiber(t_fake_stack, nullptr, nullptr); }
#else
void start_switch(const void*, size_t) {}
void finish_switch() {}
#endif

// From a simulated thread back to its block's scheduler.
void yield_to_scheduler() {
  Block* b = t_block;
  t_fiber = nullptr;
  start_switch(nullptr, 0);  // (the scheduler's stack: ASan knows it from the first switch)
  const transfer_t back = jump_fcontext(b->scheduler, nullptr);
  finish_switch();
  b->scheduler = back.fctx;
}

// A failure inside a simulated thread: recorded, and the thread never runs again.
[[noreturn]] void fail_here(cudaError_t e, const std::string& what, const std::string& detail) {
  record(t_block, e, what, t_fiber, detail);
  yield_to_scheduler();
  std::abort();  // never resumed
}

// ---- CUTRAIN_SIM_BREAK (sim/include/cutrain_sim.h) ------------------------------------------
struct BreakAt {
  bool on = false;
  std::string kernel;  // a part of the kernel's name; "" matches every kernel
  unsigned long block = 0, thread = 0;
};
std::mutex g_break_mu;
BreakAt g_break;
std::atomic<bool> g_break_read{false};
std::atomic<long> g_break_count{0};

// "[KERNEL:]BLOCK,THREAD"; false when it is not that.
bool parse_break(const std::string& spec, BreakAt* at) {
  const size_t colon = spec.rfind(':');
  const std::string where = colon == std::string::npos ? spec : spec.substr(colon + 1);
  unsigned long block = 0, thread = 0;
  char end = 0;
  if (std::sscanf(where.c_str(), "%lu,%lu%c", &block, &thread, &end) != 2) return false;
  at->on = true;
  at->kernel = colon == std::string::npos ? "" : spec.substr(0, colon);
  at->block = block, at->thread = thread;
  return true;
}

BreakAt break_at() {
  std::lock_guard<std::mutex> lock(g_break_mu);
  if (!g_break_read.exchange(true)) {
    const char* v = std::getenv("CUTRAIN_SIM_BREAK");
    if (v && *v && !parse_break(v, &g_break))
      std::fprintf(stderr,
                   "cutrain-sim: CUTRAIN_SIM_BREAK=%s is not [KERNEL:]BLOCK,THREAD (linear "
                   "indices, such as 3,17 or normalize:3,17): no thread stops\n",
                   v);
  }
  return g_break;
}

void fiber_main(transfer_t from) {
  finish_switch();
  Block* b = t_block;
  b->scheduler = from.fctx;
  if (b->breaks) {
    const Grid& g = *b->grid;
    const unsigned long block = b->idx.x + g.grid.x * (b->idx.y + size_t(g.grid.y) * b->idx.z);
    if (block == b->break_block && unsigned(t_fiber->linear) == b->break_thread) {
      g_break_count++;
      cutrain_sim_break(g.kernel.c_str(), unsigned(block), unsigned(t_fiber->linear));
    }
  }
  b->grid->run(b->grid->record.get());
  t_fiber->state = State::Exited;
  yield_to_scheduler();
  std::abort();  // an exited thread is never resumed
}

void resume(Fiber* f) {
  t_builtins.thread_idx = f->tid;
  t_fiber = f;
  start_switch(f->stack, kStackBytes);
  const transfer_t back = jump_fcontext(f->ctx, nullptr);
  finish_switch();
  f->ctx = back.fctx;
  t_fiber = nullptr;
}

// ---- the meeting points ----------------------------------------------------------------------
// The lanes of warp w of the block that wait at a warp collective: completes every group
// whose mask's lanes have all arrived. Returns whether one completed.
bool complete_warps(Block* b) {
  bool any = false;
  const int n = int(b->threads.size());
  for (int w0 = 0; w0 < n; w0 += 32) {
    const int lanes = std::min(32, n - w0);
    for (int l = 0; l < lanes; l++) {
      Fiber& f = b->threads[size_t(w0 + l)];
      if (f.state != State::AtWarp) continue;
      bool all = true;
      for (int m = 0; m < lanes; m++)
        if ((f.mask >> m & 1) && (b->threads[size_t(w0 + m)].state != State::AtWarp ||
                                   b->threads[size_t(w0 + m)].mask != f.mask))
          all = false;
      if (!all) continue;
      // Every lane of the mask is here: they must be at the same call.
      for (int m = 0; m < lanes; m++) {
        const Fiber& g = b->threads[size_t(w0 + m)];
        if ((f.mask >> m & 1) && (!same_site(g.site, f.site) || g.kind != f.kind)) {
          record(b, cudaErrorLaunchFailure, "warp collective: lanes of one mask do not meet",
                 &g,
                 "lane " + std::to_string(l) + " is at " + f.what + " (" + site_str(f.site) +
                     "), lane " + std::to_string(m) + " at " + g.what + " (" +
                     site_str(g.site) + ")");
          return false;
        }
      }
      for (int m = 0; m < lanes; m++) {
        Fiber& g = b->threads[size_t(w0 + m)];
        if (!(f.mask >> m & 1)) continue;
        const int seg = m / g.width * g.width;  // the lane's segment of `width` lanes
        int src = m;
        switch (g.kind) {
          case Collective::ShflIdx: src = seg + (g.arg % g.width + g.width) % g.width; break;
          case Collective::ShflUp: src = m - g.arg >= seg ? m - g.arg : m; break;
          case Collective::ShflDown: src = m + g.arg < seg + g.width ? m + g.arg : m; break;
          case Collective::ShflXor: src = (m ^ g.arg) < seg + g.width ? (m ^ g.arg) : m; break;
          default: break;
        }
        if (src >= lanes || !(f.mask >> src & 1)) {
          record(b, cudaErrorLaunchFailure,
                 std::string(g.what) + " reads a lane that is not in its mask", &g,
                 "lane " + std::to_string(m) + " reads lane " + std::to_string(src) +
                     ", mask 0x" + [&] {
                       char h[16];
                       std::snprintf(h, sizeof h, "%08x", f.mask);
                       return std::string(h);
                     }() + " (its value is undefined on a GPU)");
          return false;
        }
        g.result = b->threads[size_t(w0 + src)].bits;
      }
      for (int m = 0; m < lanes; m++)
        if (f.mask >> m & 1) b->threads[size_t(w0 + m)].state = State::Ready;
      any = true;
    }
  }
  return any;
}

// No thread can run: either the whole block is at one barrier (it completes), or the block
// is stuck, which on a GPU is a hang or undefined behaviour: reported.
void at_standstill(Block* b, bool* done) {
  *done = false;
  const Fiber* exited = nullptr;
  const Fiber* barrier = nullptr;
  const Fiber* warp = nullptr;
  int live = 0;
  for (const Fiber& f : b->threads) {
    if (f.state == State::Exited) {
      if (!exited) exited = &f;
      continue;
    }
    live++;
    if (f.state == State::AtBarrier && !barrier) barrier = &f;
    if (f.state == State::AtWarp && !warp) warp = &f;
  }
  if (live == 0) {
    *done = true;
    return;
  }
  if (warp) {
    // Find a lane of its mask that is not there.
    const int w0 = warp->linear / 32 * 32;
    for (int m = 0; m < 32; m++) {
      if (!(warp->mask >> m & 1)) continue;
      const Fiber& g = b->threads[size_t(w0 + m)];
      if (g.state == State::AtWarp && g.mask == warp->mask) continue;
      const std::string where = g.state == State::Exited      ? "has exited"
                                : g.state == State::AtBarrier ? "waits at __syncthreads"
                                                              : std::string("waits at ") +
                                                                    g.what + " with another mask";
      record(b, cudaErrorLaunchFailure,
             std::string(warp->what) + ": a lane of the mask never arrives", warp,
             "lane " + std::to_string(m) + " of the mask " + where +
                 " (on a GPU: a hang or undefined values)");
      return;
    }
  }
  // Everyone live is at a barrier.
  for (const Fiber& f : b->threads)
    if (f.state == State::AtBarrier && !same_site(f.site, barrier->site)) {
      record(b, cudaErrorLaunchFailure, "divergent barrier: threads wait at different barriers",
             &f,
             "this thread waits at " + site_str(f.site) + ", thread " + dim_str(barrier->tid) +
                 " at " + site_str(barrier->site));
      return;
    }
  if (exited) {
    record(b, cudaErrorLaunchFailure,
           "divergent barrier: a thread exited while others wait at __syncthreads", exited,
           std::to_string(live) + " threads wait at " + site_str(barrier->site));
    return;
  }
  int count = 0;
  for (const Fiber& f : b->threads) count += f.pred;
  for (Fiber& f : b->threads) {
    f.result = uint64_t(count);
    f.state = State::Ready;
  }
}

void run_block(Block* b) {
  const Grid& g = *b->grid;
  const size_t n = size_t(g.block.x) * g.block.y * g.block.z;
  if (b->stack_count < n) {
    if (b->stacks) munmap(b->stacks, b->stack_count * kStackBytes);
    b->stacks = static_cast<char*>(mmap(nullptr, n * kStackBytes, PROT_READ | PROT_WRITE,
                                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0));
    if (b->stacks == MAP_FAILED) {
      std::fprintf(stderr, "cutrain-sim: cannot map %zu thread stacks\n", n);
      std::abort();
    }
    b->stack_count = n;
  }
  // Shared memory: the previous block's bytes poisoned again and marked unwritten.
  std::memset(b->arena, 0xff, b->used);
  std::fill(b->written.begin(), b->written.begin() + long(b->used), 0);
  b->dynamic = (g.dynamic_smem + 15) / 16 * 16;
  b->used = b->dynamic;
  b->vars.clear();

  b->threads.assign(n, Fiber{});
  for (size_t i = 0; i < n; i++) {
    Fiber& f = b->threads[i];
    f.linear = int(i);
    f.tid = {unsigned(i % g.block.x), unsigned(i / g.block.x % g.block.y),
             unsigned(i / (size_t(g.block.x) * g.block.y))};
    f.stack = b->stacks + i * kStackBytes;
    f.ctx = make_fcontext(f.stack + kStackBytes, kStackBytes, fiber_main);  // the stack's top
  }
  t_builtins.block_idx = b->idx;
  std::vector<Fiber*> ready;
  for (;;) {
    ready.clear();
    for (Fiber& f : b->threads)
      if (f.state == State::Ready) ready.push_back(&f);
    if (ready.empty()) {
      if (complete_warps(b)) continue;
      if (b->error != cudaSuccess) return;
      bool done = false;
      at_standstill(b, &done);
      if (done || b->error != cudaSuccess) return;
      continue;
    }
    std::shuffle(ready.begin(), ready.end(), b->rng);
    for (Fiber* f : ready) {
      resume(f);
      if (b->error != cudaSuccess) return;
    }
  }
}

Block* this_threads_block() {
  thread_local std::unique_ptr<Block> block;
  if (!block) {
    block = std::make_unique<Block>();
    block->arena = static_cast<unsigned char*>(std::aligned_alloc(128, kArenaBytes));
    block->written.assign(kArenaBytes, 0);
    std::memset(block->arena, 0xff, kArenaBytes);
  }
  return block.get();
}

// ---- memory checks ---------------------------------------------------------------------------
std::string hex(uintptr_t a) {
  char s[32];
  std::snprintf(s, sizeof s, "0x%lx", static_cast<unsigned long>(a));
  return s;
}

const SharedVar* var_at(const Block* b, size_t offset) {
  for (const SharedVar& v : b->vars)
    if (offset >= v.offset && offset < v.offset + v.bytes) return &v;
  return nullptr;
}

void check_access(uintptr_t a, size_t n, bool write) {
  Fiber* f = t_fiber;
  if (!f) return;  // not a simulated thread: host code of an instrumented file
  Block* b = t_block;
  const char* rw = write ? "write" : "read";
  if (n == 16 && a % 16 != 0)
    fail_here(cudaErrorMisalignedAddress, "misaligned 16-byte " + std::string(rw),
              "address " + hex(a) + " is not a multiple of 16");
  const uintptr_t arena = reinterpret_cast<uintptr_t>(b->arena);
  if (a >= arena && a < arena + kArenaBytes) {
    const size_t off = a - arena;
    if (off + n > b->used)
      fail_here(cudaErrorIllegalAddress, "invalid __shared__ " + std::string(rw),
                std::to_string(n) + " bytes at offset " + std::to_string(off) +
                    ", beyond the block's " + std::to_string(b->used) + " bytes");
    if (write) {
      std::memset(&b->written[off], 1, n);
      return;
    }
    for (size_t i = 0; i < n; i++)
      if (!b->written[off + i]) {
        const SharedVar* v = var_at(b, off + i);
        fail_here(cudaErrorLaunchFailure, "read of __shared__ memory that no thread wrote",
                  std::to_string(n) + "-byte read at offset " + std::to_string(off) +
                      (v ? std::string(" (") + v->site + ", byte " +
                               std::to_string(off + i - v->offset) + ")"
                         : std::string(" (dynamic shared memory, byte ") +
                               std::to_string(off + i) + ")"));
      }
    return;
  }
  const uintptr_t stack = reinterpret_cast<uintptr_t>(f->stack);
  if (a >= stack && a + n <= stack + kStackBytes) return;  // the thread's locals
  const uintptr_t record = reinterpret_cast<uintptr_t>(b->grid->record.get());
  if (!write && a >= record && a + n <= record + b->grid->record_bytes) return;
  const uintptr_t builtins = reinterpret_cast<uintptr_t>(&t_builtins);
  if (!write && a >= builtins && a + n <= builtins + sizeof t_builtins) return;
  // The allocations found last by this host thread (a kernel reads and writes a few arrays in
  // turn), valid while no allocation was freed since: most accesses end here, without the
  // runtime's lock.
  constexpr int kRecent = 8;
  thread_local Allocation recent[kRecent];
  thread_local int next_slot = 0;
  thread_local uint64_t recent_generation = ~uint64_t(0);
  const uint64_t generation = allocation_generation();
  if (generation != recent_generation) {
    for (Allocation& r : recent) r = Allocation{};
    recent_generation = generation;
  }
  for (const Allocation& r : recent)
    if (a >= r.base && a + n <= r.base + r.bytes) return;
  Allocation in, near;
  if (find_allocation(a, n, &in, &near)) {
    recent[next_slot] = in;
    next_slot = (next_slot + 1) % kRecent;
    return;
  }
  std::string detail = std::to_string(n) + " bytes at " + hex(a) + " are in no allocation";
  if (near.bytes)
    detail += "; the nearest before it: " + std::to_string(near.bytes) + " bytes at " +
              hex(near.base) + " (" +
              (near.device >= 0 ? "device " + std::to_string(near.device) : "pinned host") +
              "), which it passes by " + std::to_string(a + n - (near.base + near.bytes)) +
              " bytes";
  fail_here(cudaErrorIllegalAddress, "invalid __global__ " + std::string(rw), detail);
}

}  // namespace

void set_break(const std::string& spec) {
  break_at();  // the environment read first, so that it cannot override this later
  std::lock_guard<std::mutex> lock(g_break_mu);
  g_break = BreakAt{};
  if (!spec.empty() && !parse_break(spec, &g_break))
    std::fprintf(stderr, "cutrain-sim: set_break(\"%s\"): not [KERNEL:]BLOCK,THREAD\n",
                 spec.c_str());
}
long break_count() { return g_break_count.load(); }

// ---- what the kernels call -------------------------------------------------------------------
void check_memory(const void* p, size_t bytes, bool write) {
  check_access(reinterpret_cast<uintptr_t>(p), bytes, write);
}

int block_barrier(int pred, const char* site) {
  Fiber* f = t_fiber;
  if (!f) {
    std::fprintf(stderr, "cutrain-sim: __syncthreads called outside a kernel\n");
    std::abort();
  }
  f->state = State::AtBarrier;
  f->site = site;
  f->kind = Collective::Barrier;
  f->pred = pred;
  yield_to_scheduler();
  return int(f->result);
}

uint64_t warp_collective(Collective kind, unsigned mask, uint64_t bits, int arg, int width,
                         const char* site, const char* what) {
  Fiber* f = t_fiber;
  Block* b = t_block;
  if (!f) {
    std::fprintf(stderr, "cutrain-sim: %s called outside a kernel\n", what);
    std::abort();
  }
  const int lane = f->linear % 32, w0 = f->linear / 32 * 32;
  const int lanes = std::min(32, int(b->threads.size()) - w0);
  char m[16];
  std::snprintf(m, sizeof m, "0x%08x", mask);
  if (!(mask >> lane & 1))
    fail_here(cudaErrorLaunchFailure, std::string(what) + ": the mask does not name its caller",
              std::string("lane ") + std::to_string(lane) + ", mask " + m);
  if (lanes < 32 && (mask >> lanes) != 0)
    fail_here(cudaErrorLaunchFailure, std::string(what) + ": the mask names absent lanes",
              std::string("mask ") + m + ", but this warp has " + std::to_string(lanes) +
                  " lanes (a block of " + std::to_string(b->threads.size()) + " threads)");
  if (width < 1 || width > 32 || (width & (width - 1)) != 0)
    fail_here(cudaErrorLaunchFailure, std::string(what) + ": width is not a power of 2 <= 32",
              "width " + std::to_string(width));
  f->state = State::AtWarp;
  f->kind = kind;
  f->mask = mask;
  f->bits = bits;
  f->arg = arg;
  f->width = width;
  f->site = site;
  f->what = what;
  yield_to_scheduler();
  return f->result;
}

void* shared_static_bytes(const char* site, const std::type_info& type, size_t bytes,
                          size_t align) {
  Block* b = t_block;
  if (!t_fiber) {
    std::fprintf(stderr, "cutrain-sim: __shared__ %s declared outside a kernel\n", site);
    std::abort();
  }
  for (const SharedVar& v : b->vars)
    if (v.site == site && *v.type == type) return b->arena + v.offset;
  const size_t a = std::max<size_t>(align, 16);
  const size_t offset = (b->used + a - 1) / a * a;
  if (offset + bytes > kSharedPerBlock)
    fail_here(cudaErrorInvalidValue, "shared memory above the device limit",
              std::string("__shared__ ") + site + " needs " + std::to_string(bytes) +
                  " bytes at offset " + std::to_string(offset) + "; a block may use " +
                  std::to_string(kSharedPerBlock) + " (" + std::to_string(b->dynamic) +
                  " of them dynamic)");
  b->vars.push_back({site, &type, offset, bytes});
  b->used = offset + bytes;
  return b->arena + offset;
}

void* shared_dynamic_bytes() { return t_block->arena; }

cudaError_t run_grid(const Grid& g, uint64_t seed, std::string* report) {
  Block* b = this_threads_block();
  b->grid = &g;
  b->error = cudaSuccess;
  b->report.clear();
  const BreakAt at = break_at();
  b->breaks = at.on && g.kernel.find(at.kernel) != std::string::npos;
  b->break_block = at.block, b->break_thread = at.thread;
  t_block = b;
  t_builtins.block_dim = g.block;
  t_builtins.grid_dim = g.grid;
  const size_t blocks = size_t(g.grid.x) * g.grid.y * g.grid.z;
  std::vector<size_t> order(blocks);
  for (size_t i = 0; i < blocks; i++) order[i] = i;
  std::mt19937_64 rng(seed);
  std::shuffle(order.begin(), order.end(), rng);
  for (size_t i : order) {
    b->idx = {unsigned(i % g.grid.x), unsigned(i / g.grid.x % g.grid.y),
              unsigned(i / (size_t(g.grid.x) * g.grid.y))};
    b->rng.seed(rng());
    run_block(b);
    if (b->error != cudaSuccess) break;
  }
  t_block = nullptr;
  b->grid = nullptr;
  b->threads.clear();
  if (b->error != cudaSuccess) *report = b->report;
  return b->error;
}

}  // namespace cutrain_sim

// ---- the instrumentation's hooks (see the top of this file) ----------------------------------
extern "C" {
#define CUTRAIN_SIM_HOOKS(n)                                                                  \
  void __asan_load##n##_noabort(uintptr_t a) { cutrain_sim::check_access(a, n, false); }     \
  void __asan_store##n##_noabort(uintptr_t a) { cutrain_sim::check_access(a, n, true); }
CUTRAIN_SIM_HOOKS(1)
CUTRAIN_SIM_HOOKS(2)
CUTRAIN_SIM_HOOKS(4)
CUTRAIN_SIM_HOOKS(8)
CUTRAIN_SIM_HOOKS(16)
#undef CUTRAIN_SIM_HOOKS
void __asan_loadN_noabort(uintptr_t a, size_t n) { cutrain_sim::check_access(a, n, false); }
void __asan_storeN_noabort(uintptr_t a, size_t n) { cutrain_sim::check_access(a, n, true); }
__attribute__((noinline)) void cutrain_sim_break(const char* kernel, unsigned block,
                                                 unsigned thread) {
  asm volatile("" : : "r"(kernel), "r"(block), "r"(thread) : "memory");  // kept, not inlined
}
void __asan_handle_no_return() {}
void __asan_before_dynamic_init(const char*) {}
void __asan_after_dynamic_init() {}
}
