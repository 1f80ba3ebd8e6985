// Asynchronous copies from global to shared memory (cp.async, through CUDA's pipeline
// primitives: sim/include/cuda_pipeline_primitives.h), emulated with their rule. A copy is
// issued by one thread: its source is read then (checked as that thread's read, and kept),
// and its destination is checked and marked in flight (access.cpp: a read of it, or another
// write to it, is reported). A commit closes the thread's open group. __pipeline_wait_prior(n) returns
// when all but the newest n committed groups have landed: here, their bytes are copied then, in
// the order issued, as that thread's writes (so the race check sees them where a GPU makes them
// visible to the thread). A copy never waited for never lands: nothing may read it anyway.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "sim/block.h"

namespace cutrain_sim {

using namespace dev;

void pipeline_memcpy_async(void* dst_shared, const void* src_global, size_t bytes, size_t zfill,
                           const void* at) {
  Fiber* f = t_fiber;
  Block* b = t_block;
  if (!f) {
    std::fprintf(stderr, "cutrain-sim: __pipeline_memcpy_async called outside a kernel\n");
    std::abort();
  }
  const uintptr_t dst = reinterpret_cast<uintptr_t>(dst_shared);
  const uintptr_t src = reinterpret_cast<uintptr_t>(src_global);
  const uintptr_t arena = reinterpret_cast<uintptr_t>(b->arena);
  if (bytes != 4 && bytes != 8 && bytes != 16)
    fail_access(at, cudaErrorLaunchFailure, "__pipeline_memcpy_async: a copy of 4, 8 or 16 bytes",
           std::to_string(bytes) + " bytes asked for");
  if (zfill > bytes)
    fail_access(at, cudaErrorLaunchFailure, "__pipeline_memcpy_async: zfill past the copy",
           std::to_string(zfill) + " bytes of zeros in a copy of " + std::to_string(bytes));
  if (dst < arena || dst >= arena + kArenaBytes)
    fail_access(at, cudaErrorLaunchFailure, "__pipeline_memcpy_async: the destination is not shared memory",
           "destination " + hex(dst));
  if (src >= arena && src < arena + kArenaBytes)
    fail_access(at, cudaErrorLaunchFailure, "__pipeline_memcpy_async: the source is shared memory, not global",
           "source " + hex(src));
  if (dst % bytes || src % bytes)
    fail_access(at, cudaErrorMisalignedAddress, "__pipeline_memcpy_async: misaligned copy",
                "a copy of " + std::to_string(bytes) + " bytes from " + hex(src) + " to " +
                    hex(dst) + ": both must be multiples of " + std::to_string(bytes));
  if (bytes > zfill) check_access(src, bytes - zfill, false, at, false);
  check_access(dst, bytes, true, at, false);  // its bounds, and a write of this thread's now
  std::memset(&b->written[dst - arena], kInFlight, bytes);
  AsyncCopy c{dst, bytes, zfill, {}, f->groups, at};
  std::memcpy(c.data, src_global, bytes - zfill);
  std::memset(c.data + (bytes - zfill), 0, zfill);
  f->copies.push_back(c);
}

void pipeline_commit() {
  if (t_fiber) t_fiber->groups++;
}

void pipeline_wait_prior(size_t prior, const void* at) {
  Fiber* f = t_fiber;
  Block* b = t_block;
  if (!f) {
    std::fprintf(stderr, "cutrain-sim: __pipeline_wait_prior called outside a kernel\n");
    std::abort();
  }
  // The groups numbered below `landed` are complete: all but the newest `prior` committed.
  const uint32_t landed = f->groups > prior ? f->groups - uint32_t(prior) : 0;
  const uintptr_t arena = reinterpret_cast<uintptr_t>(b->arena);
  size_t kept = 0;
  for (size_t i = 0; i < f->copies.size(); i++) {
    const AsyncCopy c = f->copies[i];
    if (c.group >= landed) {
      f->copies[kept++] = c;
      continue;
    }
    std::memcpy(reinterpret_cast<void*>(c.dst), c.data, c.bytes);
    std::memset(&b->written[c.dst - arena], kWritten, c.bytes);
    check_access(c.dst, c.bytes, true, at, false);  // delivered: this thread's write, now
  }
  f->copies.resize(kept);
}

}  // namespace cutrain_sim
