// The AdamW step on the GPU.
//
// Math: adamw.h (must equal adamw_step_cpu bit for bit).
// Launch: one thread per element, grid-stride loop, 256 threads a block, at most 4096 blocks.
//   Every thread first reads *skip (the flag grads_nonfinite_gpu raised) and leaves when it is
//   set, so a skipped step changes nothing. Thread 0 of each block then computes this step's
//   bias corrections from t = *step in double (adamw_bias_correction, the CPU's code) into
//   shared memory: a few dozen double operations per block, not per element.
// Bytes: adamw_step_gpu_cost (adamw.h): 2+3*4 read, 3*4+2 written per element (fp16 working
//   copy). Memory bound.
// Flops: adamw_step_gpu_cost: ~14 and one square root per element.
// Precision: adamw_update (adamw.h) through the _rn intrinsics of hd.h: no fma contraction,
//   the same roundings in the same order as the CPU, so the same bits.
#include <cuda_fp16.h>

#include "kernels/adamw.h"
#include "kernels/check.h"
#include "kernels/cuda_util.cuh"

namespace cutrain {

constexpr int kAdamBlock = 256;

template <typename TD>
__global__ void adamw_step_kernel(int64_t n, const TD* grad, const float* inv_scale,
                                  const int32_t* skip, const double* lr, float* master, float* m,
                                  float* v, TD* working, AdamWScalars<float> k, double beta1,
                                  double beta2, double weight_decay, const int64_t* step) {
  if (*skip) return;  // the same value in every thread: the whole grid leaves
  float bc1, bc2;
  adamw_block_values(beta1, beta2, weight_decay, lr, step, k, bc1, bc2);
  const float s = *inv_scale;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    float w = master[i], mi = m[i], vi = v[i];
    adamw_update(to_acc(grad[i]), s, k, bc1, bc2, w, mi, vi);
    master[i] = w;
    m[i] = mi;
    v[i] = vi;
    if (working) working[i] = from_acc<TD>(w);
  }
}

template <typename T>
void adamw_step_gpu(int64_t n, const T* grad, const float* inv_scale, const int32_t* skip,
                    const double* lr, float* master, float* m, float* v, T* working,
                    const AdamWParams& p, const int64_t* step, cudaStream_t stream) {
  CHECK(n >= 0, "AdamW step of " << n << " parameters");
  CHECK(lr != nullptr, "AdamW step: the learning rate must be in device memory");
  if (n == 0) return;
  const int64_t blocks = (n + kAdamBlock - 1) / kAdamBlock;
  adamw_step_kernel<<<int(blocks > 4096 ? 4096 : blocks), kAdamBlock, 0, stream>>>(
      n, dev(grad), inv_scale, skip, lr, master, m, v,
      dev(working), adamw_scalars<float>(p), p.beta1, p.beta2, p.weight_decay,
      step);
  LAUNCH_CHECK();
}

template void adamw_step_gpu<float>(int64_t, const float*, const float*, const int32_t*,
                                    const double*, float*, float*, float*, float*,
                                    const AdamWParams&, const int64_t*, cudaStream_t);
template void adamw_step_gpu<half_t>(int64_t, const half_t*, const float*, const int32_t*,
                                     const double*, float*, float*, float*, half_t*,
                                     const AdamWParams&, const int64_t*, cudaStream_t);

}  // namespace cutrain
