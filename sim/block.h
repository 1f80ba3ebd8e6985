// The simulated device's block (internal to sim/): a block's threads as fibers, its shared
// memory arena, and the failure it records. scheduler.cpp runs the blocks and switches the
// fibers; collectives.cpp is where they meet (barriers, warp collectives); access.cpp checks
// every memory access a kernel makes and lays out its shared memory.
#pragma once
#include <random>
#include <string>
#include <vector>

#include <boost/context/detail/fcontext.hpp>

#include "sim/sim.h"

namespace cutrain_sim {
namespace dev {

constexpr size_t kStackBytes = 256 * 1024;  // per simulated thread (WMMA tiles live there)
constexpr size_t kArenaBytes = 2 * kSharedOptin;
constexpr size_t kDynamicOffset = kSharedOptin;  // where a block's dynamic shared memory starts
// The states of a byte of shared memory: never written by the block, written, or the
// destination of an asynchronous copy not yet delivered (pipeline.cpp).
constexpr unsigned char kUnwritten = 0, kWritten = 1, kInFlight = 2;
// Bytes left free after each static __shared__ variable, so that a small overrun of one lands
// in none instead of in its neighbour (they do not count against the block's limit).
constexpr size_t kSharedRedZone = 64;

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

// An asynchronous copy in flight (pipeline.cpp): issued, not yet delivered.
struct AsyncCopy {
  uintptr_t dst;
  size_t bytes, zfill;  // the last zfill bytes of the destination are zeros, not copied
  unsigned char data[16];  // the source's bytes, read when it was issued
  uint32_t group;       // the commit group it belongs to
  const void* at;       // where it was issued
};

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
  // its asynchronous copies in flight, and the number of groups it committed
  std::vector<AsyncCopy> copies;
  uint32_t groups = 0;
};

struct SharedShadow;  // racecheck.cpp

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
  // shared memory: the static variables from offset 0 (`used` bytes, each in `vars`), and the
  // launch's dynamic bytes at kDynamicOffset, apart, so that neither can run into the other
  // unseen (each access must stay in its variable)
  unsigned char* arena = nullptr;
  std::vector<unsigned char> written;  // per byte: kUnwritten, kWritten or kInFlight
  size_t used = 0, dynamic = 0;  // used: the arena's static part, red zones included
  size_t declared = 0;            // the static variables' own bytes (the limit counts these)
  std::vector<SharedVar> vars;
  // racecheck.cpp's shadow of shared memory: per byte, the accesses of the current barrier
  // interval (`interval`, unique over the blocks this storage runs); per thread, its vector
  // clock over its warp's lanes (32 entries); per warp, its count of completed collectives
  SharedShadow* hazards = nullptr;
  uint32_t interval = 0;
  std::vector<uint32_t> lane_clock, warp_count;
  // the stacks of the threads, one mapping
  char* stacks = nullptr;
  size_t stack_count = 0;
  // the first failure, and where in the kernel's code the access that failed was made (the
  // return address of the check's hook: null for failures that are no access)
  cudaError_t error = cudaSuccess;
  std::string report;
  const void* fail_at = nullptr;
  // a race's other access: who made it, and where in the code (null: none)
  const void* other_at = nullptr;
  std::string other_who;
  // CUTRAIN_SIM_BREAK names a thread of this grid: it stops there (fiber_main)
  bool breaks = false;
  unsigned long break_block = 0, break_thread = 0;
};

extern thread_local Block* t_block;  // the block this host thread runs, if any
extern thread_local Fiber* t_fiber;  // the simulated thread running now (null: scheduler)

std::string dim_str(uint3 d);
std::string hex(uintptr_t a);
bool same_site(const char* a, const char* b);

// Records the block's first failure: what, and where in the grid (who: the thread, if any).
void record(Block* b, cudaError_t e, const std::string& what, const Fiber* who,
            const std::string& detail);
// From a simulated thread back to its block's scheduler.
void yield_to_scheduler();
// A failure inside a simulated thread: recorded, and the thread never runs again.
[[noreturn]] void fail_here(cudaError_t e, const std::string& what, const std::string& detail);

// A failed access (access.cpp): recorded with `at`, where in the kernel's code it was made.
[[noreturn]] void fail_access(const void* at, cudaError_t e, const std::string& what,
                              const std::string& detail);

// racecheck.cpp: the shadow made ready for a block (its threads made), a barrier interval
// begun, the lanes of `mask` in the warp from thread w0 ordered by a collective, and an access
// of shared memory [off, off+n) of the arena by thread f checked against the interval's
// others (`what` names the variable, which starts at `start`).
void hazards_reset(Block* b);
void hazards_new_interval(Block* b);
void hazards_order_lanes(Block* b, int w0, int lanes, unsigned mask);
void check_hazard(Block* b, const Fiber* f, size_t off, size_t n, bool write, bool atomic,
                  const void* at, const std::string& what, size_t start);

// access.cpp: an access of [a, a+n) by the running simulated thread (none: it returns), made
// by the code at `at`; `atomic` for an atomic's (hooks.cpp: an atomic's update is checked as
// its read, then its write).
void check_access(uintptr_t a, size_t n, bool write, const void* at, bool atomic);

// collectives.cpp: completes every warp collective whose lanes have all arrived (true when one
// did); at a standstill (no thread can run) completes the block barrier, or records why the
// block is stuck; *done when every thread has exited.
bool complete_warps(Block* b);
void at_standstill(Block* b, bool* done);

}  // namespace dev
}  // namespace cutrain_sim
