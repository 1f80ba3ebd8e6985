// Deterministic reductions on the GPU: sum, mean, global norm.
//
// Math: reduce.h (the CPU reference sums in double: sum_cpu, mean_cpu, global_norm_cpu).
// Launch: two launches, no atomics, so the same input gives the same bits on every run:
//  1. reduce_partial_kernel / sumsq_chunk_kernel, grid G = reduce_gpu_blocks(n) (a function of
//     n only) x 256 threads: thread t adds elements t, t + G*256, t + 2*G*256, ... in that
//     order (four loads in flight a step, added in index order), the block adds its 256
//     thread sums in a fixed tree (warp shuffles, then the 8 warp sums), and thread 0 writes
//     the block's partial to scratch.
//  2. reduce_finish_kernel, one block: thread t adds partials t, t + 256, ...; the same tree;
//     thread 0 writes the sum, the mean or the square root.
// Bytes: sizeof(T) per element read once, 4 G bytes of partials (reduce.h: sum_gpu_cost,
//   mean_gpu_cost, global_norm_gpu_cost). Memory bound: G*256 threads with 4 loads each in
//   flight keep an H100's memory busy (n >= 2^20 gives the full 1024 blocks).
// Flops: 1 (sum_gpu_cost, mean_gpu_cost) or 2 (global_norm_gpu_cost) per element.
// Precision: fp32 throughout, in an order fixed by n; the error bounds in reduce.h.
#include <cuda_fp16.h>

#include <algorithm>
#include <type_traits>
#include <vector>

#include "kernels/check.h"
#include "kernels/cuda_util.cuh"
#include "kernels/hd.h"
#include "kernels/reduce.h"

namespace cutrain {

template <bool Square> __device__ inline float term(float v) { return Square ? v * v : v; }

// acc + x[tid] + x[tid + stride] + ... in this order (n elements, fp32).
template <bool Square, typename TD>
__device__ float thread_sum(const TD* x, int64_t n, int64_t tid, int64_t stride, float acc) {
  int64_t i = tid;
  for (; i + 3 * stride < n; i += 4 * stride) {
    const float a = to_acc(x[i]), b = to_acc(x[i + stride]);
    const float c = to_acc(x[i + 2 * stride]), d = to_acc(x[i + 3 * stride]);
    acc += term<Square>(a);
    acc += term<Square>(b);
    acc += term<Square>(c);
    acc += term<Square>(d);
  }
  for (; i < n; i += stride) acc += term<Square>(to_acc(x[i]));
  return acc;
}

// The sum of v over the block's 256 threads, in a fixed tree; valid in thread 0 only.
// Called once per kernel (its shared array is not reused).
__device__ float block_sum(float v) {
  __shared__ float warp_sums[kReduceBlock / 32];
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  if ((threadIdx.x & 31) == 0) warp_sums[threadIdx.x >> 5] = v;
  __syncthreads();
  if (threadIdx.x < 32) {
    v = threadIdx.x < kReduceBlock / 32 ? warp_sums[threadIdx.x] : 0.0f;
    for (int o = kReduceBlock / 64; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  }
  return v;
}

template <bool Square, typename TD>
__global__ void reduce_partial_kernel(int64_t n, const TD* x, float* partial) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  const int64_t tid = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const float s = block_sum(thread_sum<Square>(x, n, tid, stride, 0.0f));
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

// Up to kReduceChunk tensors, passed by value as a kernel argument (no copy to the device).
struct TensorChunk {
  const void* ptr[kReduceChunk];
  int64_t size[kReduceChunk];
  int count;
};

// Σ x^2 over the chunk's tensors, one after the other in each thread's sequence.
template <typename TD>
__global__ void sumsq_chunk_kernel(TensorChunk chunk, float* partial) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  const int64_t tid = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  float acc = 0.0f;
  for (int t = 0; t < chunk.count; t++)
    acc = thread_sum<true>(static_cast<const TD*>(chunk.ptr[t]), chunk.size[t], tid, stride, acc);
  const float s = block_sum(acc);
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

enum class Finish : int { sum, mean, norm };

// One block: the partials' sum, then *out = sum, sum / n or sqrt(sum).
__global__ void reduce_finish_kernel(int count, const float* partial, Finish what, int64_t n,
                                     float* out) {
  float acc = 0.0f;
  for (int i = threadIdx.x; i < count; i += blockDim.x) acc += partial[i];
  const float s = block_sum(acc);
  if (threadIdx.x != 0) return;
  if (what == Finish::sum) *out = s;
  else if (what == Finish::mean) *out = float(double(s) / double(n));  // one rounding
  else *out = __fsqrt_rn(s);
}

template <bool Square, typename T>
static void reduce_gpu(int64_t n, const T* x, Finish what, float* out, cudaStream_t stream) {
  CHECK(n >= 0, "reduction of " << n << " elements");
  const int blocks = reduce_gpu_blocks(n);
  DeviceBuffer partial(sizeof(float) * size_t(blocks), current_device(), stream);
  float* p = static_cast<float*>(partial.data());
  reduce_partial_kernel<Square><<<blocks, kReduceBlock, 0, stream>>>(
      n, dev(x), p);
  LAUNCH_CHECK();
  reduce_finish_kernel<<<1, kReduceBlock, 0, stream>>>(blocks, p, what, n, out);
  LAUNCH_CHECK();
  // `partial` goes back to the pool tied to `stream`: the next user on that stream is queued
  // after these kernels, so the reuse is safe without a synchronisation.
}

template <typename T> void sum_gpu(int64_t n, const T* x, float* out, cudaStream_t stream) {
  reduce_gpu<false>(n, x, Finish::sum, out, stream);
}

template <typename T> void mean_gpu(int64_t n, const T* x, float* out, cudaStream_t stream) {
  CHECK(n > 0, "mean of " << n << " elements: need at least one");
  reduce_gpu<false>(n, x, Finish::mean, out, stream);
}

template <typename T>
void global_norm_gpu(int count, const T* const* ptrs, const int64_t* sizes, float* out,
                     cudaStream_t stream) {
  CHECK(count >= 0, "global norm of " << count << " tensors");
  // one launch per chunk of kReduceChunk tensors; chunk c writes blocks[c] partials at
  // offset[c], so the finishing block adds them all in a fixed order
  std::vector<int> blocks;
  int total_blocks = 0;
  for (int t0 = 0; t0 < count; t0 += kReduceChunk) {
    int64_t total = 0;
    for (int t = t0; t < std::min(count, t0 + kReduceChunk); t++) {
      CHECK(sizes[t] >= 0, "global norm: tensor " << t << " has " << sizes[t] << " elements");
      total += sizes[t];
    }
    blocks.push_back(reduce_gpu_blocks(total));
    total_blocks += blocks.back();
  }
  DeviceBuffer partial(sizeof(float) * size_t(std::max(1, total_blocks)), current_device(),
                       stream);
  float* p = static_cast<float*>(partial.data());
  int offset = 0;
  for (size_t c = 0; c < blocks.size(); c++) {
    TensorChunk chunk{};
    const int t0 = int(c) * kReduceChunk;
    chunk.count = std::min(kReduceChunk, count - t0);
    for (int t = 0; t < chunk.count; t++) {
      chunk.ptr[t] = ptrs[t0 + t];
      chunk.size[t] = sizes[t0 + t];
    }
    sumsq_chunk_kernel<storage_t<T>><<<blocks[c], kReduceBlock, 0, stream>>>(chunk, p + offset);
    LAUNCH_CHECK();
    offset += blocks[c];
  }
  reduce_finish_kernel<<<1, kReduceBlock, 0, stream>>>(total_blocks, p, Finish::norm, 0, out);
  LAUNCH_CHECK();
}

#define CUTRAIN_INSTANTIATE(T)                                                             \
  template void sum_gpu<T>(int64_t, const T*, float*, cudaStream_t);                       \
  template void mean_gpu<T>(int64_t, const T*, float*, cudaStream_t);                      \
  template void global_norm_gpu<T>(int, const T* const*, const int64_t*, float*, cudaStream_t);
CUTRAIN_INSTANTIATE(float)
CUTRAIN_INSTANTIATE(half_t)
#undef CUTRAIN_INSTANTIATE

}  // namespace cutrain
