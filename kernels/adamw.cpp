// AdamW step, CPU reference (math in adamw.h; the per-element update is adamw_update there).
#include "kernels/adamw.h"

namespace cutrain {

template <typename T>
void adamw_step_cpu(int64_t n, const T* grad, double inv_scale, acc_t<T>* master, acc_t<T>* m,
                    acc_t<T>* v, T* working, const AdamWParams& p, int64_t step) {
  using A = acc_t<T>;
  const AdamWScalars<A> k = adamw_scalars<A>(p);
  const A s = A(inv_scale);
  const A bc1 = adamw_bias_correction<A>(p.beta1, step);
  const A bc2 = adamw_bias_correction<A>(p.beta2, step);
  for (int64_t i = 0; i < n; i++) {
    adamw_update(A(grad[i]), s, k, bc1, bc2, master[i], m[i], v[i]);
    if (working) working[i] = T(master[i]);
  }
}

#define CUTRAIN_INSTANTIATE(T)                                                               \
  template void adamw_step_cpu<T>(int64_t, const T*, double, acc_t<T>*, acc_t<T>*, acc_t<T>*, \
                                  T*, const AdamWParams&, int64_t);
CUTRAIN_INSTANTIATE(float)
CUTRAIN_INSTANTIATE(double)
CUTRAIN_INSTANTIATE(half_t)
#undef CUTRAIN_INSTANTIATE

}  // namespace cutrain
