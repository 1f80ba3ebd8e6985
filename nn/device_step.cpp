// DeviceStep: the device memory of the step state and the launches that move it along.
#include "nn/device_step.h"

#include <cmath>

#include "kernels/check.h"
#include "nn/gpu_context.h"

namespace cutrain {

namespace {
constexpr size_t kFlagsOffset = (sizeof(StepState) + 15) / 16 * 16;
}

DeviceStep::DeviceStep(const LossScalerConfig& config, int params)
    : config_(config), params_(params) {
  CHECK(params >= 1, "DeviceStep: " << params << " parameters");
  CHECK(gpu_usable(), "DeviceStep: " << gpu_unavailable_reason());
  mem_ = DeviceBuffer(kFlagsOffset + size_t(params) * sizeof(int32_t), current_device(),
                      gpu_context().stream);
  state_ = static_cast<StepState*>(mem_.data());
  flags_ = reinterpret_cast<int32_t*>(static_cast<char*>(mem_.data()) + kFlagsOffset);
}

void DeviceStep::reset(const LossScalerState& scaler, int64_t steps_taken) {
  // From a local, so wait for the copy before it goes out of scope: for a pageable source
  // cudaMemcpyAsync only "might be synchronous" (the CUDA docs' API synchronization behavior),
  // nothing promises the bytes were read when it returns. A reset is rare (the start, a
  // restore), so the wait costs nothing that matters.
  const cudaStream_t stream = gpu_context().stream;
  const StepState s = step_state_make(scaler, steps_taken);
  copy_async(state_, &s, sizeof s, stream);
  memset_async(flags_, 0, size_t(params_) * sizeof(int32_t), stream);
  Event done;
  done.record(stream);
  done.synchronize();
}

void DeviceStep::begin() {
  memset_async(flags_, 0, size_t(params_) * sizeof(int32_t), gpu_context().stream);
}

int32_t* DeviceStep::flag(int i) {
  CHECK(i >= 0 && i < params_, "DeviceStep: flag " << i << " of " << params_);
  return flags_ + i;
}

#if defined(CUTRAIN_CUDA)
void DeviceStep::decide() { step_decide_gpu(params_, flags_, state_, gpu_context().stream); }
void DeviceStep::decide_into(StepState* out) {
  step_decide_gpu(params_, flags_, out, gpu_context().stream);
}
void DeviceStep::finish() { step_finish_gpu(config_, state_, gpu_context().stream); }
void DeviceStep::set_lr(double lr) {
  CHECK(std::isfinite(lr) && lr >= 0, "the learning rate must be >= 0, got " << lr);
  step_set_lr_gpu(state_, lr, gpu_context().stream);
}
void DeviceStep::seed(double share, float* seed) {
  loss_seed_gpu(state_, share, seed, gpu_context().stream);
}
#else
// Not reached: the constructor throws without a usable GPU, and a CPU-only build has none.
void DeviceStep::decide() { CHECK(false, "DeviceStep: a CPU-only build has no GPU kernels"); }
void DeviceStep::decide_into(StepState*) {
  CHECK(false, "DeviceStep: a CPU-only build has no GPU kernels");
}
void DeviceStep::finish() { CHECK(false, "DeviceStep: a CPU-only build has no GPU kernels"); }
void DeviceStep::set_lr(double) { CHECK(false, "DeviceStep: a CPU-only build has no GPU kernels"); }
void DeviceStep::seed(double, float*) {
  CHECK(false, "DeviceStep: a CPU-only build has no GPU kernels");
}
#endif

StepState DeviceStep::read() const {
  StepState s;
  const cudaStream_t stream = gpu_context().stream;
  copy_async(&s, state_, sizeof s, stream);
  Event done;
  done.record(stream);
  done.synchronize();
  return s;
}

}  // namespace cutrain
