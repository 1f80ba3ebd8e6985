// defines: Context, where and how ops run: the device, on a GPU the stream their kernels are queued
// on, and which implementation runs conv2d and linear (kernels/impl.h). It is passed explicitly,
// never kept in a global: a Tape carries the context of the ops recorded on it (nn/autograd.h), a
// DeviceStep that of its optimizer (nn/device_step.h), and a tensor is made in one (Tensor::empty)
// and remembers its stream, so that its own copies and casts queue there.
//
//   const Context gpu = Context::cuda(compute.get(), ConvImpl::cudnn, LinearImpl::tc);
//   Tape tape(gpu);
//   VarPtr x = make_var(images.to(gpu));              // copied on `compute`
//   VarPtr y = conv2d(tape, x, w, b, 1, 1, 1, 1);     // queued on `compute`, through cuDNN
//
// The CPU is the default context: `Tape tape;` and `Tensor::empty(shape, dtype)` are on it.
#pragma once
#include <cstdint>
#include <optional>
#include <type_traits>

#include "kernels/gpu.h"
#include "kernels/half.h"
#include "kernels/impl.h"
#include "kernels/launch_plan.h"

namespace cutrain {

enum class Device : uint8_t { cpu, cuda };
const char* device_name(Device d);  // "cpu", "cuda"

struct Context {
  Device device = Device::cpu;
  cudaStream_t stream = nullptr;      // on a GPU: the stream (null: the legacy default stream)
  int gpu = -1;                       // on a GPU: its ordinal; -1: the current device
  ConvImpl conv = ConvImpl::tc;       // tc is fp16 only: f32 tensors run `direct` under tc
  LinearImpl linear = LinearImpl::tc;
  // Where the ops note what they launch on a GPU (kernels/launch_plan.h), on either device:
  // `cutrain describe MODEL --step` walks a step on the CPU with one. Null: not noted.
  LaunchPlan* plan = nullptr;

  static Context cpu() { return Context{}; }
  static Context cuda(cudaStream_t stream, ConvImpl conv = ConvImpl::tc,
                      LinearImpl linear = LinearImpl::tc, int gpu = -1) {
    return Context{Device::cuda, stream, gpu, conv, linear, nullptr};
  }
};

// CUDA launches a kernel on the calling thread's current device, and a stream belongs to one
// device: a replica on GPU 1 makes GPU 1 current while it queues its work. This makes the
// context's GPU current for a scope (nothing on the CPU or for gpu -1) and restores the
// previous one at its end. It is CUDA's own per-thread state, not a context of ours.
class OnDevice {
 public:
  explicit OnDevice(const Context& c) {
    if (c.device == Device::cuda && c.gpu >= 0) guard_.emplace(c.gpu);
  }
  OnDevice(const OnDevice&) = delete;
  OnDevice& operator=(const OnDevice&) = delete;

 private:
  std::optional<DeviceGuard> guard_;
};

// The implementation an op on T runs in context c. On a GPU: c's, except that tc (tensor cores:
// fp16 in) means direct for f32 tensors, so one setting serves --precision fp16 and fp32 alike.
// On the CPU: onednn for f32 tensors when c asks for it, else direct (the reference), so a CPU
// context left at the GPU default (tc) runs the reference.
// gpu_conv_impl / gpu_linear_impl: the GPU's rule alone, whatever c's device: what a GPU runs,
// and so what a LaunchPlan notes on either device (onednn, a CPU choice, means tc there).
// (One pass of a layer may choose its own: ConvChoice, kernels/impl.h.)
template <typename T> ConvImpl gpu_conv_impl(ConvImpl chosen) {
  const ConvImpl i = chosen == ConvImpl::onednn ? ConvImpl::tc : chosen;
  return i == ConvImpl::tc && !std::is_same<T, half_t>::value ? ConvImpl::direct : i;
}
template <typename T> ConvImpl gpu_conv_impl(const Context& c) { return gpu_conv_impl<T>(c.conv); }
template <typename T> LinearImpl gpu_linear_impl(const Context& c) {
  const LinearImpl i = c.linear == LinearImpl::onednn ? LinearImpl::tc : c.linear;
  return i == LinearImpl::tc && !std::is_same<T, half_t>::value ? LinearImpl::direct : i;
}
template <typename T> ConvImpl conv_impl(const Context& c) {
  if (c.device == Device::cpu)
    return c.conv == ConvImpl::onednn && std::is_same<T, float>::value ? ConvImpl::onednn
                                                                       : ConvImpl::direct;
  return gpu_conv_impl<T>(c);
}
template <typename T> LinearImpl linear_impl(const Context& c) {
  if (c.device == Device::cpu)
    return c.linear == LinearImpl::onednn && std::is_same<T, float>::value ? LinearImpl::onednn
                                                                           : LinearImpl::direct;
  return gpu_linear_impl<T>(c);
}

}  // namespace cutrain
