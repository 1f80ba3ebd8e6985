#include "kernels/caching_allocator.h"

#include "kernels/check.h"

namespace cutrain {

size_t CachingAllocator::round_size(size_t bytes) {
  const size_t small = 512, large = size_t(1) << 20;
  if (bytes == 0) bytes = 1;
  const size_t unit = bytes < large ? small : large;
  return (bytes + unit - 1) / unit * unit;
}

CachingAllocator::~CachingAllocator() {
  std::lock_guard<std::mutex> lock(mu_);
  release_cached_locked(true);
  // Blocks still in use belong to objects that outlive the allocator (static destruction
  // order); they are left to the process exit rather than freed under their owners.
}

void* CachingAllocator::allocate(size_t bytes, const void* stream, bool may_flush) {
  const size_t size = exact_ ? (bytes == 0 ? 1 : bytes) : round_size(bytes);
  std::lock_guard<std::mutex> lock(mu_);
  retired_.erase(stream);  // a live stream asks: its handle is in use again
  // best fit: the smallest cached block of this stream with size <= block <= 2 * size
  auto it = exact_ ? cached_.end() : cached_.lower_bound(Key(stream, size));
  if (it != cached_.end() && it->first.first == stream && it->first.second <= 2 * size) {
    void* p = it->second;
    const size_t got = it->first.second;
    cached_.erase(it);
    in_use_[p] = Block{got, stream};
    stats_.bytes_cached -= got;
    stats_.bytes_in_use += got;
    if (stats_.bytes_in_use > stats_.peak_in_use) stats_.peak_in_use = stats_.bytes_in_use;
    if (held_.count(stream)) {
      // A graph's block again (its capture freed a tensor in it): the replays touch what every
      // tensor it held put there, so all of it stays live.
      take_back_locked(p, stream, true);
      lend_locked(p, got);
    } else {
      lend_locked(p, bytes);
    }
    return p;
  }
  void* p = backend_.alloc(size);
  if (!p && may_flush && !cached_.empty()) {  // out of memory: give the cache back, retry
    release_cached_locked(false);
    p = backend_.alloc(size);
  }
  CHECK(p, "out of device memory allocating " << bytes << " bytes (" << stats_.bytes_in_use
                                              << " bytes in use)");
  stats_.backend_allocs++;
  in_use_[p] = Block{size, stream};
  stats_.bytes_in_use += size;
  if (stats_.bytes_in_use > stats_.peak_in_use) stats_.peak_in_use = stats_.bytes_in_use;
  lend_locked(p, bytes);
  return p;
}

void CachingAllocator::lend_locked(void* p, size_t bytes) {
  if (backend_.lend) lent_[p] = backend_.lend(p, bytes);
}

void CachingAllocator::take_back_locked(void* p, const void* key, bool held) {
  const auto it = lent_.find(p);
  if (it == lent_.end()) return;
  if (backend_.take_back) backend_.take_back(it->second, key, held);
  lent_.erase(it);
}

void CachingAllocator::deallocate(void* p) { give_back(p, nullptr, false); }

void CachingAllocator::deallocate(void* p, const void* key) { give_back(p, key, true); }

void CachingAllocator::give_back(void* p, const void* key, bool rekey) {
  if (!p) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = in_use_.find(p);
  CHECK(it != in_use_.end(), "deallocate of a pointer this allocator did not hand out");
  const Block b = it->second;
  in_use_.erase(it);
  stats_.bytes_in_use -= b.size;
  const void* to = rekey ? key : b.stream;
  // exact: straight back, unless into a held pool (a captured graph may still use the block)
  const bool freeing = retired_.count(to) || (exact_ && !held_.count(to));
  // Back in a pool, none of it may be touched; in a held pool (a graph's) it stays live: the
  // graph's replays use the tensor's bytes long after the tensor is gone. (A block going back
  // to the backend takes its annotations with it.)
  if (!freeing && !held_.count(to)) take_back_locked(p, b.stream, false);
  if (freeing) {  // nobody will ask for it again
    lent_.erase(p);  // (its annotations go with the block)
    backend_.free(p);
    stats_.backend_frees++;
    return;
  }
  cached_.emplace(Key(to, b.size), p);
  stats_.bytes_cached += b.size;
}

void CachingAllocator::hold(const void* key) {
  std::lock_guard<std::mutex> lock(mu_);
  retired_.erase(key);
  held_.insert(key);
}

void CachingAllocator::retire_stream(const void* stream) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = cached_.lower_bound(Key(stream, 0));
       it != cached_.end() && it->first.first == stream;) {
    lent_.erase(it->second);
    backend_.free(it->second);
    stats_.backend_frees++;
    stats_.bytes_cached -= it->first.second;
    it = cached_.erase(it);
  }
  retired_.insert(stream);
  held_.erase(stream);
}

void CachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mu_);
  release_cached_locked(false);
}

void CachingAllocator::release_cached_locked(bool all) {
  for (auto it = cached_.begin(); it != cached_.end();) {
    if (!all && held_.count(it->first.first)) {
      ++it;
      continue;
    }
    lent_.erase(it->second);
    backend_.free(it->second);
    stats_.backend_frees++;
    stats_.bytes_cached -= it->first.second;
    it = cached_.erase(it);
  }
}

CachingAllocator::Stats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace cutrain
