// defines: relu and add, forward and backward, and average (y = (a + b) / 2, for inference:
// test-time flips average an image's logits with its mirror's, train/engine/evaluate.h); CPU
// reference and GPU.
//
// Math: per element i < n:
//   relu      y = max(x, 0)           relu backward  dx += dy * (y > 0)
//   add       y = a + b               accumulate     dx += dy (add's backward, either input)
//   average   y = (a + b) / 2
//   Backward functions *accumulate* into their gradient outputs (dx += ...), the rule for
//   every backward in kernels/: autograd then needs no temporaries to sum the gradients of a
//   tensor used twice.
// Launch: elementwise.cu launches them: each entry point is one map_kernel (launch_map), none
//   when n <= 0.
// Bytes: n elements of sizeof(T), each tensor read or written once:
//   relu_forward_gpu_cost    2*n*sizeof(T)  (x read, y written)
//   relu_backward_gpu_cost   4*n*sizeof(T)  (y, dy, dx read, dx written)
//   add_forward_gpu_cost, accumulate_gpu_cost, average_gpu_cost   3*n*sizeof(T)
// Flops: relu_forward_gpu_cost n, relu_backward_gpu_cost 2n, add_forward_gpu_cost n,
//   accumulate_gpu_cost n, average_gpu_cost 2n. Memory bound.
// Precision: one fp32 operation per element (average: an add and an exact halving), rounded to
//   T once, on the CPU and the GPU alike: the GPU's bits are the CPU's.
#pragma once
#include <cstdint>

#include "kernels/gpu.h"
#include "kernels/half.h"
#include "kernels/launch_plan.h"

namespace cutrain {

// y = max(x, 0)
template <typename T> void relu_forward_cpu(int64_t n, const T* x, T* y);
// dx += dy * (y > 0). Uses the output y as the mask (y > 0 exactly when x > 0), so x need not
// be kept. At x = 0 the derivative is taken as 0.
template <typename T> void relu_backward_cpu(int64_t n, const T* y, const T* dy, T* dx);

// y = a + b
template <typename T> void add_forward_cpu(int64_t n, const T* a, const T* b, T* y);
// dx += dy (the backward of add for either input)
template <typename T> void accumulate_cpu(int64_t n, const T* dy, T* dx);
// y = (a + b) / 2: one add in acc_t<T> and an exact halving (a multiplication by 0.5, exact
// unless the sum is subnormal), rounded to T once. No backward: inference only.
template <typename T> void average_cpu(int64_t n, const T* a, const T* b, T* y);

// --- GPU (CUDA builds only; device pointers; queued on `stream`, never synchronising) ---
// kernels/elementwise.cu. T = float or half_t; the same math, rounding and accumulate rule as
// the CPU functions above, so the results are equal bit for bit (one fp32 operation per
// element, rounded to T once, in both). Memory bound: 16-byte vector loads and stores when
// every pointer is 16-byte aligned, scalar otherwise and for the tail. Costs: above.
template <typename T> void relu_forward_gpu(int64_t n, const T* x, T* y, cudaStream_t stream);
inline LaunchCost relu_forward_gpu_cost(int64_t n, size_t elem) {
  return {"relu_forward", n > 0 ? 1 : 0, 2 * nbytes(n, elem), double(n)};
}
template <typename T>
void relu_backward_gpu(int64_t n, const T* y, const T* dy, T* dx, cudaStream_t stream);
inline LaunchCost relu_backward_gpu_cost(int64_t n, size_t elem) {  // reads y, dy, dx
  return {"relu_backward", n > 0 ? 1 : 0, 4 * nbytes(n, elem), 2.0 * double(n)};
}
template <typename T>
void add_forward_gpu(int64_t n, const T* a, const T* b, T* y, cudaStream_t stream);
inline LaunchCost add_forward_gpu_cost(int64_t n, size_t elem) {
  return {"add_forward", n > 0 ? 1 : 0, 3 * nbytes(n, elem), double(n)};
}
template <typename T> void accumulate_gpu(int64_t n, const T* dy, T* dx, cudaStream_t stream);
inline LaunchCost accumulate_gpu_cost(int64_t n, size_t elem) {
  return {"accumulate", n > 0 ? 1 : 0, 3 * nbytes(n, elem), double(n)};
}
template <typename T>
void average_gpu(int64_t n, const T* a, const T* b, T* y, cudaStream_t stream);
inline LaunchCost average_gpu_cost(int64_t n, size_t elem) {
  return {"average", n > 0 ? 1 : 0, 3 * nbytes(n, elem), 2.0 * double(n)};
}

}  // namespace cutrain
