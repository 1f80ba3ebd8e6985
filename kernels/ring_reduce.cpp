// ring_reduce CPU reference (math in ring_reduce.h). One thread: it runs on a replica's
// communication thread, beside the compute threads, and is bound by memory, not arithmetic.
#include "kernels/ring_reduce.h"

namespace cutrain {

template <typename T> void ring_reduce_cpu(int64_t n, T* dst, const T* src, double scale) {
  using A = acc_t<T>;
  const A s = A(scale);
  if (s == A(1)) {
    for (int64_t i = 0; i < n; i++) dst[i] = T(A(dst[i]) + A(src[i]));
  } else {
    for (int64_t i = 0; i < n; i++) dst[i] = T((A(dst[i]) + A(src[i])) * s);
  }
}

void ring_or_cpu(int64_t n, int32_t* dst, const int32_t* src) {
  for (int64_t i = 0; i < n; i++) dst[i] |= src[i];
}

template <typename T> void ring_scale_cpu(int64_t n, T* dst, double scale) {
  using A = acc_t<T>;
  const A s = A(scale);
  for (int64_t i = 0; i < n; i++) dst[i] = T(A(dst[i]) * s);
}

template void ring_scale_cpu<float>(int64_t, float*, double);
template void ring_scale_cpu<half_t>(int64_t, half_t*, double);
template void ring_scale_cpu<double>(int64_t, double*, double);
template void ring_reduce_cpu<float>(int64_t, float*, const float*, double);
template void ring_reduce_cpu<half_t>(int64_t, half_t*, const half_t*, double);
template void ring_reduce_cpu<double>(int64_t, double*, const double*, double);

}  // namespace cutrain
