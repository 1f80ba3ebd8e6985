// defines: CachingAllocator, the memory pool that makes a steady-state training step free of
// cudaMalloc/cudaFree.
//
// Why: cudaMalloc and cudaFree are slow (tens of microseconds to milliseconds) and cudaFree
// synchronises the whole device, which would serialise every stream we carefully overlapped.
// A training step allocates the same sizes in the same order every time, so after the first
// step every request can be served from blocks freed by the previous one.
//
// How: freed blocks are kept in a pool keyed by (stream, size). A request is rounded up
// (512 B for small, 1 MiB for large) and served by the smallest cached block of the same
// stream that is at least that big and at most twice that big; otherwise the backend allocates.
// Blocks are tied to the stream they were allocated for: work on that stream is ordered, so a
// block freed after a kernel was queued can be handed to the next kernel on the same stream
// without any synchronisation. Using a block on another stream is the caller's job to order
// with events.
//
// A stream that goes away takes its blocks with it (retire_stream, called by Stream's
// destructor): cached ones go back to the backend, and blocks still in use go back when they
// are freed. Otherwise every loader's copy stream (one per evaluation, say) would leave its
// slot buffers cached under a key no stream will ever ask for again.
//
// A private pool (a captured CUDA graph's: CudaGraph in kernels/gpu.h) is a key like a
// stream's, held (hold): a graph's replays write into the addresses its capture was given, long
// after the tensors that asked for them are gone, so its blocks must never go to anyone else.
// Blocks freed under capture go to the pool too (deallocate(p, key)): the graph may use them.
// Held blocks are not given back by empty_cache() or the out-of-memory flush, only when the
// graph is destroyed (retire_stream(key)).
//
// A memory checker sees each tensor's own bounds, not its block's: the allocator tells the
// backend (lend) which bytes of a block it hands out, exactly as many as were asked for, and
// (take_back) when the block comes back. The CUDA backend passes both on as NVTX memory
// annotations (kernels/nvtx_memory.h: compute-sanitizer's memcheck with --nvtx yes, and the GPU
// simulator, read them): an access past a tensor's end inside its block, or to a block back in
// the pool, is then reported although the memory is the process's.
//
// The allocator is generic over its backend (two functions, and the two annotations), so the
// pooling logic is tested on the CPU with a counting backend; the CUDA one (gpu.cpp) plugs in
// cudaMalloc/cudaFree.
#pragma once
#include <cstddef>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <unordered_map>
#include <utility>

namespace cutrain {

class CachingAllocator {
 public:
  struct Backend {
    std::function<void*(size_t)> alloc;  // returns nullptr when out of memory
    std::function<void(void*)> free;
    // Optional, for memory checkers: block p (of the backend's) is handed out with its first
    // `bytes` live (the request, not rounded): lend returns a token for that region; it comes
    // back: take_back(token), with the stream (or held pool, `held`) it served. Called under
    // the allocator's lock. A block of a stream is handed out again before the work queued with
    // its last tensor has run (the stream orders the two), so a take_back belongs in that
    // stream's order, not the host's; a lend may be at once (the new tensor's work is queued
    // after it), and the two tensors' regions are then live together for a while.
    std::function<void*(void* p, size_t bytes)> lend;
    std::function<void(void* token, const void* key, bool held)> take_back;
  };
  struct Stats {
    size_t backend_allocs = 0;  // calls to Backend::alloc that succeeded
    size_t backend_frees = 0;   // calls to Backend::free
    size_t bytes_in_use = 0;    // handed out and not yet returned (rounded sizes)
    size_t bytes_cached = 0;    // held in the pool, free
    size_t peak_in_use = 0;
  };

  // exact: every allocate() is a backend allocation of exactly `bytes`, and every deallocate()
  // gives the block straight back (except into a held pool: a graph may still use it), so a
  // memory checker sees each buffer's true bounds: an overrun that a larger cached block would
  // hide is caught. The GPU allocator is exact when CUTRAIN_EXACT_ALLOC=1 (bench/bundle/run.sh
  // sets it under compute-sanitizer); slow, for checking only.
  explicit CachingAllocator(Backend backend, bool exact = false)
      : backend_(std::move(backend)), exact_(exact) {}
  bool exact() const { return exact_; }
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // A block of at least `bytes` for work on `stream` (any pointer-sized key; nullptr is the
  // default stream). Throws cutrain::Error naming the size when the backend is out of memory
  // even after the cache was emptied (may_flush = false: without emptying it, for a caller
  // that may not free now: one capturing a CUDA graph).
  void* allocate(size_t bytes, const void* stream = nullptr, bool may_flush = true);
  // Returns a block to the pool. Passing a pointer this allocator did not hand out throws.
  void deallocate(void* p);
  // The same, but the block is cached under `key` (a private pool) instead of its stream.
  void deallocate(void* p, const void* key);
  // `key` is a private pool: its cached blocks stay until retire_stream(key).
  void hold(const void* key);
  // Gives every cached (free) block back to the backend, except those of held pools.
  void empty_cache();
  // `stream` is about to be destroyed (or a private pool's graph): its cached blocks go back
  // to the backend now, and its blocks still in use when they are freed; a held pool is
  // released. (A new stream that gets the same handle later
  // starts afresh: its first allocate() un-retires the key.)
  void retire_stream(const void* stream);
  Stats stats() const;

  static size_t round_size(size_t bytes);

 private:
  struct Block {
    size_t size;
    const void* stream;
  };
  using Key = std::pair<const void*, size_t>;  // (stream, size): ordered for best fit

  void give_back(void* p, const void* key, bool rekey);  // the deallocates: to key if rekey
  void lend_locked(void* p, size_t bytes);               // Backend::lend, its token kept
  void take_back_locked(void* p, const void* key, bool held);
  // Every cached block back to the backend; held pools' too only when `all` (destruction).
  void release_cached_locked(bool all);

  Backend backend_;
  const bool exact_;
  mutable std::mutex mu_;
  std::unordered_map<void*, Block> in_use_;
  std::multimap<Key, void*> cached_;
  std::set<const void*> retired_;  // streams destroyed since: their blocks are not cached
  std::set<const void*> held_;     // private pools: their cached blocks are not released
  std::unordered_map<void*, void*> lent_;  // block -> the token of its live region (lend)
  Stats stats_;
};

}  // namespace cutrain
