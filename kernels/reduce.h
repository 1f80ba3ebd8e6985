// defines: sum, mean, sum of squares and the global norm of a set of tensors, on the CPU
// (sum_cpu, mean_cpu, sumsq_cpu, global_norm_cpu) and on the GPU (sum_gpu, mean_gpu,
// global_norm_gpu): the scalars a trainer watches (mean loss, gradient norm for clipping and
// for the log).
//
// Math: sum = Σ x[i];  mean = sum / n;  sumsq = Σ x[i]^2;
//       global_norm = sqrt(Σ over tensors t, Σ over i of x_t[i]^2)
// Launch: reduce.cu launches them: a fixed grid (G = min(1024, ceil(n / 1024)) blocks of
//   B = 256 threads, a function of n only, not of the device: reduce_gpu_blocks) sums into G
//   per-block partials in scratch memory, then one block adds the partials up: 2 launches;
//   global_norm_gpu one per 32 tensors, + 1.
// Bytes: sum_gpu_cost, mean_gpu_cost: sizeof(T) per element read once; global_norm_gpu_cost
//   the same over every tensor (the partials, 4 G bytes, are noise). Memory bound.
// Flops: sum_gpu_cost, mean_gpu_cost: 1 per element; global_norm_gpu_cost: 2 (a square, an add).
// Precision: below, for each device.
//
// CPU precision: every term widened to double and summed in order in double, so the result is
// within (n-1) 2^-53 Σ|terms| of the exact sum: ~1e-16 relative for any realistic n, far below
// the GPU's fp32 error, which makes it the reference.
//
// GPU: deterministic. Every addition happens in an order fixed by n (the grid above), with no
// atomics, so a run gives the same bits every time and on every GPU.
// GPU precision: fp32 throughout (fp16 inputs are widened exactly). Each thread adds
// k = ceil(n / (G B)) terms in sequence, a block adds its 256 sums in a tree of depth 8, the
// finishing thread adds ceil(G / B) <= 4 partials, then a tree of depth 8 again: every term
// passes through at most d = k + 20 roundings, so by the standard bound (Higham, ch. 4)
//   |sum_gpu - sum| <= d 2^-24 Σ|x[i]|       (to first order; d = reduce_gpu_depth(n))
// and the same with x^2 (one more rounding: d + 1) for the sum of squares. mean adds one
// rounding of the division; global_norm's square root halves the relative error of the sum
// and adds one rounding: |norm_gpu - norm| <= ((d+1)/2 + 1) 2^-24 norm. For n = 10^6,
// k = 4 and d = 24: about 1.4e-6 relative to Σ|x[i]|. global_norm_gpu runs the same scheme
// over the concatenation of up to 32 tensors a launch (a thread's sequence runs through
// them all), then one block adds every launch's partials: global_norm_gpu_depth. Cancellation
// (Σx small against Σ|x|) makes the error relative to Σx arbitrarily large: that is floating
// point, not a bug.
#pragma once
#include <cstdint>

#include "kernels/gpu.h"
#include "kernels/half.h"
#include "kernels/launch_plan.h"

namespace cutrain {

template <typename T> double sum_cpu(int64_t n, const T* x);
template <typename T> double mean_cpu(int64_t n, const T* x);   // n > 0
template <typename T> double sumsq_cpu(int64_t n, const T* x);
// ptrs (count) host pointers to tensors of sizes (count) elements.
template <typename T>
double global_norm_cpu(int count, const T* const* ptrs, const int64_t* sizes);

// The GPU's fixed launch shape (reduce.cu), here so that the error bounds can be computed on
// the host: blocks of kReduceBlock threads, at most kReduceMaxBlocks of them, at least
// 4 elements a thread; global_norm_gpu takes kReduceChunk tensors a launch.
constexpr int kReduceBlock = 256;
constexpr int kReduceMaxBlocks = 1024;
constexpr int kReduceChunk = 32;
inline int reduce_gpu_blocks(int64_t n) {
  const int64_t b = (n + 4 * kReduceBlock - 1) / (4 * kReduceBlock);
  return int(b < 1 ? 1 : b > kReduceMaxBlocks ? kReduceMaxBlocks : b);
}

// d, the most roundings one term goes through in sum_gpu / mean_gpu of n elements (above):
// the bounds are d 2^-24 Σ|x| for the sum, and (d+1) 2^-24 Σx^2 for a sum of squares.
int64_t reduce_gpu_depth(int64_t n);
// The same for global_norm_gpu over these tensors: (d+1) 2^-24 Σx^2 bounds the error of the
// sum of squares, so |norm_gpu - norm| <= ((d+1)/2 + 1) 2^-24 norm.
int64_t global_norm_gpu_depth(int count, const int64_t* sizes);

// --- GPU (CUDA builds only; device pointers; queued on stream) ---
// T = float or half_t. out is one float in device memory, written (not accumulated). Scratch
// for the partials comes from the caching allocator on the current device.

// sum_gpu, mean_gpu: 2 launches (the per-block partials, the finishing block), x read once.
template <typename T> void sum_gpu(int64_t n, const T* x, float* out, cudaStream_t stream);
inline LaunchCost sum_gpu_cost(int64_t n, size_t elem) {
  return {"sum", 2, nbytes(n, elem), double(n)};
}
// n > 0
template <typename T> void mean_gpu(int64_t n, const T* x, float* out, cudaStream_t stream);
inline LaunchCost mean_gpu_cost(int64_t n, size_t elem) {
  return {"mean", 2, nbytes(n, elem), double(n)};
}
// *out = sqrt(Σ_t Σ_i x_t[i]^2). ptrs and sizes are HOST arrays (count entries) of device
// pointers and their element counts, read during the call: the pointers travel to the
// device as kernel arguments (32 tensors a launch), so nothing is copied and the host never
// waits. count may be 0 (out = 0); tensors may be empty.
template <typename T>
void global_norm_gpu(int count, const T* const* ptrs, const int64_t* sizes, float* out,
                     cudaStream_t stream);
// One launch per kReduceChunk tensors, + 1 finishing block; total: the tensors' elements.
inline LaunchCost global_norm_gpu_cost(int count, int64_t total, size_t elem) {
  const int chunks = (count + kReduceChunk - 1) / kReduceChunk;
  return {"global_norm", chunks + 1, nbytes(total, elem), 2.0 * double(total)};
}

}  // namespace cutrain
