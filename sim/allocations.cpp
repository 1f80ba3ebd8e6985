// The simulated memory's registry: every device and pinned allocation (host memory, poisoned
// with 0xff bytes as a GPU's memory starts as garbage, and followed by a red zone no other
// allocation overlaps), and the pool blocks among them with their live regions (the caching
// allocator's NVTX annotations, sim/pools.cpp). Every check of an address, a kernel's access
// (access.cpp) or a call's range (memory.cpp, cublas.cpp), asks look_up where it is.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <shared_mutex>
#include <vector>

#include "sim/runtime.h"

namespace cutrain_sim {
namespace {

// A pool block: the regions handed out in it that are live, and those given back since.
struct Region {
  size_t bytes;
  uint64_t id;
};
struct Pool {
  std::multimap<uintptr_t, Region> live;  // by start (several at one start: the last is newest)
  std::map<uintptr_t, size_t> returned;   // start -> bytes, until handed out again
};

std::shared_mutex g_alloc_mu;                // guards the two maps
std::map<uintptr_t, Allocation> g_allocs;    // by base
std::map<uintptr_t, Pool> g_pools;           // by the base of their allocation
std::atomic<uint64_t> g_generation{0};
// Freed allocations, kept from the host's allocator until kQuarantineBytes of newer ones are
// (as AddressSanitizer's quarantine): an address in one is a use after free, not host memory.
constexpr size_t kQuarantineBytes = size_t(64) << 20;
std::map<uintptr_t, Allocation> g_freed;
std::deque<uintptr_t> g_freed_order;
size_t g_freed_bytes = 0;
uint64_t g_region_ids = 0;                    // the last region id given (under g_alloc_mu)
std::map<uint64_t, uintptr_t> g_region_pool;  // region id -> its pool's base

// The entry of `m` whose range [start, start + bytes) is the last to start at or before a;
// m.end() when none does.
template <class Map>
typename Map::const_iterator last_at_or_before(const Map& m, uintptr_t a) {
  auto it = m.upper_bound(a);
  return it == m.begin() ? m.end() : std::prev(it);
}

std::string hex(uintptr_t a) {
  char s[32];
  std::snprintf(s, sizeof s, "0x%lx", static_cast<unsigned long>(a));
  return s;
}
std::string where(const Allocation& a) {
  return std::to_string(a.bytes) + " bytes at " + hex(a.base) + " (" +
         (a.device >= 0 ? "device " + std::to_string(a.device) : std::string("pinned host")) +
         ")";
}

// The shadow of [p, p+bytes) of pool block `block` back to unwritten, except for bytes a live
// tensor holds (one handed out again while the last tensor's work is still queued: its reads
// must find what it wrote). Under the lock.
void unwrite_unless_live(const Allocation& block, const Pool& pl, uintptr_t p, size_t bytes) {
  if (!block.written) return;
  std::vector<std::pair<uintptr_t, uintptr_t>> keep;  // live ranges overlapping it, in order
  for (const auto& r : pl.live)
    if (r.first < p + bytes && r.first + r.second.bytes > p)
      keep.push_back({r.first, r.first + r.second.bytes});
  std::sort(keep.begin(), keep.end());
  uintptr_t a = p;  // the bytes from a to the next kept range are unwritten
  for (const auto& k : keep) {
    if (k.first > a) std::memset(block.written + (a - block.base), 0, k.first - a);
    a = std::max(a, k.second);
  }
  if (a < p + bytes) std::memset(block.written + (a - block.base), 0, p + bytes - a);
}

// Forgets the pool block based at `base`, its regions with it (under the lock).
void forget_pool_locked(uintptr_t base) {
  const auto pool = g_pools.find(base);
  if (pool == g_pools.end()) return;
  for (const auto& r : pool->second.live) g_region_pool.erase(r.second.id);
  g_pools.erase(pool);
}

}  // namespace

void* allocate(size_t bytes, int device) {
  const size_t n = (std::max<size_t>(bytes, 1) + 255) / 256 * 256 + kRedZone;
  void* p = std::aligned_alloc(256, n);
  if (!p) return nullptr;
  std::memset(p, 0xff, n);  // device memory starts as garbage: a recognisable one
  // Nothing of device memory is written yet (pinned memory: no shadow, Allocation says why).
  uint8_t* written = device >= 0 ? static_cast<uint8_t*>(std::calloc(n, 1)) : nullptr;
  std::unique_lock<std::shared_mutex> lock(g_alloc_mu);
  g_allocs[reinterpret_cast<uintptr_t>(p)] =
      Allocation{reinterpret_cast<uintptr_t>(p), bytes, device, n, written};
  return p;
}

bool release(void* p, bool pinned) {
  std::unique_lock<std::shared_mutex> lock(g_alloc_mu);
  auto it = g_allocs.find(reinterpret_cast<uintptr_t>(p));
  if (it == g_allocs.end() || (it->second.device < 0) != pinned) return false;
  if (!pinned) devices()[size_t(it->second.device)].allocated -= it->second.bytes;
  forget_pool_locked(it->first);
  const Allocation gone = it->second;
  g_allocs.erase(it);
  g_generation++;
  std::memset(p, 0xfe, gone.footprint);  // (what a use after free reads: not the old values)
  g_freed[gone.base] = gone;
  g_freed_order.push_back(gone.base);
  g_freed_bytes += gone.footprint;
  while (g_freed_bytes > kQuarantineBytes) {
    const auto oldest = g_freed.find(g_freed_order.front());
    g_freed_bytes -= oldest->second.footprint;
    std::free(reinterpret_cast<void*>(oldest->first));
    std::free(oldest->second.written);
    g_freed.erase(oldest);
    g_freed_order.pop_front();
  }
  return true;
}

uint64_t allocation_generation() { return g_generation.load(std::memory_order_acquire); }
void bump_allocation_generation() { g_generation++; }

Lookup look_up(uintptr_t a, size_t n, bool tensors) {
  std::shared_lock<std::shared_mutex> lock(g_alloc_mu);
  Lookup l;
  const auto it = last_at_or_before(g_allocs, a);
  const auto freed = last_at_or_before(g_freed, a);
  if (freed != g_freed.end() && a < freed->first + freed->second.footprint &&
      (it == g_allocs.end() || it->first < freed->first)) {
    l.kind = Lookup::freed;
    l.near = freed->second;
    return l;
  }
  if (it == g_allocs.end()) return l;
  const Allocation& al = it->second;
  l.near = al;
  if (a + n > al.base + al.bytes) return l;  // outside: past its end, or beyond it
  const auto pool = tensors ? g_pools.find(al.base) : g_pools.end();
  if (pool == g_pools.end()) {
    l.kind = Lookup::inside;
    l.in = al;
    return l;
  }
  const Pool& p = pool->second;
  // The live regions that start at or before a: one that holds the range, else the nearest.
  for (auto r = p.live.upper_bound(a); r != p.live.begin();) {
    --r;
    const Allocation region{r->first, r->second.bytes, al.device, r->second.bytes,
                            al.written ? al.written + (r->first - al.base) : nullptr};
    if (a + n <= r->first + r->second.bytes) {
      l.kind = Lookup::inside;
      l.in = l.region = region;
      return l;
    }
    if (!l.region.bytes || r->first + r->second.bytes > l.region.base + l.region.bytes)
      l.region = region;  // (a block holds one tensor at a time, two while one is given back)
  }
  // Not in a live region: in one given back since (a use after free), or in none.
  const auto g = last_at_or_before(p.returned, a + n - 1);
  if (g != p.returned.end() && g->first + g->second > a) {
    l.kind = Lookup::returned;
    l.region = Allocation{g->first, g->second, al.device, g->second};
    return l;
  }
  l.kind = Lookup::pool_gap;
  return l;
}

void mark_written(uintptr_t a, size_t n) {
  if (n == 0) return;
  const Lookup l = look_up(a, n, false);
  if (l.kind == Lookup::inside && l.in.written) std::memset(l.in.written + (a - l.in.base), 1, n);
}

void copy_written(uintptr_t dst, uintptr_t src, size_t n) {
  if (n == 0) return;
  const Lookup to = look_up(dst, n, false);
  if (to.kind != Lookup::inside || !to.in.written) return;
  const Lookup from = look_up(src, n, false);
  uint8_t* d = to.in.written + (dst - to.in.base);
  if (from.kind == Lookup::inside && from.in.written)
    std::memmove(d, from.in.written + (src - from.in.base), n);
  else
    std::memset(d, 1, n);  // from the host (pageable or pinned): written
}

bool find_allocation(uintptr_t a, size_t n, Allocation* found, Allocation* nearest) {
  const Lookup l = look_up(a, n);
  *nearest = l.near;
  if (l.kind != Lookup::inside) return false;
  *found = l.in;
  return true;
}

std::string describe_miss(const Lookup& l, uintptr_t a, size_t n) {
  const Allocation& near = l.near;
  const uintptr_t end = a + n;
  switch (l.kind) {
    case Lookup::inside:
      return "is in " + where(l.in);
    case Lookup::freed:
      return "is in an allocation freed earlier, " + where(near) + " (a use after free)";
    case Lookup::returned:
      return "is in a tensor of " + std::to_string(l.region.bytes) + " bytes at " +
             hex(l.region.base) + " that went back to the caching allocator's pool (a use after "
             "free), in its block of " + where(near);
    case Lookup::pool_gap:
      if (!l.region.bytes)
        return "is in the caching allocator's block of " + where(near) +
               " but in none of its tensors";
      if (a < l.region.base + l.region.bytes)
        return "runs past the end of its tensor (" + std::to_string(l.region.bytes) +
               " bytes at " + hex(l.region.base) + ") by " +
               std::to_string(end - (l.region.base + l.region.bytes)) +
               " bytes, inside the caching allocator's block of " + where(near);
      return "starts " + std::to_string(a - (l.region.base + l.region.bytes)) +
             " bytes past the end of its tensor (" + std::to_string(l.region.bytes) +
             " bytes at " + hex(l.region.base) + "), inside the caching allocator's block of " +
             where(near);
    case Lookup::outside:
      break;
  }
  if (!near.bytes) return "is in no allocation";
  if (a < near.base + near.bytes)
    return "starts in " + where(near) + " and runs past its end by " +
           std::to_string(end - (near.base + near.bytes)) + " bytes";
  if (a < near.base + near.footprint)
    return "starts " + std::to_string(a - (near.base + near.bytes)) +
           " bytes past the end of " + where(near) + ", in its red zone";
  return "is in no allocation; the nearest before it: " + where(near) + ", which it passes by " +
         std::to_string(end - (near.base + near.bytes)) + " bytes";
}

void pool_register(uintptr_t base, size_t bytes) {
  std::unique_lock<std::shared_mutex> lock(g_alloc_mu);
  const auto it = last_at_or_before(g_allocs, base);
  if (it == g_allocs.end() || base + bytes > it->second.base + it->second.bytes) {
    lock.unlock();
    report("cutrain-sim: nvtxMemHeapRegister: " + std::to_string(bytes) + " bytes at " +
           hex(base) + " are not in one allocation; not a pool\n");
    return;
  }
  forget_pool_locked(it->second.base);
  g_pools[it->second.base] = Pool{};
  g_generation++;  // what the access checks cached of it no longer holds
}

void pool_unregister(uintptr_t base) {
  std::unique_lock<std::shared_mutex> lock(g_alloc_mu);
  const auto it = last_at_or_before(g_allocs, base);
  if (it != g_allocs.end()) forget_pool_locked(it->second.base);
  g_generation++;
}

uint64_t region_register(uintptr_t p, size_t bytes) {
  std::unique_lock<std::shared_mutex> lock(g_alloc_mu);
  const auto it = last_at_or_before(g_allocs, p);
  if (it == g_allocs.end()) return 0;
  const auto pool = g_pools.find(it->second.base);
  if (pool == g_pools.end()) return 0;
  Pool& pl = pool->second;
  unwrite_unless_live(it->second, pl, p, bytes);  // a tensor's bytes start unwritten
  const uint64_t id = ++g_region_ids;
  pl.live.emplace(p, Region{bytes, id});
  g_region_pool[id] = it->second.base;
  // Handed out again: what was given back there is this tensor's now.
  for (auto r = pl.returned.lower_bound(p); r != pl.returned.end() && r->first < p + bytes;)
    r = pl.returned.erase(r);
  const auto before = last_at_or_before(pl.returned, p);
  if (before != pl.returned.end() && before->first + before->second > p)
    pl.returned.erase(before);
  return id;
}

namespace {
// Unregisters the region `r` of pool `pl` (under the lock): remembered as given back, and
// unwritten again where no other live tensor holds the bytes.
void unregister_locked(const Allocation& block, Pool& pl,
                       std::multimap<uintptr_t, Region>::iterator r) {
  const uintptr_t start = r->first;
  const size_t bytes = r->second.bytes;
  // A region that another live one at the same start covers is not a use after free yet.
  bool covered = false;
  for (auto o = pl.live.lower_bound(r->first); o != pl.live.end() && o->first == r->first; ++o)
    covered = covered || (o != r && o->second.bytes >= r->second.bytes);
  if (!covered) pl.returned[r->first] = r->second.bytes;
  g_region_pool.erase(r->second.id);
  pl.live.erase(r);
  unwrite_unless_live(block, pl, start, bytes);
  g_generation++;  // the access checks may have cached the region
}
}  // namespace

void region_unregister_id(uint64_t id) {
  std::unique_lock<std::shared_mutex> lock(g_alloc_mu);
  const auto at = g_region_pool.find(id);
  if (at == g_region_pool.end()) return;  // its pool block was given back meanwhile
  Pool& pl = g_pools.at(at->second);
  for (auto r = pl.live.begin(); r != pl.live.end(); ++r)
    if (r->second.id == id) return unregister_locked(g_allocs.at(at->second), pl, r);
}

void region_unregister(uintptr_t p) {
  std::unique_lock<std::shared_mutex> lock(g_alloc_mu);
  const auto it = last_at_or_before(g_allocs, p);
  if (it == g_allocs.end()) return;
  const auto pool = g_pools.find(it->second.base);
  if (pool == g_pools.end()) return;
  auto last = pool->second.live.end();
  for (auto r = pool->second.live.lower_bound(p);
       r != pool->second.live.end() && r->first == p; ++r)
    last = r;
  if (last != pool->second.live.end()) unregister_locked(it->second, pool->second, last);
}

}  // namespace cutrain_sim
