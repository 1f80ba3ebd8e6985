// defines: what the conv2d / linear kernels share on the device side: dev_t<T> (the CUDA type
// that a host storage type is handed to kernels as: half_t -> __half), to_f / from_f (widen
// to fp32, round back once), and blocks_for (a 1-D grid for a grid-stride loop).
//
// CUDA sources only (.cu): it includes cuda_fp16.h.
#pragma once
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "kernels/half.h"

namespace cutrain {

// half_t is bit-compatible with __half (kernels/half.h), so a half_t* is reinterpret_cast to
// __half* at the launcher; float stays float.
template <typename T> struct dev_type { using type = T; };
template <> struct dev_type<half_t> { using type = __half; };
template <typename T> using dev_t = typename dev_type<T>::type;

template <typename T> inline dev_t<T>* dev_ptr(T* p) { return reinterpret_cast<dev_t<T>*>(p); }
template <typename T> inline const dev_t<T>* dev_ptr(const T* p) {
  return reinterpret_cast<const dev_t<T>*>(p);
}

__device__ __forceinline__ float to_f(float v) { return v; }
__device__ __forceinline__ float to_f(__half v) { return __half2float(v); }

// fp32 -> storage, rounding to nearest even (as half_t(float) does on the host).
template <typename D> __device__ __forceinline__ D from_f(float v);
template <> __device__ __forceinline__ float from_f<float>(float v) { return v; }
template <> __device__ __forceinline__ __half from_f<__half>(float v) {
  return __float2half_rn(v);
}

// Blocks for a grid-stride loop over n elements: enough to fill any GPU, capped so the
// block count always fits gridDim.x.
inline int blocks_for(int64_t n, int block) {
  const int64_t b = (n + block - 1) / block;
  return int(b < 65535 * 8 ? (b > 0 ? b : 1) : 65535 * 8);
}

}  // namespace cutrain
