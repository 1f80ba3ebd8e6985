#include "kernels/sgd.h"

#include <cmath>

namespace cutrain {

template <typename T>
bool grads_finite_cpu(int64_t n, const T* grad, double inv_scale) {
  using A = acc_t<T>;
  for (int64_t i = 0; i < n; i++)
    if (!std::isfinite(A(grad[i]) * A(inv_scale))) return false;
  return true;
}

template <typename T>
void sgd_step_cpu(int64_t n, const T* grad, double inv_scale, acc_t<T>* master,
                  acc_t<T>* velocity, T* working, const SgdParams& p) {
  using A = acc_t<T>;
  const A lr = A(p.lr), mu = A(p.momentum), wd = A(p.weight_decay), s = A(inv_scale);
  for (int64_t i = 0; i < n; i++) {
    const A g = A(grad[i]) * s + wd * master[i];
    const A v = mu * velocity[i] + g;
    velocity[i] = v;
    master[i] -= lr * (p.nesterov ? g + mu * v : v);
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
