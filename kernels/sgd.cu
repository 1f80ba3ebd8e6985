// The optimizer's inf/NaN check and the SGD step on the GPU.
//
// Math: sgd.h (must equal grads_finite_cpu and sgd_step_cpu bit for bit).
// Launch: one thread per element, grid-stride loop, 256 threads a block, at most 4096 blocks.
//   The skip decision stays on the device: grads_nonfinite_kernel raises a flag in device
//   memory, the step kernels read it first and leave at once when it is set (every thread reads
//   the same value, so the whole grid leaves together).
// Bytes: grads_nonfinite_gpu_cost: 2-4 per element; sgd_step_gpu_cost: 2+4+4 read, 4+4+2
//   written per element (fp16 working copy). Memory bound.
// Flops: grads_nonfinite_gpu_cost 2, sgd_step_gpu_cost ~7 per element.
// Precision: sgd_update (sgd.h) through the _rn intrinsics of hd.h: no fma contraction, the
//   same roundings in the same order as the CPU, so the same bits.
#include <cuda_fp16.h>

#include "kernels/check.h"
#include "kernels/cuda_util.cuh"
#include "kernels/sgd.h"

namespace cutrain {

constexpr int kOptBlock = 256;

static int opt_grid(int64_t n) {
  const int64_t blocks = (n + kOptBlock - 1) / kOptBlock;
  return int(blocks < 1 ? 1 : blocks > 4096 ? 4096 : blocks);
}

// *flag = 1 when some grad[i] * inv_scale is not finite; otherwise *flag is left alone.
template <typename TD>
__global__ void grads_nonfinite_kernel(int64_t n, const TD* grad, const float* inv_scale,
                                       int32_t* flag) {
  const float s = *inv_scale;
  bool bad = false;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    bad |= !scaled_finite(to_acc(grad[i]), s);
  // one store per block at most; every writer stores the same 1, so the race is harmless
  if (__syncthreads_or(bad) && threadIdx.x == 0) *flag = 1;
}

template <typename TD>
__global__ void sgd_step_kernel(int64_t n, const TD* grad, const float* inv_scale,
                                const int32_t* skip, const double* lr, float* master,
                                float* velocity, TD* working, SgdScalars<float> k) {
  if (*skip) return;
  const float s = *inv_scale;
  k.lr = float(*lr);  // rounded once from double, as sgd_scalars does on the host
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    float w = master[i], v = velocity[i];
    sgd_update(to_acc(grad[i]), s, k, w, v);
    master[i] = w;
    velocity[i] = v;
    if (working) working[i] = from_acc<TD>(w);
  }
}

template <typename T>
void grads_nonfinite_gpu(int64_t n, const T* grad, const float* inv_scale, int32_t* flag,
                         cudaStream_t stream) {
  CHECK(n >= 0, "inf/NaN check of " << n << " gradients");
  if (n == 0) return;
  grads_nonfinite_kernel<<<opt_grid(n), kOptBlock, 0, stream>>>(
      n, dev(grad), inv_scale, flag);
  LAUNCH_CHECK();
}

template <typename T>
void sgd_step_gpu(int64_t n, const T* grad, const float* inv_scale, const int32_t* skip,
                  const double* lr, float* master, float* velocity, T* working,
                  const SgdParams& p, cudaStream_t stream) {
  CHECK(n >= 0, "SGD step of " << n << " parameters");
  CHECK(lr != nullptr, "SGD step: the learning rate must be in device memory");
  if (n == 0) return;
  sgd_step_kernel<<<opt_grid(n), kOptBlock, 0, stream>>>(
      n, dev(grad), inv_scale, skip, lr, master, velocity,
      dev(working), sgd_scalars<float>(p));
  LAUNCH_CHECK();
}

#define CUTRAIN_INSTANTIATE(T)                                                              \
  template void grads_nonfinite_gpu<T>(int64_t, const T*, const float*, int32_t*,           \
                                       cudaStream_t);                                       \
  template void sgd_step_gpu<T>(int64_t, const T*, const float*, const int32_t*,           \
                                const double*, float*, float*, T*, const SgdParams&,         \
                                cudaStream_t);
CUTRAIN_INSTANTIATE(float)
CUTRAIN_INSTANTIATE(half_t)
#undef CUTRAIN_INSTANTIATE

}  // namespace cutrain
