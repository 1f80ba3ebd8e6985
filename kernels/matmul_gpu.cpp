// The switch between the GPU implementations of conv2d and linear (kernels/impl.h): direct
// (kernels/conv2d.cu, linear.cu), tc (the same files, tensor cores, fp16 only) and the vendor
// libraries (kernels/cudnn.cpp, cublas.cpp). CUDA builds only: a CPU-only build has no GPU
// kernels, and nothing there calls these (nn/dispatch.h's ON_GPU compiles the calls out).
#include "kernels/conv2d.h"
#include "kernels/linear.h"
#include "kernels/vendor.h"

#if defined(CUTRAIN_CUDA)
#include <type_traits>

#include "kernels/check.h"

namespace cutrain {

namespace {
template <typename T> constexpr bool is_half = std::is_same<T, half_t>::value;

// Tensor cores take fp16: an f32 call asking for tc is a configuration error, not something to
// paper over (nn/context.h maps tc to direct for f32 tensors before calling here).
template <typename T> void require_half(const char* op) {
  CHECK(is_half<T>, op << ": the tc implementation takes fp16 tensors; use direct or the "
                          "vendor library for fp32");
}

// oneDNN runs on the CPU (kernels/onednn.h): asking a GPU for it is a configuration error too.
void refuse_onednn(const char* op) {
  CHECK(false, op << ": onednn is a CPU implementation; on a GPU use direct, tc or the vendor "
                     "library");
}
}  // namespace

template <typename T>
void conv2d_forward_gpu(ConvImpl impl, const Conv2dShape& s, const T* x, const T* w,
                        const T* b, T* y, cudaStream_t stream) {
  switch (impl) {
    case ConvImpl::direct: return conv2d_forward_direct_gpu<T>(s, x, w, b, y, stream);
    case ConvImpl::cudnn: return conv2d_forward_cudnn<T>(s, x, w, b, y, stream);
    case ConvImpl::onednn: return refuse_onednn("conv2d");
    case ConvImpl::tc:
      require_half<T>("conv2d");
      if constexpr (is_half<T>) conv2d_forward_tc_gpu(s, x, w, b, y, stream);
      return;
  }
}

template <typename T>
void conv2d_backward_data_gpu(ConvImpl impl, const Conv2dShape& s, const T* dy, const T* w,
                              T* dx, cudaStream_t stream) {
  switch (impl) {
    case ConvImpl::direct: return conv2d_backward_data_direct_gpu<T>(s, dy, w, dx, stream);
    case ConvImpl::cudnn: return conv2d_backward_data_cudnn<T>(s, dy, w, dx, stream);
    case ConvImpl::onednn: return refuse_onednn("conv2d");
    case ConvImpl::tc:
      require_half<T>("conv2d");
      if constexpr (is_half<T>) conv2d_backward_data_tc_gpu(s, dy, w, dx, stream);
      return;
  }
}

template <typename T>
void conv2d_backward_filter_gpu(ConvImpl impl, const Conv2dShape& s, const T* x, const T* dy,
                                T* dw, T* db, cudaStream_t stream) {
  switch (impl) {
    case ConvImpl::direct:
      return conv2d_backward_filter_direct_gpu<T>(s, x, dy, dw, db, stream);
    case ConvImpl::cudnn: return conv2d_backward_filter_cudnn<T>(s, x, dy, dw, db, stream);
    case ConvImpl::onednn: return refuse_onednn("conv2d");
    case ConvImpl::tc:
      require_half<T>("conv2d");
      if constexpr (is_half<T>) conv2d_backward_filter_tc_gpu(s, x, dy, dw, db, stream);
      return;
  }
}

template <typename T>
void linear_forward_gpu(LinearImpl impl, int N, int C, int K, const T* x, const T* w,
                        const T* b, T* y, cudaStream_t stream) {
  switch (impl) {
    case LinearImpl::direct: return linear_forward_direct_gpu<T>(N, C, K, x, w, b, y, stream);
    case LinearImpl::cublas: return linear_forward_cublas<T>(N, C, K, x, w, b, y, stream);
    case LinearImpl::onednn: return refuse_onednn("linear");
    case LinearImpl::tc:
      require_half<T>("linear");
      if constexpr (is_half<T>) linear_forward_tc_gpu(N, C, K, x, w, b, y, stream);
      return;
  }
}

template <typename T>
void linear_backward_gpu(LinearImpl impl, int N, int C, int K, const T* x, const T* w,
                         const T* dy, T* dx, T* dw, T* db, cudaStream_t stream) {
  switch (impl) {
    case LinearImpl::direct:
      return linear_backward_direct_gpu<T>(N, C, K, x, w, dy, dx, dw, db, stream);
    case LinearImpl::cublas:
      return linear_backward_cublas<T>(N, C, K, x, w, dy, dx, dw, db, stream);
    case LinearImpl::onednn: return refuse_onednn("linear");
    case LinearImpl::tc:
      require_half<T>("linear");
      if constexpr (is_half<T>) linear_backward_tc_gpu(N, C, K, x, w, dy, dx, dw, db, stream);
      return;
  }
}

#define INSTANTIATE(T)                                                                       \
  template void conv2d_forward_gpu<T>(ConvImpl, const Conv2dShape&, const T*, const T*,      \
                                      const T*, T*, cudaStream_t);                           \
  template void conv2d_backward_data_gpu<T>(ConvImpl, const Conv2dShape&, const T*,          \
                                            const T*, T*, cudaStream_t);                     \
  template void conv2d_backward_filter_gpu<T>(ConvImpl, const Conv2dShape&, const T*,        \
                                              const T*, T*, T*, cudaStream_t);               \
  template void linear_forward_gpu<T>(LinearImpl, int, int, int, const T*, const T*,         \
                                      const T*, T*, cudaStream_t);                           \
  template void linear_backward_gpu<T>(LinearImpl, int, int, int, const T*, const T*,        \
                                       const T*, T*, T*, T*, cudaStream_t);
INSTANTIATE(float)
INSTANTIATE(half_t)
#undef INSTANTIATE

}  // namespace cutrain

#endif  // CUTRAIN_CUDA
