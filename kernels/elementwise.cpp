// elementwise CPU reference (math in elementwise.h). Threads (kernels/parallel.h): each
// thread owns a contiguous run of elements; no element depends on another.
#include "kernels/elementwise.h"

#include "kernels/parallel.h"

namespace cutrain {

// Both are selects, not branches: whether an activation is positive is a coin toss the branch
// predictor loses, and a select lets the loop run as SIMD (omp simd; every element on its own).
// (`if (parallel: ...)`: the condition is about threads only; small loops still run as SIMD.)
template <typename T> void relu_forward_cpu(int64_t n, const T* x, T* y) {
#pragma omp parallel for simd schedule(static) if (parallel : worth_threads(n))
  for (int64_t i = 0; i < n; i++) y[i] = acc_t<T>(x[i]) > 0 ? x[i] : T(0.0f);
}

template <typename T> void relu_backward_cpu(int64_t n, const T* y, const T* dy, T* dx) {
  using A = acc_t<T>;
#pragma omp parallel for simd schedule(static) if (parallel : worth_threads(n))
  for (int64_t i = 0; i < n; i++) {
    const A g = A(dy[i]);  // read whatever y says, so the select below needs no branch
    // x + (-0) is x for every x (-0, inf and NaN included; round to nearest, the default)
    dx[i] = T(A(dx[i]) + (A(y[i]) > 0 ? g : A(-0.0f)));
  }
}

template <typename T> void add_forward_cpu(int64_t n, const T* a, const T* b, T* y) {
  using A = acc_t<T>;
#pragma omp parallel for schedule(static) if (worth_threads(n))
  for (int64_t i = 0; i < n; i++) y[i] = T(A(a[i]) + A(b[i]));
}

template <typename T> void accumulate_cpu(int64_t n, const T* dy, T* dx) {
  using A = acc_t<T>;
#pragma omp parallel for simd schedule(static) if (parallel : worth_threads(n))
  for (int64_t i = 0; i < n; i++) dx[i] = T(A(dx[i]) + A(dy[i]));
}

template <typename T> void average_cpu(int64_t n, const T* a, const T* b, T* y) {
  using A = acc_t<T>;
#pragma omp parallel for schedule(static) if (worth_threads(n))
  for (int64_t i = 0; i < n; i++) y[i] = T((A(a[i]) + A(b[i])) * A(0.5f));
}

#define CUTRAIN_INSTANTIATE(T)                                          \
  template void relu_forward_cpu<T>(int64_t, const T*, T*);             \
  template void relu_backward_cpu<T>(int64_t, const T*, const T*, T*);  \
  template void add_forward_cpu<T>(int64_t, const T*, const T*, T*);    \
  template void accumulate_cpu<T>(int64_t, const T*, T*);             \
  template void average_cpu<T>(int64_t, const T*, const T*, T*);
CUTRAIN_INSTANTIATE(float)
CUTRAIN_INSTANTIATE(double)
CUTRAIN_INSTANTIATE(half_t)
#undef CUTRAIN_INSTANTIATE

}  // namespace cutrain
