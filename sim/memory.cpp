// Simulated memory: device and pinned host allocations (host memory, registered so that the
// kernels' accesses can be checked against them, and poisoned with 0xff bytes as a GPU's
// memory starts as garbage), copies, peer copies and memsets.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <shared_mutex>

#include "sim/runtime.h"

namespace cutrain_sim {
namespace {

std::shared_mutex g_alloc_mu;
std::map<uintptr_t, Allocation> g_allocs;
std::atomic<uint64_t> g_freed{0};

void* allocate(size_t bytes, int device) {
  const size_t n = (std::max<size_t>(bytes, 1) + 255) / 256 * 256 + kRedZone;
  void* p = std::aligned_alloc(256, n);
  if (!p) return nullptr;
  std::memset(p, 0xff, n);  // device memory starts as garbage: a recognisable one
  std::unique_lock<std::shared_mutex> lock(g_alloc_mu);
  g_allocs[reinterpret_cast<uintptr_t>(p)] =
      Allocation{reinterpret_cast<uintptr_t>(p), bytes, device, n};
  return p;
}

bool release(void* p, bool pinned) {
  std::unique_lock<std::shared_mutex> lock(g_alloc_mu);
  auto it = g_allocs.find(reinterpret_cast<uintptr_t>(p));
  if (it == g_allocs.end() || (it->second.device < 0) != pinned) return false;
  if (!pinned) devices()[size_t(it->second.device)].allocated -= it->second.bytes;
  g_allocs.erase(it);
  g_freed++;
  std::free(p);
  return true;
}

// True when [p, p + bytes) is in no allocation of the simulator's: pageable host memory.
bool pageable(const void* p, size_t bytes) {
  Allocation found, nearest;
  return bytes > 0 && !find_allocation(reinterpret_cast<uintptr_t>(p), bytes, &found, &nearest);
}

std::string hex(const void* p) {
  char s[32];
  std::snprintf(s, sizeof s, "%p", p);
  return s;
}
std::string where(const Allocation& a) {
  return std::to_string(a.bytes) + " bytes at " + hex(reinterpret_cast<void*>(a.base)) + " (" +
         (a.device >= 0 ? "device " + std::to_string(a.device) : std::string("pinned host")) +
         ")";
}

// The range [p, p + bytes) of a call's argument, checked as CUDA checks it: cudaSuccess when it
// lies in one allocation (of `device`, when >= 0), or, with `pageable_ok`, in none (pageable
// host memory: nothing to check). A range that starts in an allocation and runs past its end,
// or memory a call needs on the device that is not: cudaErrorInvalidValue, reported.
cudaError_t check_range(const char* call, const char* what, const void* p, size_t bytes,
                        bool pageable_ok, int device = -2) {
  if (bytes == 0) return cudaSuccess;
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  Allocation in, near;
  std::string why;
  if (find_allocation(a, bytes, &in, &near)) {
    if (device < -1 || in.device == device) return cudaSuccess;
    why = "is in " + where(in) + ", not device " + std::to_string(device) + "'s memory";
  } else if (near.bytes && a < near.base + near.bytes) {
    why = "starts in " + where(near) + " and runs past its end by " +
          std::to_string(a + bytes - (near.base + near.bytes)) + " bytes";
  } else if (near.bytes && a < near.base + near.footprint) {
    why = "starts " + std::to_string(a - (near.base + near.bytes)) + " bytes past the end of " +
          where(near);
  } else if (pageable_ok) {
    return cudaSuccess;
  } else {
    why = "is in no allocation" + (near.bytes ? "; the nearest before it: " + where(near)
                                              : std::string());
  }
  report(std::string("cutrain-sim: ") + call + ": the " + what + ", " + std::to_string(bytes) +
         " bytes at " + hex(p) + ", " + why + " (cudaErrorInvalidValue; nothing was written)\n");
  return cudaErrorInvalidValue;
}

}  // namespace

uint64_t allocation_generation() { return g_freed.load(std::memory_order_acquire); }
void bump_allocation_generation() { g_freed++; }

bool find_allocation(uintptr_t a, size_t n, Allocation* found, Allocation* nearest) {
  std::shared_lock<std::shared_mutex> lock(g_alloc_mu);
  auto it = g_allocs.upper_bound(a);
  *nearest = Allocation{};
  if (it == g_allocs.begin()) return false;
  --it;
  const Allocation& al = it->second;
  if (a + n <= al.base + al.bytes) {
    *found = al;
    return true;
  }
  *nearest = al;
  return false;
}

// Pinned and device memory are read and written when the copy runs, as on a GPU. Pageable host
// memory is not queued, as CUDA does not queue it: a pageable source is copied at the call
// (into CUDA's staging buffer; the caller may reuse it at once), and a copy into pageable
// memory returns only once it is done. (Queued, such a write could land in a buffer its owner
// had freed meanwhile, which a GPU's synchronous copy allows.) In a capture every copy is a
// node of the graph, run at each replay.
cudaError_t copy_on(Stream& s, void* dst, const void* src, size_t bytes, const char* call) {
  if (sticky(s.device) != cudaSuccess) return sticky(s.device);
  if (const cudaError_t e = check_range(call, "destination", dst, bytes, true)) return e;
  if (const cudaError_t e = check_range(call, "source", src, bytes, true)) return e;
  const int device = s.device;
  const bool now = !s.is_capturing();
  std::shared_ptr<std::vector<unsigned char>> staged;  // kept alive by the task
  if (now && pageable(src, bytes))
    staged = std::make_shared<std::vector<unsigned char>>(
        static_cast<const unsigned char*>(src), static_cast<const unsigned char*>(src) + bytes);
  const void* from = staged ? staged->data() : src;
  s.submit(Task{[dst, from, bytes, device, staged] {
                  if (sticky(device) == cudaSuccess) std::memmove(dst, from, bytes);
                },
                true});
  if (now && pageable(dst, bytes)) s.synchronize();
  return cudaSuccess;
}

}  // namespace cutrain_sim

using namespace cutrain_sim;

cudaError_t cudaMalloc(void** p, size_t bytes) {
  const int dev = current_device();
  if (sticky(dev) != cudaSuccess) return sticky(dev);
  Device& d = devices()[size_t(dev)];
  if (d.allocated + bytes > kTotalMemory || !(*p = allocate(bytes, dev))) {
    *p = nullptr;
    return set_error(cudaErrorMemoryAllocation);
  }
  d.allocated += bytes;
  return cudaSuccess;
}
cudaError_t cudaFree(void* p) {
  if (!p) return cudaSuccess;
  // cudaFree waits for the device, which a capture forbids: it frees nothing and the capture
  // is broken (CUDA's rule).
  bool refused = false;
  for (const auto& s : streams_of(current_device())) refused = s->refuse_if_capturing() || refused;
  if (refused) return set_error(cudaErrorStreamCaptureUnsupported);
  cudaDeviceSynchronize();  // as CUDA's: the device is done with it
  return release(p, false) ? cudaSuccess : set_error(cudaErrorInvalidValue);
}
cudaError_t cudaMallocHost(void** p, size_t bytes) {
  *p = allocate(bytes, -1);
  return *p ? cudaSuccess : set_error(cudaErrorMemoryAllocation);
}
cudaError_t cudaFreeHost(void* p) {
  if (!p) return cudaSuccess;
  // As CUDA's (its implicit synchronisation): the work queued on every device is done first,
  // so that a copy still queued to or from the buffer does not touch freed memory.
  for (const auto& s : streams_of(-1))
    if (!s->is_capturing()) s->synchronize();
  return release(p, true) ? cudaSuccess : set_error(cudaErrorInvalidValue);
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind,
                            cudaStream_t stream) {
  const std::shared_ptr<Stream> s = find_stream(stream);
  if (!s) return set_error(cudaErrorInvalidResourceHandle);
  return set_error(copy_on(*s, dst, src, bytes, "cudaMemcpyAsync"));
}
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  const cudaError_t e = cudaMemcpyAsync(dst, src, bytes, kind, nullptr);
  if (e != cudaSuccess) return e;
  find_stream(nullptr)->synchronize();
  return set_error(sticky(current_device()));
}
cudaError_t cudaMemcpyPeerAsync(void* dst, int dst_device, const void* src, int src_device,
                                size_t bytes, cudaStream_t stream) {
  if (!valid_device(dst_device) || !valid_device(src_device))
    return set_error(cudaErrorInvalidDevice);
  const std::shared_ptr<Stream> s = find_stream(stream);
  if (!s) return set_error(cudaErrorInvalidResourceHandle);
  const char* call = "cudaMemcpyPeerAsync";
  if (const cudaError_t e = check_range(call, "destination", dst, bytes, false, dst_device))
    return set_error(e);
  if (const cudaError_t e = check_range(call, "source", src, bytes, false, src_device))
    return set_error(e);
  return set_error(copy_on(*s, dst, src, bytes, call));
}
cudaError_t cudaMemsetAsync(void* p, int value, size_t bytes, cudaStream_t stream) {
  const std::shared_ptr<Stream> s = find_stream(stream);
  if (!s) return set_error(cudaErrorInvalidResourceHandle);
  const int device = s->device;
  if (sticky(device) != cudaSuccess) return set_error(sticky(device));
  if (const cudaError_t e = check_range("cudaMemsetAsync", "memory", p, bytes, false))
    return set_error(e);
  s->submit(Task{[=] {
                   if (sticky(device) == cudaSuccess) std::memset(p, value, bytes);
                 },
                 true});
  return cudaSuccess;
}
cudaError_t cudaMemset(void* p, int value, size_t bytes) {
  const cudaError_t e = cudaMemsetAsync(p, value, bytes, nullptr);
  if (e != cudaSuccess) return e;
  find_stream(nullptr)->synchronize();
  return set_error(sticky(current_device()));
}
