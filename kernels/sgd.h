// defines: grads_finite_cpu and sgd_step_cpu, the CPU reference of the optimizer step:
// unscale, check for inf/NaN, SGD with momentum (optionally Nesterov) and weight decay,
// update the master weights, write the working copy.
//
// Math: per element, with g the stored (loss-scaled) gradient and inv_scale = 1 / loss scale:
//   g' = g * inv_scale + weight_decay * w          (L2 weight decay, as torch.optim.SGD)
//   v  = momentum * v + g'
//   w -= lr * (nesterov ? g' + momentum * v : v)
//   working = (T) w                                 (the fp16 copy the next forward reads)
// w and v are acc_t<T> (fp32 master weights for fp16 training); g and working are T.
// GPU: the same step with the decision to skip it left on the device: grads_nonfinite_gpu
// raises a device flag, sgd_step_gpu reads it and does nothing when it is set, so a training
// step never waits for the host.
// Launch: sgd.cu launches them: one thread per element each, grid-stride (multi_tensor.h runs
//   the same math over every parameter in one launch).
// Bytes: grads_nonfinite_gpu_cost: g read (2 for fp16); sgd_step_gpu_cost: per element read g,
//   w, v and write w, v, working: 2+4+4+4+4+2 for fp16 (no working copy for fp32).
// Flops: grads_nonfinite_gpu_cost: 2 (a multiply and a test); sgd_step_gpu_cost: ~7.
// Precision: in acc_t<T>, each operation rounded once in the order written (sgd_update below,
//   the one copy of this math, shared by the CPU reference and the GPU kernel: the GPU gives
//   the CPU's bits exactly).
#pragma once
#include <cstdint>

#include "kernels/gpu.h"
#include "kernels/half.h"
#include "kernels/launch_plan.h"
#include "kernels/hd.h"

namespace cutrain {

struct SgdParams {
  double lr = 0.1;
  double momentum = 0.9;
  double weight_decay = 0.0;
  bool nesterov = false;
};

// The hyper-parameters in the accumulation type A (each rounded once from double).
template <typename A> struct SgdScalars {
  A lr, momentum, weight_decay;
  bool nesterov;
};
template <typename A> inline SgdScalars<A> sgd_scalars(const SgdParams& p) {
  return {A(p.lr), A(p.momentum), A(p.weight_decay), p.nesterov};
}

// One element of the step (the math above): updates the master weight w and the velocity v
// from the stored gradient `grad`.
template <typename A>
CUTRAIN_HD inline void sgd_update(A grad, A inv_scale, const SgdScalars<A>& k, A& w, A& v) {
  const A g = add_rn(mul_rn(grad, inv_scale), mul_rn(k.weight_decay, w));  // g*s + wd*w
  const A vn = add_rn(mul_rn(k.momentum, v), g);                           // mu*v + g
  v = vn;
  w = sub_rn(w, mul_rn(k.lr, k.nesterov ? add_rn(g, mul_rn(k.momentum, vn)) : vn));
}

// Is grad * inv_scale finite? (The test both grads_finite_cpu and grads_nonfinite_gpu make.)
template <typename A> CUTRAIN_HD inline bool scaled_finite(A grad, A inv_scale) {
  return is_finite(mul_rn(grad, inv_scale));
}

// Is every g * inv_scale finite? A step is taken only when this holds for every parameter;
// otherwise the whole step is skipped (and the loss scaler lowers the scale).
template <typename T>
bool grads_finite_cpu(int64_t n, const T* grad, double inv_scale);

// working may be null when the master weights are themselves the working copy (f32, f64).
template <typename T>
void sgd_step_cpu(int64_t n, const T* grad, double inv_scale, acc_t<T>* master,
                  acc_t<T>* velocity, T* working, const SgdParams& p);

// --- GPU (CUDA builds only; device pointers; queued on stream) ---
// T = float or half_t; the master weights and velocities are fp32. inv_scale (float), skip
// and flag (int32) are scalars in device memory.

// Sets *flag = 1 when some grad[i] * inv_scale is inf or NaN (grads_finite_cpu false); never
// clears it. The caller zeroes the flag once per step, runs this over every parameter, then
// hands the flag to the step functions as `skip`.
template <typename T>
void grads_nonfinite_gpu(int64_t n, const T* grad, const float* inv_scale, int32_t* flag,
                         cudaStream_t stream);
// 1 launch (none when n = 0): grad read, a multiply and a test an element.
inline LaunchCost grads_nonfinite_gpu_cost(int64_t n, size_t elem) {
  return {"grads_nonfinite", n > 0 ? 1 : 0, nbytes(n, elem), 2.0 * double(n)};
}

// sgd_step_cpu on the device, bit for bit, unless *skip != 0: then nothing changes at all.
// The learning rate is *lr (double, device memory: StepState::lr), not p.lr, which is not
// read: it changes every step, and a CUDA graph of the update must replay with the current
// one. working may be null (f32 training: the master weights are the working copy).
template <typename T>
void sgd_step_gpu(int64_t n, const T* grad, const float* inv_scale, const int32_t* skip,
                  const double* lr, float* master, float* velocity, T* working,
                  const SgdParams& p, cudaStream_t stream);
// 1 launch (none when n = 0): grad read, fp32 master and velocity read and written, the
// working copy (elem bytes) written when there is one. ~7 flops an element.
inline LaunchCost sgd_step_gpu_cost(int64_t n, size_t elem, bool working) {
  const double bytes = nbytes(n, elem) + 4 * nbytes(n, 4) + (working ? nbytes(n, elem) : 0);
  return {"sgd_step", n > 0 ? 1 : 0, bytes, 7.0 * double(n)};
}

}  // namespace cutrain
