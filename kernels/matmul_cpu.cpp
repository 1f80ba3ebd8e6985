// The CPU switch for conv2d and linear (impl.h): the reference, or oneDNN for float. The GPU's
// twin is matmul_gpu.cpp.
#include <type_traits>

#include "kernels/check.h"
#include "kernels/conv2d.h"
#include "kernels/linear.h"
#include "kernels/onednn.h"

namespace cutrain {

namespace {
// Whether `impl` runs oneDNN for T: onednn (float only), or direct; anything else throws.
template <typename T, typename Impl>
bool use_onednn(Impl impl, const char* op) {
  CHECK(impl == Impl::direct || impl == Impl::onednn,
        op << ": " << impl_name(impl)
           << " is a GPU implementation; the CPU runs direct or onednn");
  CHECK((impl == Impl::direct || std::is_same_v<T, float>),
        op << ": onednn is fp32 only; other dtypes run direct");
  return impl == Impl::onednn;
}
}  // namespace

template <typename T>
void conv2d_forward_cpu(ConvImpl impl, const Conv2dShape& s, const T* x, const T* w, const T* b,
                        T* y) {
  if (use_onednn<T>(impl, "conv2d")) {
    if constexpr (std::is_same_v<T, float>) return conv2d_forward_onednn(s, x, w, b, y);
  }
  conv2d_forward_cpu(s, x, w, b, y);
}

template <typename T>
void conv2d_backward_data_cpu(ConvImpl impl, const Conv2dShape& s, const T* dy, const T* w,
                              T* dx) {
  if (use_onednn<T>(impl, "conv2d")) {
    if constexpr (std::is_same_v<T, float>) return conv2d_backward_data_onednn(s, dy, w, dx);
  }
  conv2d_backward_data_cpu(s, dy, w, dx);
}

template <typename T>
void conv2d_backward_filter_cpu(ConvImpl impl, const Conv2dShape& s, const T* x, const T* dy,
                                T* dw, T* db) {
  if (use_onednn<T>(impl, "conv2d")) {
    if constexpr (std::is_same_v<T, float>)
      return conv2d_backward_filter_onednn(s, x, dy, dw, db);
  }
  conv2d_backward_filter_cpu(s, x, dy, dw, db);
}

template <typename T>
void linear_forward_cpu(LinearImpl impl, int N, int C, int K, const T* x, const T* w, const T* b,
                        T* y) {
  if (use_onednn<T>(impl, "linear")) {
    if constexpr (std::is_same_v<T, float>) return linear_forward_onednn(N, C, K, x, w, b, y);
  }
  linear_forward_cpu(N, C, K, x, w, b, y);
}

template <typename T>
void linear_backward_cpu(LinearImpl impl, int N, int C, int K, const T* x, const T* w,
                         const T* dy, T* dx, T* dw, T* db) {
  if (use_onednn<T>(impl, "linear")) {
    if constexpr (std::is_same_v<T, float>)
      return linear_backward_onednn(N, C, K, x, w, dy, dx, dw, db);
  }
  linear_backward_cpu(N, C, K, x, w, dy, dx, dw, db);
}

#define CUTRAIN_INSTANTIATE(T)                                                                  \
  template void conv2d_forward_cpu<T>(ConvImpl, const Conv2dShape&, const T*, const T*,       \
                                      const T*, T*);                                          \
  template void conv2d_backward_data_cpu<T>(ConvImpl, const Conv2dShape&, const T*, const T*, \
                                            T*);                                              \
  template void conv2d_backward_filter_cpu<T>(ConvImpl, const Conv2dShape&, const T*,         \
                                              const T*, T*, T*);                              \
  template void linear_forward_cpu<T>(LinearImpl, int, int, int, const T*, const T*, const T*, \
                                      T*);                                                    \
  template void linear_backward_cpu<T>(LinearImpl, int, int, int, const T*, const T*,         \
                                       const T*, T*, T*, T*);
CUTRAIN_INSTANTIATE(float)
CUTRAIN_INSTANTIATE(double)
CUTRAIN_INSTANTIATE(half_t)
#undef CUTRAIN_INSTANTIATE

}  // namespace cutrain
