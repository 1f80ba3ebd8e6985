// The CPU loop of the weights' moving average (math in ema.h). Threads (kernels/parallel.h):
// each owns a contiguous run of elements; no element depends on another.
#include "kernels/ema.h"

#include "kernels/parallel.h"

namespace cutrain {

template <typename A> void ema_update_cpu(int64_t n, const A* w, A* e, double decay, int64_t t) {
  const A d = ema_decay_at<A>(decay, t);
  const A one = sub_rn(A(1), d);
#pragma omp parallel for schedule(static) if (worth_threads(n))
  for (int64_t i = 0; i < n; i++) e[i] = ema_update(e[i], w[i], d, one);
}

template void ema_update_cpu<float>(int64_t, const float*, float*, double, int64_t);
template void ema_update_cpu<double>(int64_t, const double*, double*, double, int64_t);

}  // namespace cutrain
