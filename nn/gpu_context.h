// defines: GpuContext, what the nn ops of one thread need to run on a GPU: the stream they
// queue their kernels on, and which implementation runs conv2d and linear (kernels/impl.h).
//
// The context is per thread (a training loop, an evaluation thread and each replica have their
// own), so ops need no stream argument and the CPU path is unchanged. Set it for a scope:
//
//   GpuContextScope on(GpuContext{compute.get(), ConvImpl::cudnn, LinearImpl::tc});
//   VarPtr y = conv2d(tape, x, w, b, 1, 1, 1, 1);   // queued on `compute`, through cuDNN
//
// Tensors on cuda allocate from the current device's caching allocator on this stream and zero
// themselves on it, so a thread's ops, allocations and frees are all ordered on one stream.
// A context with a device (>= 0) also makes that device current for the scope: a replica on
// GPU 1 (train/engine/trainer.h) puts its tensors, kernels and events there.
#pragma once
#include <optional>
#include <type_traits>

#include "kernels/gpu.h"
#include "kernels/half.h"
#include "kernels/impl.h"

namespace cutrain {

struct GpuContext {
  cudaStream_t stream = nullptr;      // null: the legacy default stream
  ConvImpl conv = ConvImpl::tc;       // tc is fp16 only: f32 tensors run `direct` under tc
  LinearImpl linear = LinearImpl::tc;
  int device = -1;                    // the stream's device; -1: leave the current one
};

GpuContext& gpu_context();  // the calling thread's

// Sets this thread's context for a scope and restores the previous one at its end.
class GpuContextScope {
 public:
  explicit GpuContextScope(const GpuContext& c) : saved_(gpu_context()) {
    if (c.device >= 0) device_.emplace(c.device);
    gpu_context() = c;
  }
  ~GpuContextScope() { gpu_context() = saved_; }
  GpuContextScope(const GpuContextScope&) = delete;
  GpuContextScope& operator=(const GpuContextScope&) = delete;

 private:
  GpuContext saved_;
  std::optional<DeviceGuard> device_;  // restores the previous device
};

// The implementation an op on T runs: the context's, except that tc (tensor cores: fp16 in)
// means direct for f32 tensors, so one setting serves --precision fp16 and fp32 alike.
template <typename T> ConvImpl conv_impl() {
  const ConvImpl i = gpu_context().conv;
  return i == ConvImpl::tc && !std::is_same<T, half_t>::value ? ConvImpl::direct : i;
}
template <typename T> LinearImpl linear_impl() {
  const LinearImpl i = gpu_context().linear;
  return i == LinearImpl::tc && !std::is_same<T, half_t>::value ? LinearImpl::direct : i;
}

}  // namespace cutrain
