// The simulated memory's API: cudaMalloc and cudaFree (allocations.cpp keeps the registry),
// copies, peer copies and memsets, each range checked first.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "sim/runtime.h"

namespace cutrain_sim {
namespace {

// True when [p, p + bytes) is in no allocation of the simulator's: pageable host memory.
bool pageable(const void* p, size_t bytes) {
  return bytes > 0 && look_up(reinterpret_cast<uintptr_t>(p), bytes).kind == Lookup::outside;
}

std::string hex(const void* p) {
  char s[32];
  std::snprintf(s, sizeof s, "%p", p);
  return s;
}

// The range [p, p + bytes) of a call's argument, checked as CUDA checks it: cudaSuccess when it
// lies in one allocation (or one live tensor of a pool block), of `device` when >= 0, or, with
// `pageable_ok`, in no allocation (pageable host memory: nothing to check). A range that starts
// in an allocation and runs past its end (or its tensor's), starts in a red zone, touches a
// tensor given back to the pool, or is not device memory of `device`: cudaErrorInvalidValue,
// reported.
cudaError_t check_range(const char* call, const char* what, const void* p, size_t bytes,
                        bool pageable_ok, int device = -2) {
  if (bytes == 0) return cudaSuccess;
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  const Lookup l = look_up(a, bytes, false);
  std::string why;
  if (l.kind == Lookup::inside) {
    if (device < -1 || l.in.device == device) return cudaSuccess;
    why = describe_miss(l, a, bytes) + ", not device " + std::to_string(device) + "'s memory";
  } else if (l.kind == Lookup::outside && pageable_ok &&
             !(l.near.bytes && a < l.near.base + l.near.footprint)) {
    return cudaSuccess;
  } else {
    why = describe_miss(l, a, bytes);
  }
  report(std::string("cutrain-sim: ") + call + ": the " + what + ", " + std::to_string(bytes) +
         " bytes at " + hex(p) + ", " + why + " (cudaErrorInvalidValue; nothing was written)\n");
  return cudaErrorInvalidValue;
}

// The same range when the call's work runs, against the tensors of the caching allocator's
// blocks (their annotations are in stream order, so only now are they those the call sees):
// true when it may go on; else the fault is reported and made the device's sticky error, as a
// kernel's would be (compute-sanitizer reports such a copy on a GPU).
bool tensors_ok(const char* call, const char* what, const void* p, size_t bytes, int device) {
  if (bytes == 0) return true;
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  const Lookup l = look_up(a, bytes);
  if (l.kind != Lookup::pool_gap && l.kind != Lookup::returned) return true;
  report(std::string("cutrain-sim: ") + call + " outside its tensor\n    the " + what + ", " +
         std::to_string(bytes) + " bytes at " + hex(p) + ", " + describe_miss(l, a, bytes) +
         " (cudaErrorIllegalAddress when it ran; nothing was written)\n");
  devices()[size_t(device)].sticky = cudaErrorIllegalAddress;
  return false;
}

}  // namespace

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
  s.submit(Task{[dst, from, src, bytes, device, staged, call] {
                  if (sticky(device) != cudaSuccess ||
                      !tensors_ok(call, "destination", dst, bytes, device) ||
                      !tensors_ok(call, "source", src, bytes, device))
                    return;
                  std::memmove(dst, from, bytes);
                  copy_written(reinterpret_cast<uintptr_t>(dst), reinterpret_cast<uintptr_t>(src),
                               bytes);
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
                   if (sticky(device) == cudaSuccess &&
                       tensors_ok("cudaMemsetAsync", "memory", p, bytes, device)) {
                     std::memset(p, value, bytes);
                     mark_written(reinterpret_cast<uintptr_t>(p), bytes);
                   }
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
