// defines: AdamWParams and adamw_step_cpu, the CPU reference of the AdamW optimizer step:
// unscale, Adam moments with bias correction, decoupled weight decay, update the master
// weights, write the working copy. (The inf/NaN check before it is grads_finite_cpu in sgd.h:
// one check for every optimizer, and a step with any inf/NaN is skipped as a whole.)
//
// Math: per element, with g the stored (loss-scaled) gradient, inv_scale = 1 / loss scale and
// t = the number of this step counting from 1 (skipped steps do not count):
//   g' = g * inv_scale                               (no L2 term: the decay is decoupled)
//   m  = beta1 * m + (1 - beta1) * g'                (first moment)
//   v  = beta2 * v + (1 - beta2) * g'^2              (second moment)
//   m^ = m / (1 - beta1^t),  v^ = v / (1 - beta2^t)  (bias correction: m, v start at 0)
//   w -= lr * weight_decay * w                       (decoupled weight decay, Loshchilov & Hutter)
//   w -= lr * m^ / (sqrt(v^) + eps)
//   working = (T) w                                  (the fp16 copy the next forward reads)
// Both updates use the same w, so this equals torch.optim.AdamW:
//   w_new = w * (1 - lr * weight_decay) - lr * m^ / (sqrt(v^) + eps).
// w, m and v are acc_t<T> (fp32 master weights and moments for fp16 training); g and working
// are T. GPU: the step t and the skip flag live on the device (see sgd.h), so the step never
// waits for the host.
// Launch: adamw.cu launches it: one thread per element, grid-stride (multi_tensor.h runs the
//   same math over every parameter in one launch).
// Bytes: adamw_step_gpu_cost: per element read g, w, m, v and write w, m, v, working:
//   2+3*4+3*4+2 = 28 for fp16 (no working copy for fp32).
// Flops: adamw_step_gpu_cost: ~14 and one square root per element (counted as 15).
// Precision: in acc_t<T>, each operation rounded once in the order written (adamw_update
//   below, the one copy of this math, shared by the CPU reference and the GPU kernel: the GPU
//   gives the CPU's bits exactly). The scalars (1 - beta1), (1 - beta2) and the bias
//   corrections are computed once per step in double and rounded to acc_t<T>: in float,
//   1 - 0.999f keeps only ~4 correct digits. beta^t is computed by repeated squaring in double
//   (adamw_power), not std::pow, so that the host and the device compute the same bits.
//   Squaring doubles a relative error, so beta^t is off by up to ~t ulps, but t beta^t stays
//   small (at most 1 / (e ln(1/beta)): 368 for beta = 0.999), so 1 - beta^t is off by ~1e-14
//   at worst: invisible once rounded to float.
#pragma once
#include <cstdint>

#include "kernels/gpu.h"
#include "kernels/half.h"
#include "kernels/launch_plan.h"
#include "kernels/hd.h"

namespace cutrain {

struct AdamWParams {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;
};

// The per-step scalars in the accumulation type A: the hyper-parameters, and 1 - beta and
// lr * weight_decay computed in double, each rounded once.
template <typename A> struct AdamWScalars {
  A lr, beta1, beta2, eps, one_minus_beta1, one_minus_beta2, lr_wd;
};
template <typename A> inline AdamWScalars<A> adamw_scalars(const AdamWParams& p) {
  return {A(p.lr),       A(p.beta1),       A(p.beta2),         A(p.eps),
          A(1 - p.beta1), A(1 - p.beta2), A(p.lr * p.weight_decay)};
}

// beta^t for t >= 0 by repeated squaring in double (the same operations on host and device).
CUTRAIN_HD inline double adamw_power(double beta, int64_t t) {
  double r = 1, b = beta;
  for (; t > 0; t >>= 1) {
    if (t & 1) r = mul_rn(r, b);
    b = mul_rn(b, b);
  }
  return r;
}

// The bias correction 1 - beta^t, computed in double, rounded once to A.
template <typename A> CUTRAIN_HD inline A adamw_bias_correction(double beta, int64_t t) {
  return A(sub_rn(1.0, adamw_power(beta, t)));
}

// What a GPU kernel works out once per step from the device's rate and step t: the bias
// corrections, lr and lr * weight_decay, each rounded once from double, as adamw_scalars and
// adamw_step_cpu do on the host. (Thread 0 of each block, into shared memory.)
struct AdamWStepValues {
  float bc1, bc2, lr, lr_wd;
};
CUTRAIN_HD inline AdamWStepValues adamw_step_values(double beta1, double beta2,
                                                    double weight_decay, double lr, int64_t t) {
  return {adamw_bias_correction<float>(beta1, t), adamw_bias_correction<float>(beta2, t),
          float(lr), float(mul_rn(lr, weight_decay))};
}

#if defined(__CUDACC__)
// In a kernel, every thread of the block: thread 0 works out the step's values once (shared
// memory), and each thread takes them: k's lr and lr_wd, and the bias corrections.
__device__ inline void adamw_block_values(double beta1, double beta2, double weight_decay,
                                          const double* lr, const int64_t* step,
                                          AdamWScalars<float>& k, float& bc1, float& bc2) {
  __shared__ AdamWStepValues sv;
  if (threadIdx.x == 0) sv = adamw_step_values(beta1, beta2, weight_decay, *lr, *step);
  __syncthreads();
  bc1 = sv.bc1, bc2 = sv.bc2, k.lr = sv.lr, k.lr_wd = sv.lr_wd;
}
#endif

// One element of the step (the math above): updates the master weight w and the moments m, v
// from the stored gradient `grad`; bc1, bc2 are the bias corrections of this step.
template <typename A>
CUTRAIN_HD inline void adamw_update(A grad, A inv_scale, const AdamWScalars<A>& k, A bc1, A bc2,
                                    A& w, A& m, A& v) {
  const A g = mul_rn(grad, inv_scale);
  const A mi = add_rn(mul_rn(k.beta1, m), mul_rn(k.one_minus_beta1, g));
  const A vi = add_rn(mul_rn(k.beta2, v), mul_rn(mul_rn(k.one_minus_beta2, g), g));
  m = mi;
  v = vi;
  // w - lr_wd*w - lr * (m / bc1) / (sqrt(v / bc2) + eps), left to right
  const A delta = div_rn(mul_rn(k.lr, div_rn(mi, bc1)), add_rn(sqrt_rn(div_rn(vi, bc2)), k.eps));
  w = sub_rn(sub_rn(w, mul_rn(k.lr_wd, w)), delta);
}

// working may be null when the master weights are themselves the working copy (f32, f64).
// step is t above: 1 for the first step taken.
template <typename T>
void adamw_step_cpu(int64_t n, const T* grad, double inv_scale, acc_t<T>* master, acc_t<T>* m,
                    acc_t<T>* v, T* working, const AdamWParams& p, int64_t step);

// --- GPU (CUDA builds only; device pointers; queued on stream) ---

// adamw_step_cpu on the device, bit for bit, unless *skip != 0: then nothing changes at all.
// T = float or half_t; master, m and v are fp32. inv_scale (float), skip (int32, from
// grads_nonfinite_gpu in sgd.h), lr (double: the learning rate, in place of p.lr, which is
// not read; see sgd_step_gpu) and step (int64, t >= 1: the caller's step counter) are scalars
// in device memory. working may be null (f32 training).
template <typename T>
void adamw_step_gpu(int64_t n, const T* grad, const float* inv_scale, const int32_t* skip,
                    const double* lr, float* master, float* m, float* v, T* working,
                    const AdamWParams& p, const int64_t* step, cudaStream_t stream);
// 1 launch (none when n = 0): grad read, fp32 master, m and v read and written, the working
// copy written when there is one. ~14 flops and a square root an element.
inline LaunchCost adamw_step_gpu_cost(int64_t n, size_t elem, bool working) {
  const double bytes = nbytes(n, elem) + 6 * nbytes(n, 4) + (working ? nbytes(n, elem) : 0);
  return {"adamw_step", n > 0 ? 1 : 0, bytes, 15.0 * double(n)};
}

}  // namespace cutrain
