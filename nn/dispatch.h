// defines: dispatch_float(dtype, f): calls f(T{}) with T the C++ type of a floating dtype, so an
// op is written once as a template and runs in f32, f16 and f64.
//
//   dispatch_float(x.dtype(), [&](auto tag) {
//     using T = decltype(tag);
//     relu_forward_cpu<T>(n, x.data<T>(), y.data<T>());
//   });
//
// and op_on_gpu() / ON_GPU(): the same template calls the op's GPU launcher when it runs in a
// GPU context (queued on the context's stream, nn/context.h).
#pragma once
#include <cstdlib>
#include <initializer_list>
#include <type_traits>

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

// Does an op in context c run on the GPU? Its tensors must all be on c's device (undefined
// tensors, such as a missing bias, are ignored): the context of its tape (nn/autograd.h).
inline bool op_on_gpu(const Context& c, const char* op, std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts) {
    if (!t || !t->defined()) continue;
    CHECK(t->device() == c.device, op << ": " << t->str() << " is not on the device the op runs on ("
                                      << device_name(c.device)
                                      << "): make the Tape in the tensors' Context (nn/context.h)");
  }
  return c.device == Device::cuda;
}

// The GPU kernels exist for f32 and f16; f64 tensors live on the CPU only (tensor.h), so an
// op on cuda never sees one.
template <typename T>
constexpr bool gpu_dtype = std::is_same<T, float>::value || std::is_same<T, half_t>::value;

[[noreturn]] inline void no_gpu_kernel(const char* op) {
  CHECK(false, op << ": no GPU kernel here (a CPU-only build, or a dtype other than f32/f16)");
  std::abort();  // not reached: CHECK threw
}

// ON_GPU(op, T, call...): an op's GPU branch, written inside dispatch_float beside the CPU call:
//
//   if (on_gpu) ON_GPU("relu", T, relu_forward_gpu<T>(n, x, y, ctx.stream));
//   else relu_forward_cpu<T>(n, x, y);
//
// A CPU-only build has no GPU kernels to call and no cuda tensors (Tensor::empty refuses
// them), so there the branch compiles to an error and `call` is not compiled at all.
#if defined(CUTRAIN_CUDA)
#define ON_GPU(op, T, ...)                                            \
  do {                                                                \
    if constexpr (::cutrain::gpu_dtype<T>) { __VA_ARGS__; }           \
    else ::cutrain::no_gpu_kernel(op);                                \
  } while (0)
#else
#define ON_GPU(op, T, ...) ::cutrain::no_gpu_kernel(op)
#endif

inline void check_same_dtype(const char* op, const Tensor& a, const Tensor& b) {
  CHECK(a.dtype() == b.dtype(), op << ": dtypes differ: " << a.str() << " and " << b.str());
}

}  // namespace cutrain
