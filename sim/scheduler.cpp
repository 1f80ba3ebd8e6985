// The simulated device's scheduler: a grid's blocks one after another in a seeded random
// order, each block's threads as fibers (Boost.Context's fcontext) that run in a seeded random
// order between the points where they must meet (collectives.cpp), and CUTRAIN_SIM_BREAK's
// stop at one thread (sim/README.md).
#include <dlfcn.h>
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <sstream>

#include "sim/block.h"
#include "cutrain_sim.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#endif

namespace cutrain_sim {

thread_local Builtins t_builtins;

namespace dev {

thread_local Block* t_block = nullptr;
thread_local Fiber* t_fiber = nullptr;

std::string dim_str(uint3 d) {
  std::ostringstream s;
  s << "(" << d.x << "," << d.y << "," << d.z << ")";
  return s.str();
}
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

std::string hex(uintptr_t a) {
  char s[32];
  std::snprintf(s, sizeof s, "0x%lx", static_cast<unsigned long>(a));
  return s;
}

namespace {
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

}  // namespace

void yield_to_scheduler() {
  Block* b = t_block;
  t_fiber = nullptr;
  start_switch(nullptr, 0);  // (the scheduler's stack: ASan knows it from the first switch)
  const transfer_t back = jump_fcontext(b->scheduler, nullptr);
  finish_switch();
  b->scheduler = back.fctx;
}

[[noreturn]] void fail_here(cudaError_t e, const std::string& what, const std::string& detail) {
  record(t_block, e, what, t_fiber, detail);
  yield_to_scheduler();
  std::abort();  // never resumed
}

namespace {

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
  std::memset(b->arena + kDynamicOffset, 0xff, b->dynamic);
  std::fill(b->written.begin() + long(kDynamicOffset),
            b->written.begin() + long(kDynamicOffset + b->dynamic), 0);
  b->dynamic = g.dynamic_smem;
  b->used = 0;
  b->declared = 0;
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
  hazards_reset(b);
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

}  // namespace
}  // namespace dev

using namespace dev;

void set_break(const std::string& spec) {
  break_at();  // the environment read first, so that it cannot override this later
  std::lock_guard<std::mutex> lock(g_break_mu);
  g_break = BreakAt{};
  if (!spec.empty() && !parse_break(spec, &g_break))
    std::fprintf(stderr, "cutrain-sim: set_break(\"%s\"): not [KERNEL:]BLOCK,THREAD\n",
                 spec.c_str());
}
long break_count() { return g_break_count.load(); }

namespace {
// "file:line (function)" of the code at `at` (a return address into a kernel), read from the
// binary's line tables by addr2line; "" when that cannot be told. Only when a report is made.
std::string code_line(const void* at) {
  Dl_info info;
  if (!at || !dladdr(at, &info) || !info.dli_fname) return "";
  // The call before the return address; a position-independent binary's addresses are
  // offsets from where it was loaded.
  const uintptr_t pc = reinterpret_cast<uintptr_t>(at) - 1;
  for (const uintptr_t addr : {pc - reinterpret_cast<uintptr_t>(info.dli_fbase), pc}) {
    // -i: an access inlined into its caller is named by the innermost function (the kernel's
    // or a device function's line, not the simulator's run_thread it was inlined into).
    char cmd[1024];
    std::snprintf(cmd, sizeof cmd, "addr2line -C -f -i -e '%s' 0x%lx 2>/dev/null", info.dli_fname,
                  static_cast<unsigned long>(addr));
    FILE* p = popen(cmd, "r");
    if (!p) return "";
    std::string out;
    char chunk[4096];
    for (size_t n; (n = std::fread(chunk, 1, sizeof chunk, p)) > 0;) out.append(chunk, n);
    pclose(p);
    const size_t nl = out.find('\n');
    if (nl == std::string::npos) continue;
    std::string f = out.substr(0, nl);
    std::string w = out.substr(nl + 1, out.find('\n', nl + 1) - nl - 1);
    const size_t d = w.find(" (discriminator");  // which of a line's blocks: not the reader's
    if (d != std::string::npos) w.erase(d);
    if (f.size() > 160) f = f.substr(0, 157) + "...";  // a lambda's name in a template: pages
    if (!w.empty() && w.rfind("??", 0) != 0) return w + " (" + f + ")";
  }
  return "";
}
}  // namespace

cudaError_t run_grid(const Grid& g, uint64_t seed, std::string* report) {
  Block* b = this_threads_block();
  b->grid = &g;
  b->error = cudaSuccess;
  b->report.clear();
  b->fail_at = nullptr;
  b->other_at = nullptr;
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
  if (b->error != cudaSuccess) {
    *report = b->report;
    const std::string line = code_line(b->fail_at);
    if (!line.empty()) *report += "    at " + line + "\n";
    const std::string other = code_line(b->other_at);
    if (!other.empty()) *report += "    and " + b->other_who + " at " + other + "\n";
  }
  return b->error;
}

}  // namespace cutrain_sim

extern "C" __attribute__((noinline)) void cutrain_sim_break(const char* kernel, unsigned block,
                                                            unsigned thread) {
  asm volatile("" : : "r"(kernel), "r"(block), "r"(thread) : "memory");  // kept, not inlined
}
