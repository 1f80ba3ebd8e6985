// defines: what the elementwise, batchnorm, pool and softmax kernels share (device code only):
// the storage type a kernel sees for T (storage_t: half_t -> __half), to_acc / from_acc
// (widen to fp32, round back to nearest even), Pack128 (16-byte vector loads and stores, as in
// llm.c) and grid_size (a capped grid for grid-stride loops).
//
// Included only by .cu files.
#pragma once
#include <cuda_fp16.h>

#include <cstdint>
#include <cstring>

#include "kernels/check.h"
#include "kernels/gpu.h"
#include "kernels/half.h"

namespace cutrain {

// The type a kernel works on for the host type T: half_t is bit-compatible with __half.
template <typename T> struct storage_type { using type = T; };
template <> struct storage_type<half_t> { using type = __half; };
template <typename T> using storage_t = typename storage_type<T>::type;

template <typename T> const storage_t<T>* dev(const T* p) {
  return reinterpret_cast<const storage_t<T>*>(p);
}
template <typename T> storage_t<T>* dev(T* p) { return reinterpret_cast<storage_t<T>*>(p); }

// Widen to fp32 (exact) and round back to the storage type (nearest even, overflow to inf),
// the same conversions as acc_t<T>(x) and T(a) on the CPU.
__device__ __forceinline__ float to_acc(float x) { return x; }
__device__ __forceinline__ float to_acc(__half x) { return __half2float(x); }
template <typename S> __device__ __forceinline__ S from_acc(float a);
template <> __device__ __forceinline__ float from_acc<float>(float a) { return a; }
template <> __device__ __forceinline__ __half from_acc<__half>(float a) {
  return __float2half_rn(a);
}

// 16 bytes of S (4 floats or 8 halves), loaded and stored as one 128-bit access. The address
// must be 16-byte aligned. The payload is moved through an int4 with memcpy, the portable way
// to reinterpret bits, which the compiler turns into a register move.
template <typename S> struct alignas(16) Pack128 {
  static constexpr int size = 16 / sizeof(S);
  S v[size];
};
template <typename S> __device__ __forceinline__ Pack128<S> load128(const S* p) {
  const int4 bits = *reinterpret_cast<const int4*>(p);
  Pack128<S> out;
  memcpy(&out, &bits, 16);
  return out;
}
template <typename S> __device__ __forceinline__ void store128(S* p, const Pack128<S>& v) {
  int4 bits;
  memcpy(&bits, &v, 16);
  *reinterpret_cast<int4*>(p) = bits;
}
inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Blocks for `work` items at `block` threads each, capped at 4096: enough to fill any current
// GPU (132 SMs x 2048 threads = 1056 blocks of 256); the kernels loop (grid-stride) beyond.
inline int grid_size(int64_t work, int block) {
  const int64_t blocks = (work + block - 1) / block;
  return int(blocks < 1 ? 1 : blocks > 4096 ? 4096 : blocks);
}

// Called by every thread of the block, after the block has written what the last block will
// read: true in every thread of the one block of `blocks` sharing *counter that arrives last.
// That block may then read what the others wrote (through __ldcg, past the L1, which is not
// kept coherent between SMs) and finish the work (CUDA's threadFenceReduction sample: each
// writer's __threadfence makes its writes visible to the device before its block counts
// itself). The last block sets *counter back to 0 for the next kernel on the stream
// (arrival_counters, kernels/gpu.h). Every block of the group must call it: an early return
// before it would leave the counter short and the finish never done.
__device__ __forceinline__ bool last_block_to_arrive(unsigned* counter, unsigned blocks) {
  __shared__ bool last;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0) {
    last = atomicAdd(counter, 1u) == blocks - 1;
    if (last) *counter = 0;  // every block of the group has counted: none reads it again
  }
  __syncthreads();
  if (last) __threadfence();
  return last;
}

}  // namespace cutrain
