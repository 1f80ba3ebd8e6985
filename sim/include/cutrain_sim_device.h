// The device side of the simulator (sim/README.md), included by its <cuda_runtime.h>: the
// qualifiers, the built-in indices, barriers, warp shuffles, atomics and loads that the
// rewritten kernels (build/sim/gen/, made by sim/rewrite.py) call, and the launch that
// sim/rewrite.py writes in place of `kernel<<<grid, block, smem, stream>>>(args)`.
//
// Every thread of a block is a fiber (sim/scheduler.cpp): the functions below that a warp or the
// block must meet at (__syncthreads, __shfl_*_sync, the WMMA operations) switch to the block's
// scheduler, which resumes the threads once all of them have arrived, in a seeded random
// order, and reports a thread that never arrives.
#pragma once
#include <math.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <tuple>
#include <type_traits>
#include <typeinfo>
#include <utility>

// ---- qualifiers: one compilation serves host and device -------------------------------------
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __align__(n) alignas(n)
#define __restrict__ __restrict

// ---- the built-in indices: set by the scheduler before it resumes a thread ------------------
namespace cutrain_sim {
struct Builtins {
  uint3 thread_idx, block_idx;
  dim3 block_dim, grid_dim;
};
extern thread_local Builtins t_builtins;
}  // namespace cutrain_sim
#define threadIdx (::cutrain_sim::t_builtins.thread_idx)
#define blockIdx (::cutrain_sim::t_builtins.block_idx)
#define blockDim (::cutrain_sim::t_builtins.block_dim)
#define gridDim (::cutrain_sim::t_builtins.grid_dim)
constexpr int warpSize = 32;

namespace cutrain_sim {

// ---- block and warp meeting points (sim/collectives.cpp) ------------------------------------
enum class Collective { Barrier, ShflIdx, ShflUp, ShflDown, ShflXor, WarpSync };
// The block barrier; `pred` for __syncthreads_or/_count. Returns the count of threads whose
// pred was non-zero. `site` names the call ("file:line").
int block_barrier(int pred, const char* site);
// A warp collective: the lanes of `mask` meet; each gives `bits` and gets the bits of the lane
// its shuffle reads (`arg`: the source lane, delta or lane mask; `width`: the segment).
uint64_t warp_collective(Collective kind, unsigned mask, uint64_t bits, int arg, int width,
                         const char* site, const char* what);

// The memory checks every instrumented load and store goes through (sim/access.cpp), for code
// that checks its accesses itself (WMMA's loads and stores, sim/include/mma.h).
void check_memory(const void* p, size_t bytes, bool write);
// The calling thread's lane in its warp (its linear index in the block, modulo 32), and its
// warp's index in the block.
inline int lane_id() {
  const uint3 t = t_builtins.thread_idx;
  const dim3 b = t_builtins.block_dim;
  return int((t.x + b.x * (t.y + b.y * t.z)) % 32);
}
inline int warp_id() {
  const uint3 t = t_builtins.thread_idx;
  const dim3 b = t_builtins.block_dim;
  return int((t.x + b.x * (t.y + b.y * t.z)) / 32);
}

// ---- shared memory: per-block storage from the block's arena (sim/access.cpp) ---------------
// `site` names the declaration ("file:line name"); every thread of a block gets the same bytes,
// poisoned (0xff) until written.
void* shared_static_bytes(const char* site, const std::type_info& type, size_t bytes,
                          size_t align);
void* shared_dynamic_bytes();
template <class T, size_t Align = alignof(T)> T& static_shared(const char* site) {
  return *static_cast<T*>(shared_static_bytes(site, typeid(T), sizeof(T), Align));
}
template <class T> T* dynamic_shared() { return static_cast<T*>(shared_dynamic_bytes()); }

// ---- launch (sim/streams.cpp): checks the limits, then queues the grid on the stream -------
// `run(record)` runs one thread's share of the launch; `record` (the kernel and its arguments,
// `record_bytes` long) is what every thread reads (the checks let them read it, not write it).
using RunThread = void (*)(const void* record);
void launch_grid(const char* name, dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                 RunThread run, std::shared_ptr<const void> record, size_t record_bytes);

template <class Call, class Params> struct LaunchRecord {
  Call call;
  Params params;
};
template <class Record> void run_thread(const void* record) {
  const Record& r = *static_cast<const Record*>(record);
  auto params = r.params;  // the thread's own copy, on its stack
  auto call = r.call;
  std::apply(call, params);
}

// `kernel<<<grid, block, smem, stream>>>(args...)`, as sim/rewrite.py writes it:
//   launch("kernel", [=](auto&... a) { kernel(a...); }, grid, block, smem, stream, args...)
// The arguments are copied now (CUDA copies them at launch); each thread of the grid then
// calls the kernel on its own copy of them (the kernel's parameters are its own).
template <class Call, class... A>
void launch(const char* name, Call call, dim3 grid, dim3 block, size_t smem,
            cudaStream_t stream, A&&... args) {
  using Record = LaunchRecord<Call, std::tuple<std::decay_t<A>...>>;
  auto record = std::make_shared<const Record>(Record{call, {std::forward<A>(args)...}});
  launch_grid(name, grid, block, smem, stream, &run_thread<Record>, record, sizeof(Record));
}

template <class T> uint64_t to_bits(T v) {
  static_assert(sizeof(T) <= 8, "shuffles move at most 8 bytes");
  uint64_t b = 0;
  std::memcpy(&b, &v, sizeof(T));
  return b;
}
template <class T> T from_bits(uint64_t b) {
  T v;
  std::memcpy(&v, &b, sizeof(T));
  return v;
}

}  // namespace cutrain_sim

// ---- barriers and warp functions -------------------------------------------------------------
// Macros, so that each call names its place in the source ("kernels/reduce.cu:57"): threads
// meet at a barrier when they wait at the same call of the source, whatever copies of the
// call the compiler made.
#define CUTRAIN_SIM_STR2(x) #x
#define CUTRAIN_SIM_STR(x) CUTRAIN_SIM_STR2(x)
#define CUTRAIN_SIM_HERE __FILE__ ":" CUTRAIN_SIM_STR(__LINE__)
namespace cutrain_sim {
template <class T>
T shuffle(const char* site, const char* what, Collective kind, unsigned mask, T v, int arg,
          int width = warpSize) {
  return from_bits<T>(warp_collective(kind, mask, to_bits(v), arg, width, site, what));
}
}  // namespace cutrain_sim
#define __syncthreads() ((void)::cutrain_sim::block_barrier(0, CUTRAIN_SIM_HERE))
#define __syncthreads_or(pred) (::cutrain_sim::block_barrier((pred) != 0, CUTRAIN_SIM_HERE) > 0)
#define __syncthreads_count(pred) ::cutrain_sim::block_barrier((pred) != 0, CUTRAIN_SIM_HERE)
#define __syncwarp(...)                                                                      \
  ((void)::cutrain_sim::warp_collective(::cutrain_sim::Collective::WarpSync,                 \
                                        ::cutrain_sim::full_mask(__VA_ARGS__), 0, 0, 32,     \
                                        CUTRAIN_SIM_HERE, "__syncwarp"))
#define CUTRAIN_SIM_SHUFFLE(name, kind, ...) \
  ::cutrain_sim::shuffle(CUTRAIN_SIM_HERE, name, ::cutrain_sim::Collective::kind, __VA_ARGS__)
#define __shfl_sync(...) CUTRAIN_SIM_SHUFFLE("__shfl_sync", ShflIdx, __VA_ARGS__)
#define __shfl_up_sync(...) CUTRAIN_SIM_SHUFFLE("__shfl_up_sync", ShflUp, __VA_ARGS__)
#define __shfl_down_sync(...) CUTRAIN_SIM_SHUFFLE("__shfl_down_sync", ShflDown, __VA_ARGS__)
#define __shfl_xor_sync(...) CUTRAIN_SIM_SHUFFLE("__shfl_xor_sync", ShflXor, __VA_ARGS__)
namespace cutrain_sim {
inline unsigned full_mask(unsigned mask = 0xffffffffu) { return mask; }
}  // namespace cutrain_sim

// ---- memory: fences, cache-hinted loads, atomics ----------------------------------------------
// Streams run on host threads of their own, so two kernels may really run at once: the atomics
// are the host's, every access of theirs an atomic one (a plain read of the old value would
// race with another thread's atomic, sim/racecheck.cpp). The fences are full host fences (the simulator cannot show weaker orders),
// called out of line: the instrumented code may not hold a fence of its own (GCC's
// -fsanitize=thread does not support one, sim/hooks.cpp).
namespace cutrain_sim {
void thread_fence();
}  // namespace cutrain_sim
inline void __threadfence() { ::cutrain_sim::thread_fence(); }
inline void __threadfence_block() { ::cutrain_sim::thread_fence(); }
template <class T> T __ldcg(const T* p) { return *p; }
template <class T> T __ldg(const T* p) { return *p; }
template <class T> T __ldca(const T* p) { return *p; }
template <class T> T __ldcs(const T* p) { return *p; }
template <class T> void __stcg(T* p, T v) { *p = v; }

template <class T> T atomicAdd(T* p, T v) {
  if constexpr (std::is_integral<T>::value) {
    return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST);
  } else {  // float, double: a compare-and-swap loop
    T old, want;
    __atomic_load(p, &old, __ATOMIC_SEQ_CST);
    do {
      want = old + v;
    } while (!__atomic_compare_exchange(p, &old, &want, false, __ATOMIC_SEQ_CST,
                                        __ATOMIC_SEQ_CST));
    return old;
  }
}
template <class T> T atomicSub(T* p, T v) { return __atomic_fetch_sub(p, v, __ATOMIC_SEQ_CST); }
template <class T> T atomicOr(T* p, T v) { return __atomic_fetch_or(p, v, __ATOMIC_SEQ_CST); }
template <class T> T atomicAnd(T* p, T v) { return __atomic_fetch_and(p, v, __ATOMIC_SEQ_CST); }
template <class T> T atomicExch(T* p, T v) { return __atomic_exchange_n(p, v, __ATOMIC_SEQ_CST); }
template <class T> T atomicMax(T* p, T v) {
  T old;
  __atomic_load(p, &old, __ATOMIC_SEQ_CST);
  while (old < v && !__atomic_compare_exchange_n(p, &old, v, false, __ATOMIC_SEQ_CST,
                                                 __ATOMIC_SEQ_CST)) {
  }
  return old;
}
template <class T> T atomicMin(T* p, T v) {
  T old;
  __atomic_load(p, &old, __ATOMIC_SEQ_CST);
  while (old > v && !__atomic_compare_exchange_n(p, &old, v, false, __ATOMIC_SEQ_CST,
                                                 __ATOMIC_SEQ_CST)) {
  }
  return old;
}
template <class T> T atomicCAS(T* p, T compare, T v) {
  __atomic_compare_exchange_n(p, &compare, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
  return compare;  // the old value either way
}
// ((old >= limit) ? 0 : old + 1), as CUDA's atomicInc
inline unsigned atomicInc(unsigned* p, unsigned limit) {
  unsigned old = __atomic_load_n(p, __ATOMIC_SEQ_CST);
  while (!__atomic_compare_exchange_n(p, &old, old >= limit ? 0u : old + 1, false,
                                      __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
  }
  return old;
}

// ---- arithmetic: the _rn intrinsics, one IEEE operation each, never fused -------------------
// The SIM build compiles with -ffp-contract=off (as the CPU build), so these are exactly the
// GPU's correctly rounded operations on SSE.
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fsqrt_rn(float a) { return std::sqrt(a); }
inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }
inline float __frcp_rn(float a) { return 1.0f / a; }
inline double __dadd_rn(double a, double b) { return a + b; }
inline double __dsub_rn(double a, double b) { return a - b; }
inline double __dmul_rn(double a, double b) { return a * b; }
inline double __ddiv_rn(double a, double b) { return a / b; }
inline double __dsqrt_rn(double a) { return std::sqrt(a); }
inline double __fma_rn(double a, double b, double c) { return std::fma(a, b, c); }
inline float rsqrtf(float a) { return 1.0f / std::sqrt(a); }
inline float __int_as_float(int i) { return ::cutrain_sim::from_bits<float>(uint32_t(i)); }
inline int __float_as_int(float f) { return int(uint32_t(::cutrain_sim::to_bits(f))); }
inline unsigned __float_as_uint(float f) { return uint32_t(::cutrain_sim::to_bits(f)); }
inline float __uint_as_float(unsigned u) { return ::cutrain_sim::from_bits<float>(u); }

// CUDA's min and max for device code: overloads in the global namespace.
#define CUTRAIN_SIM_MINMAX(T)                          \
  inline T min(T a, T b) { return b < a ? b : a; }     \
  inline T max(T a, T b) { return a < b ? b : a; }
CUTRAIN_SIM_MINMAX(int)
CUTRAIN_SIM_MINMAX(unsigned)
CUTRAIN_SIM_MINMAX(long)
CUTRAIN_SIM_MINMAX(unsigned long)
CUTRAIN_SIM_MINMAX(long long)
CUTRAIN_SIM_MINMAX(unsigned long long)
#undef CUTRAIN_SIM_MINMAX
inline float min(float a, float b) { return std::fmin(a, b); }
inline float max(float a, float b) { return std::fmax(a, b); }
inline double min(double a, double b) { return std::fmin(a, b); }
inline double max(double a, double b) { return std::fmax(a, b); }
