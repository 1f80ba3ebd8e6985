// The checks every memory access of a simulated thread goes through, and the block's shared
// memory (sim/README.md):
//  - shared memory: each block's arena, poisoned (0xff) and with a per-byte "written" shadow,
//    so a read of bytes no thread wrote is reported;
//  - global memory: an access outside every allocation the runtime made is reported, with the
//    nearest allocation;
//  - 16-byte accesses must be 16-byte aligned.
//  - shared memory's hazards between the block's threads (racecheck.cpp).
// The accesses reach these checks through the instrumentation's hooks (hooks.cpp). Outside a
// kernel's threads they return at once.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "sim/block.h"

namespace cutrain_sim {
namespace dev {

// A failed access: recorded with where in the kernel's code it was made (`at`, the return
// address of the check's hook, symbolized when the report is made: scheduler.cpp).
void fail_access(const void* at, cudaError_t e, const std::string& what,
                 const std::string& detail) {
  if (t_block->error == cudaSuccess) t_block->fail_at = at;
  fail_here(e, what, detail);
}

namespace {

// CUTRAIN_SIM_INTERLEAVE=p (0 to 1, default 0) or set_interleave(p): the chance that a thread
// makes way for the others before an access, as a threshold on the block's 64-bit generator.
uint64_t threshold_of(double p) {
  return p >= 1 ? ~uint64_t(0) : p > 0 ? uint64_t(p * 18446744073709551616.0) : 0;
}
std::atomic<uint64_t> g_interleave{[] {
  const char* v = std::getenv("CUTRAIN_SIM_INTERLEAVE");
  if (!v || !*v) return uint64_t(0);
  char* end = nullptr;
  const double p = std::strtod(v, &end);
  if (*end || !(p >= 0 && p <= 1)) {
    std::fprintf(stderr, "cutrain-sim: CUTRAIN_SIM_INTERLEAVE=%s is not a chance from 0 to 1: "
                         "threads switch only where they meet\n", v);
    return uint64_t(0);
  }
  return threshold_of(p);
}()};
uint64_t interleave_threshold() { return g_interleave.load(std::memory_order_relaxed); }

const SharedVar* var_at(const Block* b, size_t offset) {
  for (const SharedVar& v : b->vars)
    if (offset >= v.offset && offset < v.offset + v.bytes) return &v;
  return nullptr;
}

// An access of shared memory at `off` in the block's arena: it must lie in one variable (a
// static one, or the launch's dynamic bytes), and a read must find bytes some thread wrote.
void check_shared(Block* b, size_t off, size_t n, bool write, const void* at, bool atomic) {
  const char* rw = write ? "write" : "read";
  const bool dynamic = off >= kDynamicOffset;
  const SharedVar* v = dynamic ? nullptr : var_at(b, off);
  const size_t start = dynamic ? kDynamicOffset : v ? v->offset : 0;
  const size_t size = dynamic ? b->dynamic : v ? v->bytes : 0;
  const std::string what =
      dynamic ? "the dynamic shared memory (" + std::to_string(b->dynamic) +
                    " bytes: the launch's third argument)"
              : v ? std::string("__shared__ ") + v->site + " (" + std::to_string(v->bytes) +
                        " bytes)"
                  : std::string();
  if (!dynamic && !v) {
    // Past a variable's end, in the red zone after it (or past them all).
    const SharedVar* before = nullptr;
    for (const SharedVar& w : b->vars)
      if (w.offset <= off && (!before || w.offset > before->offset)) before = &w;
    fail_access(at, cudaErrorIllegalAddress, "invalid __shared__ " + std::string(rw),
              std::to_string(n) + " bytes at offset " + std::to_string(off) +
                  " of the block's static shared memory" +
                  (before ? " start " + std::to_string(off - before->offset - before->bytes) +
                                " bytes past the end of __shared__ " + before->site + " (" +
                                std::to_string(before->bytes) + " bytes)"
                          : std::string(" are in none of its variables")) +
                  " (" + std::to_string(b->declared) + " bytes declared)");
  }
  if (off + n > start + size)
    fail_access(at, cudaErrorIllegalAddress, "invalid __shared__ " + std::string(rw),
              std::to_string(n) + " bytes at byte " + std::to_string(off - start) + " of " +
                  what + " run past its end by " + std::to_string(off + n - start - size) +
                  " bytes");
  for (size_t i = 0; i < n; i++) {
    const unsigned char state = b->written[off + i];
    if (state == kInFlight)
      fail_access(at, cudaErrorLaunchFailure,
                  write ? "write of __shared__ memory that an asynchronous copy is delivering"
                        : "read of __shared__ memory that an asynchronous copy has not delivered",
                  std::to_string(n) + "-byte " + (write ? "write" : "read") + " at byte " +
                      std::to_string(off - start) + " of " + what + ", byte " +
                      std::to_string(off + i - start) +
                      " is the destination of a copy issued (__pipeline_memcpy_async, cp.async) "
                      "whose group no __pipeline_wait_prior (cp.async.wait_group) has waited "
                      "for");
    if (!write && state == kUnwritten)
      fail_access(at, cudaErrorLaunchFailure, "read of __shared__ memory that no thread wrote",
                  std::to_string(n) + "-byte read at byte " + std::to_string(off - start) +
                      " of " + what + ", byte " + std::to_string(off + i - start) +
                      " never written");
  }
  check_hazard(b, t_fiber, off, n, write || atomic, atomic, at, what, start);
  if (write) std::memset(&b->written[off], kWritten, n);
}

// Device memory's written shadow (initcheck's rule, sim.h's Allocation): a store marks its
// bytes, a load must find every byte marked (a copy of never-written bytes carries them as
// never written, so cloning a whole buffer is not a read of it; the kernel that reads the
// clone is reported).
void check_written(const Allocation& in, uintptr_t a, size_t n, bool write, const void* at) {
  if (!in.written) return;  // pinned host memory: exempt (sim.h says why)
  uint8_t* w = in.written + (a - in.base);
  if (write) {
    std::memset(w, 1, n);
    return;
  }
  for (size_t i = 0; i < n; i++)
    if (!w[i])
      fail_access(at, cudaErrorLaunchFailure, "read of device memory that was never written",
                std::to_string(n) + "-byte read at " + hex(a) + ", byte " +
                    std::to_string(a + i - in.base) + " of " + std::to_string(in.bytes) +
                    " bytes at " + hex(in.base) + " (device " + std::to_string(in.device) +
                    "): no kernel, memset or copy wrote it since it was allocated (or, in the "
                    "caching allocator's block, since its tensor was handed out)");
}

}  // namespace

void check_access(uintptr_t a, size_t n, bool write, const void* at, bool atomic) {
  Fiber* f = t_fiber;
  if (!f) return;  // not a simulated thread: host code of an instrumented file
  Block* b = t_block;
  // CUTRAIN_SIM_INTERLEAVE: before this access, another ready thread of the block may run (the
  // block's seeded generator decides), so that orders inside a barrier phase are tried too.
  const uint64_t interleave = interleave_threshold();
  if (interleave && b->rng() < interleave) {
    yield_to_scheduler();  // (still Ready: the scheduler resumes it in a later round)
    f = t_fiber;
  }
  const char* rw = write ? "write" : "read";
  if (n == 16 && a % 16 != 0)
    fail_access(at, cudaErrorMisalignedAddress, "misaligned 16-byte " + std::string(rw),
              "address " + hex(a) + " is not a multiple of 16");
  const uintptr_t arena = reinterpret_cast<uintptr_t>(b->arena);
  if (a >= arena && a < arena + kArenaBytes) {
    check_shared(b, a - arena, n, write, at, atomic);
    return;
  }
  const uintptr_t stack = reinterpret_cast<uintptr_t>(f->stack);
  if (a >= stack && a + n <= stack + kStackBytes) return;  // the thread's locals
  const uintptr_t record = reinterpret_cast<uintptr_t>(b->grid->record.get());
  if (!write && a >= record && a + n <= record + b->grid->record_bytes) return;
  const uintptr_t builtins = reinterpret_cast<uintptr_t>(&t_builtins);
  if (!write && a >= builtins && a + n <= builtins + sizeof t_builtins) return;
  // The allocations (or pool blocks' live tensors) found last by this host thread (a kernel
  // reads and writes a few arrays in turn), valid while nothing was freed or given back to a
  // pool since: most accesses end here, without the registry's lock. Only what this grid's
  // device may touch is kept there.
  constexpr int kRecent = 8;
  thread_local Allocation recent[kRecent];
  thread_local int next_slot = 0;
  thread_local uint64_t recent_generation = ~uint64_t(0);
  thread_local int recent_device = -1;
  const uint64_t generation = allocation_generation();
  const int device = b->grid->device;
  if (generation != recent_generation || device != recent_device) {
    for (Allocation& r : recent) r = Allocation{};
    recent_generation = generation;
    recent_device = device;
  }
  for (const Allocation& r : recent)
    if (a >= r.base && a + n <= r.base + r.bytes) return check_written(r, a, n, write, at);
  const Lookup l = look_up(a, n);
  if (l.kind == Lookup::inside) {
    const Allocation& in = l.in;
    // Another device's memory: only with peer access enabled from this one (pinned host
    // memory every device may touch).
    if (in.device >= 0 && !peer_enabled(device, in.device))
      fail_access(at, cudaErrorIllegalAddress, "invalid __global__ " + std::string(rw),
                std::to_string(n) + " bytes at " + hex(a) + " are device " +
                    std::to_string(in.device) + "'s memory, and this kernel runs on device " +
                    std::to_string(device) + " without peer access to it "
                    "(cudaDeviceEnablePeerAccess)");
    recent[next_slot] = in;
    next_slot = (next_slot + 1) % kRecent;
    return check_written(in, a, n, write, at);
  }
  // (A pool block's memory outside its tensors, or a tensor given back: the caching allocator's
  // annotations, kernels/nvtx_memory.h, say which bytes are live.)
  const std::string detail = std::to_string(n) + " bytes at " + hex(a) + " " +
                             describe_miss(l, a, n);
  fail_access(at, cudaErrorIllegalAddress, "invalid __global__ " + std::string(rw), detail);
}

}  // namespace dev

using namespace dev;

// ---- what the kernels call -------------------------------------------------------------------
__attribute__((noinline)) void check_memory(const void* p, size_t bytes, bool write) {
  check_access(reinterpret_cast<uintptr_t>(p), bytes, write, __builtin_return_address(0), false);
}

void set_interleave(double chance) {
  g_interleave = threshold_of(std::min(std::max(chance, 0.0), 1.0));
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
  if (b->declared + bytes + b->dynamic > kSharedPerBlock)
    fail_here(cudaErrorInvalidValue, "shared memory above the device limit",
              std::string("__shared__ ") + site + " needs " + std::to_string(bytes) +
                  " bytes more than the " + std::to_string(b->declared) +
                  " declared; a block may use " + std::to_string(kSharedPerBlock) + " (" +
                  std::to_string(b->dynamic) + " of them dynamic)");
  b->vars.push_back({site, &type, offset, bytes});
  b->used = offset + bytes + kSharedRedZone;
  b->declared += bytes;
  return b->arena + offset;
}

void* shared_dynamic_bytes() {
  if (!t_fiber) {
    std::fprintf(stderr, "cutrain-sim: extern __shared__ used outside a kernel\n");
    std::abort();
  }
  return t_block->arena + kDynamicOffset;
}

}  // namespace cutrain_sim
