// Shared-memory hazards, compute-sanitizer's racecheck rule (sim/README.md): two accesses to
// the same byte of a block's shared memory by different threads, at least one a write and not
// both atomics, with nothing ordering them, are a hazard, whatever order the fibers ran in.
//
// What orders two accesses of one block:
//  - a block barrier (__syncthreads and its forms): it ends the block's barrier interval, and
//    every access before it is ordered before every access after it. So the shadow only holds
//    the current interval's accesses (an entry of an older interval is empty);
//  - a warp collective (a shuffle, __syncwarp, a WMMA operation) orders the lanes it names. Each
//    lane keeps a vector clock over the 32 lanes of its warp, in the values of its warp's
//    count of completed collectives: a collective numbered c joins the clocks of its lanes and
//    sets their own entries to c. An access is stamped with its lane's own entry (the number of
//    the last collective the lane took part in), and an access of lane i stamped e is ordered
//    before lane k's access when k's clock holds more than e for i: a collective after the
//    access reached k, directly or through other lanes.
//  - nothing else: two warps are ordered only by a barrier.
// An atomic access counts as a write here: it conflicts with a plain access of another thread
// in the interval, never with another atomic (an atomic load beside a plain read is reported,
// which racecheck would let pass: a stricter rule, and one cutrain's kernels never meet).
//
// The shadow, per byte of the arena: the interval it belongs to; the last writer (its thread,
// stamp, whether atomic, the code that wrote); the readers since (the first and one other,
// preferably of another warp, with their code, the lanes that read when they are of one warp,
// and the latest stamp among them: a write must come after a collective that every reader's
// read preceded, which the latest stamp bounds). A write clears the readers: a later access that
// conflicts with them conflicts with that write too.
#include <sys/mman.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "sim/block.h"

namespace cutrain_sim {
namespace dev {

struct SharedShadow {
  uint32_t interval;  // the barrier interval of what follows (another: nothing recorded)
  uint16_t writer;    // the last writer's linear thread index + 1 (0: none)
  uint16_t reader;    // the first reader's (0: none)
  uint16_t reader2;   // another reader's, of another warp than the first where there is one
  uint16_t rwarp;     // the warp every reader is of (kSeveralWarps: readers of several warps)
  uint32_t rmask;     // the lanes of rwarp that read
  uint32_t wstamp;    // the writer's stamp
  uint32_t rstamp;    // the latest stamp of a read
  bool watomic;       // the last write was an atomic's
  const void* wat;    // where in the kernel's code the accesses were made
  const void* rat;
  const void* rat2;
};
constexpr uint16_t kSeveralWarps = 0xffff;

namespace {

size_t shadow_bytes() { return kArenaBytes * sizeof(SharedShadow); }

// The thread's own stamp: the number of its warp's last collective it took part in.
uint32_t stamp(const Block* b, int t) { return b->lane_clock[size_t(t) * 32 + size_t(t % 32)]; }

// Is thread p's access stamped e ordered before thread t's access now?
bool ordered(const Block* b, int p, uint32_t e, int t) {
  if (p == t) return true;  // program order
  if (p / 32 != t / 32) return false;  // other warps: only a barrier, which ends the interval
  return b->lane_clock[size_t(t) * 32 + size_t(p % 32)] > e;
}

const char* kind_of(bool earlier_write, bool write) {
  if (earlier_write) return write ? "write-after-write" : "read-after-write";
  return "write-after-read";
}

}  // namespace

void hazards_reset(Block* b) {
  if (!b->hazards) {
    void* m = mmap(nullptr, shadow_bytes(), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) {
      std::fprintf(stderr, "cutrain-sim: cannot map the shared memory's race shadow\n");
      std::abort();
    }
    b->hazards = static_cast<SharedShadow*>(m);
  }
  const size_t n = b->threads.size();
  b->lane_clock.assign(n * 32, 0);
  b->warp_count.assign((n + 31) / 32, 0);
  hazards_new_interval(b);
}

void hazards_new_interval(Block* b) {
  if (++b->interval == 0) {  // the stamps wrapped: every entry is forgotten for real
    madvise(b->hazards, shadow_bytes(), MADV_DONTNEED);  // (reads as zeros again)
    b->interval = 1;
  }
}

void hazards_order_lanes(Block* b, int w0, int lanes, unsigned mask) {
  uint32_t& count = b->warp_count[size_t(w0 / 32)];
  const uint32_t c = ++count;
  uint32_t joined[32] = {};
  for (int m = 0; m < lanes; m++) {
    if (!(mask >> m & 1)) continue;
    const uint32_t* vc = &b->lane_clock[size_t(w0 + m) * 32];
    for (int i = 0; i < 32; i++) joined[i] = std::max(joined[i], vc[i]);
  }
  for (int m = 0; m < lanes; m++)
    if (mask >> m & 1) joined[m] = c;
  for (int m = 0; m < lanes; m++)
    if (mask >> m & 1) std::memcpy(&b->lane_clock[size_t(w0 + m) * 32], joined, sizeof joined);
}

void check_hazard(Block* b, const Fiber* f, size_t off, size_t n, bool write, bool atomic,
                  const void* at, const std::string& what, size_t start) {
  const int t = f->linear, lane = t % 32, warp = t / 32;
  const uint32_t mine = stamp(b, t);
  for (size_t i = 0; i < n; i++) {
    SharedShadow& s = b->hazards[off + i];
    if (s.interval != b->interval) {
      std::memset(&s, 0, sizeof s);
      s.interval = b->interval;
    }
    // The other access it conflicts with, if any: the last write, or (for a write) a read.
    int other = -1;
    bool other_wrote = false;
    const void* other_at = nullptr;
    if (s.writer && !(s.watomic && atomic) && !ordered(b, s.writer - 1, s.wstamp, t)) {
      other = s.writer - 1, other_wrote = true, other_at = s.wat;
    } else if (write && s.reader) {
      // A reader other than this thread that nothing orders before this write: any of
      // another warp; of this warp, a lane whose read no collective since has brought here.
      bool unordered = s.rwarp != warp;
      const unsigned others = s.rmask & ~(1u << lane);
      for (int l = 0; l < 32 && !unordered; l++)
        if ((others >> l & 1) && b->lane_clock[size_t(t) * 32 + size_t(l)] <= s.rstamp)
          unordered = true;
      if (unordered) {
        // Name one: of another warp where one is kept, else one that is not this thread.
        const int r1 = s.reader - 1, r2 = int(s.reader2) - 1;
        const bool second = r2 >= 0 && (r1 == t || (r1 / 32 == warp && r2 / 32 != warp));
        other = second ? r2 : r1;
        other_at = second ? s.rat2 : s.rat;
      }
    }
    if (other >= 0) {
      const Fiber& o = b->threads[size_t(other)];
      std::string detail =
          "thread " + dim_str(f->tid) + (write ? (atomic ? " writes (atomically) " : " writes ")
                                                : " reads ") +
          std::to_string(n) + " bytes at byte " + std::to_string(off - start) + " of " + what +
          "; thread " + dim_str(o.tid) + (other_wrote ? (s.watomic ? " wrote (atomically)" : " wrote")
                                                      : " read") +
          " byte " + std::to_string(off + i - start) +
          " in the same barrier interval, and nothing orders the two: no __syncthreads between "
          "them" +
          (o.linear / 32 == warp ? ", nor a warp collective (__syncwarp, a shuffle) naming both lanes"
                                 : " (they are of different warps)");
      if (b->error == cudaSuccess) {
        b->other_at = other_at;
        b->other_who = "thread " + dim_str(o.tid);
      }
      fail_access(at, cudaErrorLaunchFailure,
                  std::string("shared memory hazard: ") + kind_of(other_wrote, write), detail);
    }
    if (write) {
      s.writer = uint16_t(t + 1);
      s.wstamp = mine;
      s.watomic = atomic;
      s.wat = at;
      s.reader = s.reader2 = 0;
      s.rmask = 0;
      s.rwarp = 0;
      s.rstamp = 0;
      continue;
    }
    if (!s.reader) {
      s.reader = uint16_t(t + 1);
      s.rat = at;
      s.rwarp = uint16_t(warp);
      s.rmask = 1u << lane;
      s.rstamp = mine;
      continue;
    }
    const int r1 = s.reader - 1;
    if (r1 != t && (!s.reader2 || (int(s.reader2 - 1) / 32 == r1 / 32 && warp != r1 / 32))) {
      s.reader2 = uint16_t(t + 1);
      s.rat2 = at;
    }
    if (s.rwarp != warp) s.rwarp = kSeveralWarps;
    s.rmask |= 1u << lane;
    s.rstamp = std::max(s.rstamp, mine);
  }
}

}  // namespace dev
}  // namespace cutrain_sim
