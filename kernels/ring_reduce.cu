// ring_reduce on the GPU: the reduce step of the CUDA ring all-reduce
// (train/replicas/device_ring.h).
//
// Math: ring_reduce.h. Must equal ring_reduce_cpu / ring_or_cpu / ring_scale_cpu bit for bit.
// Launch: one thread per element, grid-stride loop, 256 threads a block, at most 4096 blocks
// (grid_size). Scalar loads: a chunk starts at any element offset, so 16-byte vector accesses
// would need a peeled head; the kernel is memory-bound either way and hides behind the copy
// of the next chunk.
// Bytes: ring_reduce_gpu_cost (ring_reduce.h): 2 reads and 1 write of n elements; ring_or_gpu_cost
//   the same; ring_scale_gpu_cost a read and a write. Memory-bound.
// Flops: ring_reduce_gpu_cost 2n (n with scale 1); ring_or_gpu_cost, ring_scale_gpu_cost n.
// Precision: per element, A = acc_t<T>: v = add_rn(A(dst), A(src)); if scale != 1,
// v = mul_rn(v, scale); dst = T(v). The same operations in the same order as ring_reduce_cpu,
// each correctly rounded and never fused (hd.h), the fp16 store rounding to nearest even as
// half_t(float) does: the same bits.
#include <cuda_fp16.h>

#include "kernels/check.h"
#include "kernels/cuda_util.cuh"
#include "kernels/hd.h"
#include "kernels/ring_reduce.h"

namespace cutrain {

namespace {
constexpr int kReduceBlock = 256;

// Widen to A and round back, for the three storage types (fp16 through cuda_util.cuh).
template <typename S, typename A> __device__ __forceinline__ A widen(S x) { return to_acc(x); }
template <> __device__ __forceinline__ double widen<double, double>(double x) { return x; }
template <typename S, typename A> __device__ __forceinline__ S narrow(A a) {
  return from_acc<S>(a);
}
template <> __device__ __forceinline__ double narrow<double, double>(double a) { return a; }

// dst[i] = S((A(dst[i]) + A(src[i])) * scale), the multiply skipped when scaled is false
// (ring_reduce_cpu's two loops).
template <typename S, typename A>
__global__ void ring_reduce_kernel(int64_t n, S* dst, const S* src, A scale, bool scaled) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    A v = add_rn(widen<S, A>(dst[i]), widen<S, A>(src[i]));
    if (scaled) v = mul_rn(v, scale);
    dst[i] = narrow<S, A>(v);
  }
}

// dst[i] = S(A(dst[i]) * scale) (ring_scale_cpu).
template <typename S, typename A> __global__ void ring_scale_kernel(int64_t n, S* dst, A scale) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = narrow<S, A>(mul_rn(widen<S, A>(dst[i]), scale));
}

__global__ void ring_or_kernel(int64_t n, int32_t* dst, const int32_t* src) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    dst[i] |= src[i];
}
}  // namespace

template <typename T>
void ring_reduce_gpu(int64_t n, T* dst, const T* src, double scale, cudaStream_t stream) {
  CHECK(n >= 0, "ring_reduce_gpu of " << n << " elements");
  if (n == 0) return;
  using A = acc_t<T>;
  const A s = A(scale);  // rounded on the host, as ring_reduce_cpu does
  ring_reduce_kernel<storage_t<T>, A><<<grid_size(n, kReduceBlock), kReduceBlock, 0, stream>>>(
      n, dev(dst), dev(src), s, s != A(1));
  LAUNCH_CHECK();
}

void ring_or_gpu(int64_t n, int32_t* dst, const int32_t* src, cudaStream_t stream) {
  CHECK(n >= 0, "ring_or_gpu of " << n << " elements");
  if (n == 0) return;
  ring_or_kernel<<<grid_size(n, kReduceBlock), kReduceBlock, 0, stream>>>(n, dst, src);
  LAUNCH_CHECK();
}

template <typename T> void ring_scale_gpu(int64_t n, T* dst, double scale, cudaStream_t stream) {
  CHECK(n >= 0, "ring_scale_gpu of " << n << " elements");
  if (n == 0) return;
  using A = acc_t<T>;
  ring_scale_kernel<storage_t<T>, A><<<grid_size(n, kReduceBlock), kReduceBlock, 0, stream>>>(
      n, dev(dst), A(scale));
  LAUNCH_CHECK();
}

template void ring_scale_gpu<float>(int64_t, float*, double, cudaStream_t);
template void ring_scale_gpu<half_t>(int64_t, half_t*, double, cudaStream_t);
template void ring_scale_gpu<double>(int64_t, double*, double, cudaStream_t);
template void ring_reduce_gpu<float>(int64_t, float*, const float*, double, cudaStream_t);
template void ring_reduce_gpu<half_t>(int64_t, half_t*, const half_t*, double, cudaStream_t);
template void ring_reduce_gpu<double>(int64_t, double*, const double*, double, cudaStream_t);

}  // namespace cutrain
