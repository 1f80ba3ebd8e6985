// DeviceStep: the step state's memory on the model's device, and the calls that move it along:
// the CPU functions of kernels/step_state.h on the CPU, their one-thread kernels on a GPU.
#include "nn/device_step.h"

#include <cmath>
#include <cstring>

#include "kernels/check.h"
#include "nn/loss_scaler.h"

namespace cutrain {

namespace {
constexpr size_t kFlagsOffset = (sizeof(StepState) + 15) / 16 * 16;

#if !defined(CUTRAIN_CUDA)
[[noreturn]] void no_gpu() { CHECK(false, "DeviceStep: a CPU-only build has no GPU kernels"); }
#endif
}  // namespace

DeviceStep::DeviceStep(const LossScalerConfig& config, int params, const Context& context)
    : config_(config), params_(params), context_(context) {
  CHECK(params >= 1, "DeviceStep: " << params << " parameters");
  validate_loss_scaler_config(config_);
  const size_t bytes = kFlagsOffset + size_t(params) * sizeof(int32_t);
  char* base = nullptr;
  if (context_.device == Device::cuda) {
    CHECK(gpu_usable(), "DeviceStep: " << gpu_unavailable_reason());
    mem_ = DeviceBuffer(bytes, context_.gpu >= 0 ? context_.gpu : current_device(),
                        context_.stream);
    base = static_cast<char*>(mem_.data());
  } else {
    host_.assign((bytes + sizeof(int64_t) - 1) / sizeof(int64_t), 0);
    base = reinterpret_cast<char*>(host_.data());
  }
  state_ = reinterpret_cast<StepState*>(base);
  flags_ = reinterpret_cast<int32_t*>(base + kFlagsOffset);
  reset(loss_scaler_start(config_), 0);  // the same start on both devices
}

void DeviceStep::reset(const LossScalerState& scaler, int64_t steps_taken) {
  CHECK(std::isfinite(scaler.scale) && scaler.scale > 0,
        "DeviceStep: the loss scale must be positive, got " << scaler.scale);
  CHECK(scaler.clean_steps >= 0 && scaler.consecutive_skips >= 0 && scaler.skipped_total >= 0 &&
            steps_taken >= 0,
        "DeviceStep: the counters must be >= 0");
  const StepState s = step_state_make(scaler, steps_taken);
  if (context_.device == Device::cpu) {
    *state_ = s;
    std::memset(flags_, 0, size_t(params_) * sizeof(int32_t));
    return;
  }
  // From a local, so wait for the copy before it goes out of scope: for a pageable source
  // cudaMemcpyAsync only "might be synchronous" (the CUDA docs' API synchronization behavior),
  // nothing promises the bytes were read when it returns. A reset is rare (the start, a
  // restore), so the wait costs nothing that matters.
  const cudaStream_t stream = context_.stream;
  copy_async(state_, &s, sizeof s, stream);
  memset_async(flags_, 0, size_t(params_) * sizeof(int32_t), stream);
  Event done;
  done.record(stream);
  done.synchronize();
}

void DeviceStep::begin() {
  note_launch(context_.plan, memset_cost(size_t(params_) * sizeof(int32_t)));
  if (context_.device == Device::cpu)
    std::memset(flags_, 0, size_t(params_) * sizeof(int32_t));
  else
    memset_async(flags_, 0, size_t(params_) * sizeof(int32_t), context_.stream);
}

int32_t* DeviceStep::flag(int i) {
  CHECK(i >= 0 && i < params_, "DeviceStep: flag " << i << " of " << params_);
  return flags_ + i;
}

void DeviceStep::set_lr(double lr) {
  CHECK(std::isfinite(lr) && lr >= 0, "the learning rate must be >= 0, got " << lr);
  note_launch(context_.plan, step_set_lr_gpu_cost());
  if (context_.device == Device::cpu) return step_set_lr_cpu(state_, lr);
#if defined(CUTRAIN_CUDA)
  step_set_lr_gpu(state_, lr, context_.stream);
#else
  no_gpu();
#endif
}

void DeviceStep::decide() { decide_into(state_); }

void DeviceStep::decide_into(StepState* out) {
  note_launch(context_.plan, step_decide_gpu_cost(params_));
  if (context_.device == Device::cpu) return step_decide_cpu(params_, flags_, out);
#if defined(CUTRAIN_CUDA)
  step_decide_gpu(params_, flags_, out, context_.stream);
#else
  no_gpu();
#endif
}

void DeviceStep::finish() {
  note_launch(context_.plan, step_finish_gpu_cost());
  if (context_.device == Device::cpu) return step_finish_cpu(config_, state_);
#if defined(CUTRAIN_CUDA)
  step_finish_gpu(config_, state_, context_.stream);
#else
  no_gpu();
#endif
}

Tensor DeviceStep::seed(double share, DType dtype) {
  Tensor seed = Tensor::empty({1}, dtype, context_);
  note_launch(context_.plan, loss_seed_gpu_cost());
  if (context_.device == Device::cpu) {
    CHECK(dtype == DType::f32 || dtype == DType::f64,
          "DeviceStep::seed: the loss is f32 or f64, got " << dtype_name(dtype));
    if (dtype == DType::f64)
      *seed.data<double>() = mul_rn(state_->scaler.scale, share);
    else
      loss_seed_cpu(state_, share, seed.data<float>());
    return seed;
  }
  CHECK(dtype == DType::f32, "DeviceStep::seed: a GPU loss is f32, got " << dtype_name(dtype));
#if defined(CUTRAIN_CUDA)
  loss_seed_gpu(state_, share, seed.data<float>(), context_.stream);
#else
  no_gpu();
#endif
  return seed;
}

StepState DeviceStep::read() const {
  if (context_.device == Device::cpu) return *state_;
  StepState s;
  const cudaStream_t stream = context_.stream;
  copy_async(&s, state_, sizeof s, stream);
  Event done;
  done.record(stream);
  done.synchronize();
  return s;
}

}  // namespace cutrain
