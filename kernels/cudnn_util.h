// defines: what kernels/cudnn.cpp (conv2d) and kernels/cudnn_batchnorm.cpp share, private to
// them: cudnn_missing() for builds without cuDNN; with cuDNN, CUDNN_CHECK, the per-thread
// handle, owned descriptors and small helpers.
#pragma once
#include <cstdint>

#include "kernels/check.h"
#include "kernels/vendor.h"

namespace cutrain {
namespace cudnn_detail {
// Throws cutrain::Error "cannot run <what> through cuDNN: this build has no cuDNN (why)".
[[noreturn]] void cudnn_missing(const char* what);
}  // namespace cudnn_detail
}  // namespace cutrain

#if defined(CUTRAIN_CUDNN)
#include <cudnn.h>

#include <type_traits>

namespace cutrain {
namespace cudnn_detail {

// Library failures are runtime failures, like CUDA's (kernels/check.h): report the call,
// file:line and cuDNN's own words (status and cuDNN 9's detailed last error), then abort.
[[noreturn]] void cudnn_fail(const char* call, const char* file, int line, cudnnStatus_t st);
// In destructors (descriptors; handles at thread exit) a failure is printed, not fatal:
// nothing is left to protect, and aborting would turn a finished run into a crash.
void cudnn_warn(const char* call, const char* file, int line, cudnnStatus_t st);

}  // namespace cudnn_detail
}  // namespace cutrain

#define CUDNN_CHECK(call)                                                            \
  do {                                                                               \
    cudnnStatus_t cutrain_st_ = (call);                                              \
    if (cutrain_st_ != CUDNN_STATUS_SUCCESS)                                         \
      ::cutrain::cudnn_detail::cudnn_fail(#call, __FILE__, __LINE__, cutrain_st_);   \
  } while (0)
#define CUDNN_CHECK_NOTHROW(call)                                                    \
  do {                                                                               \
    cudnnStatus_t cutrain_st_ = (call);                                              \
    if (cutrain_st_ != CUDNN_STATUS_SUCCESS)                                         \
      ::cutrain::cudnn_detail::cudnn_warn(#call, __FILE__, __LINE__, cutrain_st_);   \
  } while (0)

namespace cutrain {
namespace cudnn_detail {

// The calling thread's handle for `device` (which must be current), bound to `stream`. One per
// (device, thread): created on first use, destroyed when the thread exits.
cudnnHandle_t cudnn_handle(int device, cudaStream_t stream);

// An owned descriptor; neither copied nor moved (they live in caches or on the stack).
template <typename D, cudnnStatus_t (*Create)(D*), cudnnStatus_t (*Destroy)(D)>
class Desc {
 public:
  Desc() { CUDNN_CHECK(Create(&d_)); }
  ~Desc() { CUDNN_CHECK_NOTHROW(Destroy(d_)); }
  Desc(const Desc&) = delete;
  Desc& operator=(const Desc&) = delete;
  D get() const { return d_; }

 private:
  D d_ = nullptr;
};
using TensorDesc = Desc<cudnnTensorDescriptor_t, cudnnCreateTensorDescriptor,
                        cudnnDestroyTensorDescriptor>;
using FilterDesc = Desc<cudnnFilterDescriptor_t, cudnnCreateFilterDescriptor,
                        cudnnDestroyFilterDescriptor>;
using ConvDesc = Desc<cudnnConvolutionDescriptor_t, cudnnCreateConvolutionDescriptor,
                      cudnnDestroyConvolutionDescriptor>;

template <typename T> cudnnDataType_t data_type() {
  static_assert(std::is_same<T, float>::value || std::is_same<T, half_t>::value,
                "the cuDNN paths take float or half_t");
  return std::is_same<T, half_t>::value ? CUDNN_DATA_HALF : CUDNN_DATA_FLOAT;
}

// cuDNN describes tensors with int sizes: refuse what it cannot take, with a clear message.
void check_elements(const char* what, int64_t n);

// alpha / beta of cuDNN's out = alpha * op(in) + beta * out: float for fp16 and fp32 data.
constexpr float kOne = 1.0f, kZero = 0.0f;

}  // namespace cudnn_detail
}  // namespace cutrain
#endif  // CUTRAIN_CUDNN
