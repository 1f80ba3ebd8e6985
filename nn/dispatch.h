// defines: dispatch_float(dtype, f): calls f(T{}) with T the C++ type of a floating dtype, so an
// op is written once as a template and runs in f32, f16 and f64.
//
//   dispatch_float(x.dtype(), [&](auto tag) {
//     using T = decltype(tag);
//     relu_forward_cpu<T>(n, x.data<T>(), y.data<T>());
//   });
#pragma once
#include "kernels/check.h"
#include "kernels/half.h"
#include "nn/tensor.h"

namespace cutrain {

template <typename F>
void dispatch_float(DType t, F&& f) {
  switch (t) {
    case DType::f32: f(float{}); return;
    case DType::f16: f(half_t{}); return;
    case DType::f64: f(double{}); return;
    default: CHECK(false, "expected a floating-point tensor, got " << dtype_name(t));
  }
}

// The ops of nn/ run on the CPU in this build of cutrain; CUDA kernels come with the kernels
// module. This names the op and the tensor so the message says exactly what was refused.
inline void check_cpu(const char* op, const Tensor& t) {
  CHECK(t.device() == Device::cpu,
        op << ": no CUDA kernel for this op yet; got a tensor " << t.str());
}

inline void check_same_dtype(const char* op, const Tensor& a, const Tensor& b) {
  CHECK(a.dtype() == b.dtype(), op << ": dtypes differ: " << a.str() << " and " << b.str());
}

}  // namespace cutrain
