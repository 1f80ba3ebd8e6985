// Where a simulated block's threads meet (sim/README.md): the block barrier (__syncthreads
// and its _or and _count forms) and the warp collectives (shuffles, __syncwarp, WMMA). A thread
// that arrives waits in its fiber; the scheduler (scheduler.cpp) completes a meeting once
// every thread it names is there, and reports a block stuck with threads that never arrive.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "sim/block.h"

namespace cutrain_sim {
namespace dev {
namespace {
std::string site_str(const char* site) { return site; }
}  // namespace

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
      hazards_order_lanes(b, w0, lanes, f.mask);
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
  hazards_new_interval(b);
}

}  // namespace dev

using namespace dev;

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

}  // namespace cutrain_sim
