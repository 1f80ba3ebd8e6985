// defines: ring_reduce_cpu, the reduce step of the ring all-reduce (train/replicas/ring.h): one
// chunk of a neighbour's gradients, just received, added into this replica's own chunk.
//
// Math: per element: dst[i] = T((A(dst[i]) + A(src[i])) * scale), A = acc_t<T> (fp32 for
//   fp16 and fp32, fp64 for fp64). scale is 1 for every step of the reduce-scatter but the
//   last, where it is 1/R: the sum of R replicas' gradients becomes their average in the same
//   pass, one rounding, no extra sweep over the buffer. (a + b) * 1 is a + b exactly.
//   ring_scale_cpu / ring_scale_gpu: dst[i] = T(A(dst[i]) * scale), the average's 1/R after a
//   sum that someone else did: NCCL's (train/replicas/mpi_gpu.h), which sums first as the
//   rings do.
//   ring_or_cpu / ring_or_gpu: dst[i] |= src[i] on int32: the overflow flags of the loss
//   scaler OR-ed across replicas by the same ring (an inf anywhere skips the step everywhere).
// Launch: ring_reduce.cu launches them: one kernel each, a thread per element, none for n = 0.
// Bytes: ring_reduce_gpu_cost 2 reads and 1 write of n elements; ring_or_gpu_cost the same of
//   int32; ring_scale_gpu_cost a read and a write. Memory-bound: on a GPU it runs at copy
//   bandwidth and hides behind the peer copy of the next chunk.
// Flops: ring_reduce_gpu_cost 2n (n with scale 1), ring_or_gpu_cost n, ring_scale_gpu_cost n.
// Precision: fp16 chunks are added in fp32 and rounded back to fp16 once per ring step, so a
//   sum over R replicas is rounded R-1 times (each at most half an fp16 ulp). The GPU gives
//   the CPU's bits (below).
//
// GPU twin: ring_reduce_gpu (ring_reduce.cu), queued by the CUDA ring
// (train/replicas/device_ring.h) on a replica's comm stream after the copy of the neighbour's chunk
// into its receive buffer. It gives the same bits as ring_reduce_cpu: the same two operations per
// element in the same order, (dst + src) then * scale only when scale != 1, each rounded once (the
// _rn intrinsics of kernels/hd.h, so nvcc cannot fuse them), scale rounded to A on the host as
// here, and fp16 rounded back with __float2half_rn (nearest even, as half_t(float)).
#pragma once
#include <cstdint>

#include "kernels/gpu.h"
#include "kernels/half.h"
#include "kernels/launch_plan.h"

namespace cutrain {

template <typename T> void ring_reduce_cpu(int64_t n, T* dst, const T* src, double scale);
void ring_or_cpu(int64_t n, int32_t* dst, const int32_t* src);
template <typename T> void ring_scale_cpu(int64_t n, T* dst, double scale);

// --- GPU (CUDA builds only; device pointers; queued on stream) ---
// T = float, half_t or double. dst and src may be any element offset (no alignment needed:
// ring chunks start anywhere); they must not overlap.
// Each: 1 launch, none when n = 0.
template <typename T>
void ring_reduce_gpu(int64_t n, T* dst, const T* src, double scale, cudaStream_t stream);
inline LaunchCost ring_reduce_gpu_cost(int64_t n, size_t elem) {  // flops: with scale != 1
  return {"ring_reduce", n > 0 ? 1 : 0, 3 * nbytes(n, elem), 2.0 * double(n)};
}
void ring_or_gpu(int64_t n, int32_t* dst, const int32_t* src, cudaStream_t stream);
inline LaunchCost ring_or_gpu_cost(int64_t n) {
  return {"ring_or", n > 0 ? 1 : 0, 3 * nbytes(n, sizeof(int32_t)), double(n)};
}
template <typename T> void ring_scale_gpu(int64_t n, T* dst, double scale, cudaStream_t stream);
inline LaunchCost ring_scale_gpu_cost(int64_t n, size_t elem) {
  return {"ring_scale", n > 0 ? 1 : 0, 2 * nbytes(n, elem), double(n)};
}

}  // namespace cutrain
