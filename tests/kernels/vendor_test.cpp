// The vendor-library entry points (kernels/vendor.h) without a GPU: cudnn_built() and
// cublas_built() say what the build has, and a library the build lacks is refused with an
// error that names it. The GPU comparisons are in vendor_gpu_test.cpp.
#include "kernels/vendor.h"
#include "tests/test_util.h"

using namespace cutrain;

TEST_CASE("vendor: cudnn_built() and cublas_built() answer as the build was made") {
  // cuBLAS is part of the CUDA toolkit: every CUDA build links it.
  REQUIRE(cublas_built() == cuda_compiled());
  // cuDNN is optional: the Makefile defines CUTRAIN_CUDNN when it finds cudnn.h.
#if defined(CUTRAIN_CUDNN)
  REQUIRE(cudnn_built());
  REQUIRE(cuda_compiled());
#else
  REQUIRE_FALSE(cudnn_built());
#endif
}

TEST_CASE_TEMPLATE("vendor: a library the build lacks is refused by name", T, float, half_t) {
  const Conv2dShape s{2, 5, 5, 3, 4, 3, 3, 1, 1, 1, 1};
  const T* in = nullptr;
  T* out = nullptr;
  float* f = nullptr;
  if (!cudnn_built()) {
    REQUIRE_ERROR(conv2d_forward_cudnn<T>(s, in, in, in, out, nullptr), "no cuDNN");
    REQUIRE_ERROR(conv2d_backward_data_cudnn<T>(s, in, in, out, nullptr), "no cuDNN");
    REQUIRE_ERROR(conv2d_backward_filter_cudnn<T>(s, in, in, out, out, nullptr), "no cuDNN");
    REQUIRE_ERROR(batchnorm_forward_train_cudnn<T>(8, 3, in, f, f, 1e-5, 0.1, out, f, f, f, f,
                                                   nullptr),
                  "no cuDNN");
    REQUIRE_ERROR(batchnorm_forward_eval_cudnn<T>(8, 3, in, f, f, f, f, 1e-5, out, nullptr),
                  "no cuDNN");
    REQUIRE_ERROR(batchnorm_backward_train_cudnn<T>(8, 3, in, in, f, f, f, 1e-5, out, f, f,
                                                    nullptr),
                  "no cuDNN");
    if (!cuda_compiled())
      REQUIRE_ERROR(conv2d_forward_cudnn<T>(s, in, in, in, out, nullptr), "CPU-only build");
  }
  if (!cublas_built()) {
    REQUIRE_ERROR(linear_forward_cublas<T>(4, 3, 2, in, in, in, out, nullptr), "no cuBLAS");
    REQUIRE_ERROR(linear_backward_cublas<T>(4, 3, 2, in, in, in, out, out, out, nullptr),
                  "no cuBLAS");
    REQUIRE_ERROR(gemm_f16_cublas(4, 3, 2, nullptr, nullptr, nullptr, nullptr), "no cuBLAS");
  }
}
