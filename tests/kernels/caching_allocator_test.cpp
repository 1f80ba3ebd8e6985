// The caching allocator's pooling logic, on the CPU with a counting backend (the CUDA backend
// differs only in the two functions it plugs in; tests/kernels/gpu_test.cpp runs that one).
#include <cstdlib>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "kernels/caching_allocator.h"
#include "tests/test_util.h"

using namespace cutrain;

namespace {
struct CountingBackend {
  int allocs = 0, frees = 0;
  size_t limit = size_t(1) << 40;  // pretend device size
  size_t live = 0;
  std::set<void*> outstanding;
  CachingAllocator::Backend make() {
    CachingAllocator::Backend b;
    b.alloc = [this](size_t n) -> void* {
      if (live + n > limit) return nullptr;
      void* p = std::malloc(n);
      allocs++;
      live += n;
      outstanding.insert(p);
      sizes[p] = n;
      return p;
    };
    b.free = [this](void* p) {
      frees++;
      live -= sizes[p];
      outstanding.erase(p);
      std::free(p);
    };
    return b;
  }
  std::map<void*, size_t> sizes;
};
}  // namespace

TEST_CASE("caching allocator: sizes round up to 512 B, or 1 MiB when large") {
  REQUIRE(CachingAllocator::round_size(0) == 512);
  REQUIRE(CachingAllocator::round_size(1) == 512);
  REQUIRE(CachingAllocator::round_size(512) == 512);
  REQUIRE(CachingAllocator::round_size(513) == 1024);
  REQUIRE(CachingAllocator::round_size((1 << 20) - 1) == (1 << 20));
  REQUIRE(CachingAllocator::round_size((1 << 20) + 1) == (2 << 20));
}

TEST_CASE("caching allocator: a repeated step allocates from the backend only the first time") {
  CountingBackend be;
  CachingAllocator a(be.make());
  // one "training step": a mix of activation-sized and small buffers, freed at the end
  const std::vector<size_t> step = {4 << 20, 4 << 20, 300, 70000, 2 << 20, 12, 4 << 20};
  for (int it = 0; it < 5; it++) {
    std::vector<void*> live;
    for (size_t n : step) live.push_back(a.allocate(n));
    for (void* p : live) a.deallocate(p);
    if (it == 0) REQUIRE(be.allocs == int(step.size()));
  }
  REQUIRE(be.allocs == int(step.size()));  // steps 2..5 were served from the pool
  REQUIRE(be.frees == 0);
  REQUIRE(a.stats().bytes_in_use == 0);
  REQUIRE(a.stats().bytes_cached > 0);
  a.empty_cache();
  REQUIRE(be.frees == int(step.size()));
  REQUIRE(be.outstanding.empty());
}

TEST_CASE("caching allocator: best fit, never more than twice the request") {
  CountingBackend be;
  CachingAllocator a(be.make());
  void* big = a.allocate(8 << 20);
  void* mid = a.allocate(3 << 20);
  a.deallocate(big);
  a.deallocate(mid);
  // 3 MiB fits the 3 MiB block exactly, not the 8 MiB one
  REQUIRE(a.allocate(3 << 20) == mid);
  // 2 MiB: the 8 MiB block is more than twice as big, so a new block comes from the backend
  const int before = be.allocs;
  void* small = a.allocate(2 << 20);
  REQUIRE(small != big);
  REQUIRE(be.allocs == before + 1);
  // 5 MiB may take the 8 MiB block (within 2x)
  REQUIRE(a.allocate(5 << 20) == big);
}

TEST_CASE("caching allocator: blocks are not shared between streams") {
  CountingBackend be;
  CachingAllocator a(be.make());
  int s1 = 0, s2 = 0;  // any distinct addresses serve as stream keys
  void* p = a.allocate(1000, &s1);
  a.deallocate(p);
  void* q = a.allocate(1000, &s2);
  REQUIRE(q != p);      // freed on s1, so not handed to s2 without an event
  REQUIRE(a.allocate(1000, &s1) == p);
  REQUIRE(be.allocs == 2);
}

TEST_CASE("caching allocator: out of memory empties the cache and retries, then reports") {
  CountingBackend be;
  be.limit = 10 << 20;
  CachingAllocator a(be.make());
  void* p = a.allocate(6 << 20);
  a.deallocate(p);  // 6 MiB cached
  // A caller that may not free now (capturing a CUDA graph) gets the error, the cache intact.
  REQUIRE_ERROR(a.allocate(8 << 20, nullptr, false), "out of device memory");
  REQUIRE(be.frees == 0);
  REQUIRE(a.stats().bytes_cached == size_t(6 << 20));
  // 8 MiB does not fit beside the cached 6 MiB: the cache is released and the retry succeeds
  void* q = a.allocate(8 << 20);
  REQUIRE(q != nullptr);
  REQUIRE(be.frees == 1);
  // 4 MiB more cannot fit at all: a clear error with the size
  REQUIRE_ERROR(a.allocate(4 << 20), "out of device memory allocating 4194304 bytes");
  a.deallocate(q);
  REQUIRE(a.stats().peak_in_use == size_t(8 << 20));
}

TEST_CASE("caching allocator: freeing a foreign pointer is an error") {
  CountingBackend be;
  CachingAllocator a(be.make());
  int x = 0;
  REQUIRE_ERROR(a.deallocate(&x), "did not hand out");
  a.deallocate(nullptr);  // like free(nullptr): nothing
}

TEST_CASE("caching allocator: a retired stream's blocks go back to the backend, now or when freed") {
  CountingBackend be;
  CachingAllocator a(be.make());
  int s1 = 0, s2 = 0;  // two streams' keys
  void* cached = a.allocate(1000, &s1);
  void* held = a.allocate(5000, &s1);
  void* other = a.allocate(1000, &s2);
  a.deallocate(cached);
  a.deallocate(other);
  REQUIRE(a.stats().bytes_cached == 2048);  // s1's 1 KiB and s2's 1 KiB (rounded to 512 B)
  a.retire_stream(&s1);
  REQUIRE(be.frees == 1);  // s1's cached block, at once
  REQUIRE(be.outstanding.count(cached) == 0);
  REQUIRE(a.stats().bytes_cached == 1024);  // s2's stays
  a.deallocate(held);  // in use when s1 went: back to the backend, never cached
  REQUIRE(be.frees == 2);
  REQUIRE(be.outstanding.count(held) == 0);
  REQUIRE(a.stats().bytes_in_use == 0);
  // s2 still reuses its block; a new stream with s1's handle starts afresh and caches again.
  REQUIRE(a.allocate(1000, &s2) == other);
  void* fresh = a.allocate(1000, &s1);
  REQUIRE(be.allocs == 4);
  a.deallocate(fresh);
  REQUIRE(a.stats().bytes_cached == 1024);
  REQUIRE(a.allocate(1000, &s1) == fresh);
}

TEST_CASE("caching allocator: a held pool keeps its blocks from everyone else until it is retired") {
  CountingBackend be;
  CachingAllocator a(be.make());
  int stream = 0, graph = 0;  // a stream's key and a captured graph's private pool
  void* before = a.allocate(3000, &stream);  // made before the capture, freed during it
  a.hold(&graph);
  void* mine = a.allocate(1000, &graph);     // the capture's own blocks
  a.deallocate(mine);                        // to the pool: it keeps its own blocks
  a.deallocate(before, &graph);              // a stream's block freed under capture: the pool's
  REQUIRE(a.stats().bytes_cached == 1024 + 3072);
  // The stream never gets them back: the graph's replays write there.
  void* eager = a.allocate(1000, &stream);
  REQUIRE(eager != mine);
  REQUIRE(a.allocate(3000, &stream) != before);
  REQUIRE(be.allocs == 4);
  // A later capture into the same pool reuses them.
  REQUIRE(a.allocate(3000, &graph) == before);
  a.deallocate(before);  // its key is now the pool's
  // Neither emptying the cache nor running out of memory gives them back.
  a.empty_cache();
  REQUIRE(a.stats().bytes_cached == 1024 + 3072);
  REQUIRE(be.outstanding.count(mine) == 1);
  be.limit = be.live;  // the device is full: the flush frees nothing held, and reports
  REQUIRE_ERROR(a.allocate(1 << 20, &stream), "out of device memory");
  REQUIRE(be.outstanding.count(mine) == 1);
  REQUIRE(be.outstanding.count(before) == 1);
  // Retiring the pool (the graph is destroyed) releases them, and later frees too.
  void* last = a.allocate(1000, &graph);
  REQUIRE(last == mine);
  const int frees = be.frees;
  a.retire_stream(&graph);
  REQUIRE(be.frees == frees + 1);  // `before`; `mine` is still in use
  a.deallocate(last);
  REQUIRE(be.frees == frees + 2);
  REQUIRE(be.outstanding.count(mine) == 0);
  REQUIRE(be.outstanding.count(before) == 0);
}

TEST_CASE("caching allocator: exact mode allocates each request at its own size and frees at once") {
  CountingBackend be;
  CachingAllocator a(be.make(), /*exact=*/true);
  REQUIRE(a.exact());
  int s1 = 0, graph = 0;
  for (int it = 0; it < 3; it++) {
    void* p = a.allocate(300, &s1);
    void* q = a.allocate(70001, &s1);
    REQUIRE(be.sizes[p] == 300);  // not rounded: an overrun past 300 bytes is outside the block
    REQUIRE(be.sizes[q] == 70001);
    a.deallocate(p);
    a.deallocate(q);
    REQUIRE(be.outstanding.empty());  // nothing cached
  }
  REQUIRE(be.allocs == 6);
  REQUIRE(be.frees == 6);
  // A held pool (a captured graph's) keeps its blocks until it is retired, exact or not.
  a.hold(&graph);
  void* g = a.allocate(1000, &s1);
  a.deallocate(g, &graph);
  REQUIRE(be.outstanding.size() == 1);
  REQUIRE(a.allocate(1000, &graph) != g);  // but never hands them out again
  a.retire_stream(&graph);
  REQUIRE(be.outstanding.size() == 1);  // the second block is still in use
}

TEST_CASE("caching allocator: each hand-out lends exactly the bytes asked for, and takes them back") {
  CountingBackend be;
  int graph = 0, s1 = 0;
  // What a memory checker would see: the live regions, by token (block, bytes), and the
  // stream each came back on.
  std::map<void*, std::pair<void*, size_t>> regions;
  int tokens = 0;
  std::vector<std::pair<void*, const void*>> returned;  // (block, key)
  CachingAllocator::Backend b = be.make();
  b.lend = [&](void* p, size_t bytes) -> void* {
    void* token = reinterpret_cast<void*>(uintptr_t(++tokens));
    regions[token] = {p, bytes};
    return token;
  };
  b.take_back = [&](void* token, const void* key, bool held) {
    REQUIRE(regions.count(token) == 1);
    returned.push_back({regions[token].first, key});
    REQUIRE(held == (key == static_cast<const void*>(&graph)));
    regions.erase(token);
  };
  auto live = [&](void* p) {  // the bytes live in block p (0: none)
    size_t n = 0;
    for (const auto& r : regions)
      if (r.second.first == p) n = std::max(n, r.second.second);
    return n;
  };
  CachingAllocator a(std::move(b));
  void* p = a.allocate(300, &s1);
  REQUIRE(be.sizes[p] == 512);  // the block is rounded up...
  REQUIRE(live(p) == 300);      // ... the tensor is not: byte 300 on is outside it
  a.deallocate(p);
  REQUIRE(live(p) == 0);  // back in the pool: none of it may be touched
  REQUIRE(returned.back() == std::make_pair(p, static_cast<const void*>(&s1)));  // s1's order
  void* q = a.allocate(260, &s1);  // the same block again, for a smaller tensor
  REQUIRE(q == p);
  REQUIRE(live(q) == 260);
  void* r = a.allocate(2 << 20, &s1);
  REQUIRE(live(r) == size_t(2 << 20));
  a.deallocate(q);
  a.deallocate(r);
  REQUIRE(regions.empty());
  a.empty_cache();
  REQUIRE(be.outstanding.empty());
  // A captured graph's pool: a tensor freed during the capture stays live (the replays still
  // use its bytes), and its block handed out again in that pool is live whole.
  a.hold(&graph);
  void* g = a.allocate(300, &graph);
  REQUIRE(live(g) == 300);
  a.deallocate(g, &graph);
  REQUIRE(live(g) == 300);
  void* g2 = a.allocate(100, &graph);
  REQUIRE(g2 == g);
  REQUIRE(live(g2) == 512);
  REQUIRE(regions.size() == 1);
  a.deallocate(g2, &graph);
  a.retire_stream(&graph);  // the graph destroyed: its blocks go back to the backend
  REQUIRE(be.outstanding.empty());
}
