// defines: grads_finite_cpu and sgd_step_cpu, the CPU reference of the optimizer step:
// unscale, check for inf/NaN, SGD with momentum (optionally Nesterov) and weight decay,
// update the master weights, write the working copy.
//
// math, per element, with g the stored (loss-scaled) gradient and inv_scale = 1 / loss scale:
//   g' = g * inv_scale + weight_decay * w          (L2 weight decay, as torch.optim.SGD)
//   v  = momentum * v + g'
//   w -= lr * (nesterov ? g' + momentum * v : v)
//   working = (T) w                                 (the fp16 copy the next forward reads)
// w and v are acc_t<T> (fp32 master weights for fp16 training); g and working are T.
// bytes: per element read g, w, v and write w, v, working: 2+4+4+4+4+2 for fp16. flops: ~7.
#pragma once
#include <cstdint>

#include "kernels/half.h"

namespace cutrain {

struct SgdParams {
  double lr = 0.1;
  double momentum = 0.9;
  double weight_decay = 0.0;
  bool nesterov = false;
};

// Is every g * inv_scale finite? A step is taken only when this holds for every parameter;
// otherwise the whole step is skipped (and the loss scaler lowers the scale).
template <typename T>
bool grads_finite_cpu(int64_t n, const T* grad, double inv_scale);

// working may be null when the master weights are themselves the working copy (f32, f64).
template <typename T>
void sgd_step_cpu(int64_t n, const T* grad, double inv_scale, acc_t<T>* master,
                  acc_t<T>* velocity, T* working, const SgdParams& p);

}  // namespace cutrain
