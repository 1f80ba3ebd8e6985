// defines: DeviceStep, the device-resident state of GPU training's optimizer step (the
// StepState of kernels/step_state.h and one overflow flag per parameter), and the calls that
// queue its kernels. With Optimizer::check_device / apply_device (nn/optim.h) it makes the
// whole step (unscale, inf/NaN check, skip-or-update, loss-scale change) without the host
// ever waiting for the GPU.
//
//   DeviceStep ds(scaler_config, opt.params().size());        // on this thread's stream
//   ds.reset(scaler.state(), opt.steps_taken);                 // start, or after a restore
//   per micro-batch: ds.seed(share, seed.data<float>());  tape.backward(loss, seed);
//   ds.set_lr(lr);  ds.begin();  opt.check_device(ds);  ds.decide();  opt.apply_device(ds);
//   ds.finish();
//   ... later, from an asynchronous copy of *ds.state(): what the step did.
//
// Everything is queued on the calling thread's GpuContext stream (nn/gpu_context.h) at the
// time of each call; the memory is on the current device. In a CPU-only build constructing
// one throws (there is no device).
#pragma once
#include <cstdint>

#include "kernels/gpu.h"
#include "kernels/step_state.h"

namespace cutrain {

class DeviceStep {
 public:
  DeviceStep(const LossScalerConfig& config, int params);
  DeviceStep(const DeviceStep&) = delete;
  DeviceStep& operator=(const DeviceStep&) = delete;

  // Uploads a fresh state (step_state_make): before the first step and after a restore.
  // Waits for the stream (the copy is from host memory that does not outlive the call).
  void reset(const LossScalerState& scaler, int64_t steps_taken);

  // The step's learning rate into the state, where the update kernels read it (a kernel whose
  // argument it is: queue it outside a captured CUDA graph of the rest). Throws for a rate
  // that is negative or not finite.
  void set_lr(double lr);
  void begin();                      // every flag = 0: before the checks of a step
  int32_t* flag(int i);              // parameter i's overflow flag (device)
  void decide();                     // step_decide_gpu over the flags
  // The decision of the flags as they are now into *out (device memory; skip and first_bad
  // are what count), leaving the state alone: data-parallel replicas keep their own decision
  // before their flags are OR-ed with the other replicas' (train/trainer_gpu.h).
  void decide_into(StepState* out);
  int32_t* flags() { return flags_; }  // all params() flags, contiguous
  void finish();                     // step_finish_gpu
  // *seed (a device f32) = the current scale x share, for Tape::backward's seed tensor.
  void seed(double share, float* seed);

  // Device pointers for the optimizer kernels and for copies of the state.
  const StepState* state() const { return state_; }
  const float* inv_scale() const { return &state_->inv_scale; }
  const int32_t* skip() const { return &state_->skip; }
  const int64_t* t() const { return &state_->t; }
  const double* lr() const { return &state_->lr; }

  // A synchronous copy of the state (waits for the stream): tests, never a training step.
  StepState read() const;

  const LossScalerConfig& config() const { return config_; }
  int params() const { return params_; }

 private:
  LossScalerConfig config_;
  int params_;
  DeviceBuffer mem_;                 // the StepState, then params_ int32 flags
  StepState* state_ = nullptr;
  int32_t* flags_ = nullptr;
};

}  // namespace cutrain
