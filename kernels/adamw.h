// defines: AdamWParams and adamw_step_cpu, the CPU reference of the AdamW optimizer step:
// unscale, Adam moments with bias correction, decoupled weight decay, update the master
// weights, write the working copy. (The inf/NaN check before it is grads_finite_cpu in sgd.h:
// one check for every optimizer, and a step with any inf/NaN is skipped as a whole.)
//
// math, per element, with g the stored (loss-scaled) gradient, inv_scale = 1 / loss scale and
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
// are T. The scalars (1 - beta1), (1 - beta2) and the bias corrections are computed once per
// step in double and rounded to acc_t<T>: in float, 1 - 0.999f keeps only ~4 correct digits.
// bytes: per element read g, w, m, v and write w, m, v, working: 2+3*4+3*4+2 for fp16.
// flops: ~14 and one square root.
#pragma once
#include <cstdint>

#include "kernels/half.h"

namespace cutrain {

struct AdamWParams {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;
};

// working may be null when the master weights are themselves the working copy (f32, f64).
// step is t above: 1 for the first step taken.
template <typename T>
void adamw_step_cpu(int64_t n, const T* grad, double inv_scale, acc_t<T>* master, acc_t<T>* m,
                    acc_t<T>* v, T* working, const AdamWParams& p, int64_t step);

}  // namespace cutrain
