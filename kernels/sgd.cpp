// SGD step, CPU reference (math in sgd.h; the per-element update is sgd_update there).
#include "kernels/sgd.h"

namespace cutrain {

template <typename T>
bool grads_finite_cpu(int64_t n, const T* grad, double inv_scale) {
  using A = acc_t<T>;
  for (int64_t i = 0; i < n; i++)
    if (!scaled_finite(A(grad[i]), A(inv_scale))) return false;
  return true;
}

template <typename T>
void sgd_step_cpu(int64_t n, const T* grad, double inv_scale, acc_t<T>* master,
                  acc_t<T>* velocity, T* working, const SgdParams& p) {
  using A = acc_t<T>;
  const SgdScalars<A> k = sgd_scalars<A>(p);
  const A s = A(inv_scale);
  for (int64_t i = 0; i < n; i++) {
    sgd_update(A(grad[i]), s, k, master[i], velocity[i]);
    if (working) working[i] = T(master[i]);
  }
}

#define CUTRAIN_INSTANTIATE(T)                                                          \
  template bool grads_finite_cpu<T>(int64_t, const T*, double);                         \
  template void sgd_step_cpu<T>(int64_t, const T*, double, acc_t<T>*, acc_t<T>*, T*,    \
                                const SgdParams&);
CUTRAIN_INSTANTIATE(float)
CUTRAIN_INSTANTIATE(double)
CUTRAIN_INSTANTIATE(half_t)
#undef CUTRAIN_INSTANTIATE

}  // namespace cutrain
