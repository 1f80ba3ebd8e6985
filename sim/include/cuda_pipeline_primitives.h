// The simulator's stand-in for CUDA's <cuda_pipeline_primitives.h> (sim/README.md): the
// asynchronous copies from global to shared memory (cp.async) and their commit and wait groups,
// emulated with their rule (sim/pipeline.cpp): the source is read when the copy is issued, and
// the bytes arrive in shared memory only when a __pipeline_wait_prior that covers the copy's
// group returns; until then a read of them is reported.
#pragma once
#include <cstddef>

namespace cutrain_sim {
void pipeline_memcpy_async(void* dst_shared, const void* src_global, size_t size_and_align,
                           size_t zfill, const void* at);
void pipeline_commit();
void pipeline_wait_prior(size_t prior, const void* at);
}  // namespace cutrain_sim

__attribute__((noinline)) inline void __pipeline_memcpy_async(void* dst_shared,
                                                              const void* src_global,
                                                              size_t size_and_align,
                                                              size_t zfill = 0) {
  ::cutrain_sim::pipeline_memcpy_async(dst_shared, src_global, size_and_align, zfill,
                                       __builtin_return_address(0));
}
inline void __pipeline_commit() { ::cutrain_sim::pipeline_commit(); }
__attribute__((noinline)) inline void __pipeline_wait_prior(size_t prior) {
  ::cutrain_sim::pipeline_wait_prior(prior, __builtin_return_address(0));
}
