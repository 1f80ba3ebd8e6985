#include "kernels/adamw.h"

#include <cmath>

namespace cutrain {

template <typename T>
void adamw_step_cpu(int64_t n, const T* grad, double inv_scale, acc_t<T>* master, acc_t<T>* m,
                    acc_t<T>* v, T* working, const AdamWParams& p, int64_t step) {
  using A = acc_t<T>;
  const A lr = A(p.lr), b1 = A(p.beta1), b2 = A(p.beta2), eps = A(p.eps), s = A(inv_scale);
  // 1 - beta in double, then rounded: in float, 1 - 0.999f keeps only ~4 correct digits.
  const A c1 = A(1 - p.beta1), c2 = A(1 - p.beta2);
  const A lr_wd = A(p.lr * p.weight_decay);
  const A bc1 = A(1 - std::pow(p.beta1, double(step)));
  const A bc2 = A(1 - std::pow(p.beta2, double(step)));
  for (int64_t i = 0; i < n; i++) {
    const A g = A(grad[i]) * s;
    const A mi = b1 * m[i] + c1 * g;
    const A vi = b2 * v[i] + c2 * g * g;
    m[i] = mi;
    v[i] = vi;
    const A w = master[i];
    master[i] = w - lr_wd * w - lr * (mi / bc1) / (std::sqrt(vi / bc2) + eps);
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
