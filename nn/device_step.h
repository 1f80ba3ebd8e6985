// defines: DeviceStep, the state of the optimizer step where the model lives (the StepState of
// kernels/step_state.h and one overflow flag per parameter; device memory on a GPU, host
// memory on the CPU), and the calls that move it along. With Optimizer::check / apply
// (nn/optim.h) it makes the whole step: unscale, inf/NaN check, skip-or-update, loss-scale
// change. This is the one optimizer protocol and the one loss scaler of cutrain, on both
// devices: the CPU runs every call at once, a GPU queues it, and the host never waits for it.
//
//   DeviceStep ds(scaler_config, opt.params().size(), gpu);   // in the model's Context
//   ds.reset(LossScalerState{...}, steps_taken);               // start, or after a restore
//   per micro-batch: tape.backward(loss, ds.seed(share, loss->value.dtype()));
//   ds.set_lr(lr);  ds.begin();  opt.check_and_decide(ds);  opt.apply(ds);
//   ... later (on a GPU from an asynchronous copy of *ds.state()): what the step did.
//
// check_and_decide is opt.check(ds) then ds.decide(); apply ends in ds.finish(). On a GPU each
// pair is one launch (the step's work done by the optimizer kernel's last block), so decide()
// and finish() are called on their own only where the step is split: replicas OR their flags
// between check and decide (train/engine/engine.cpp), and the tests of each part.
// take_step (nn/optim.h) runs that sequence and reads the decision: tests and tools.
//
// On a GPU everything, the optimizer's kernels included, is queued on the context's stream
// (nn/context.h), the memory on its device; in a CPU-only build constructing one for cuda
// throws (there is no device).
#pragma once
#include <cstdint>
#include <vector>

#include "kernels/gpu.h"
#include "kernels/step_state.h"
#include "nn/tensor.h"

namespace cutrain {

class DeviceStep {
 public:
  // Starts at loss_scaler_start(config) and step 0 (the config is validated).
  DeviceStep(const LossScalerConfig& config, int params, const Context& context);
  DeviceStep(const DeviceStep&) = delete;
  DeviceStep& operator=(const DeviceStep&) = delete;

  // A fresh state (step_state_make): after a restore. Throws for a scale that is not positive
  // or a negative counter. On a GPU it waits for the stream (the copy is from host memory that
  // does not outlive the call).
  void reset(const LossScalerState& scaler, int64_t steps_taken);

  // The step's learning rate into the state, where the update reads it (on a GPU a kernel
  // whose argument it is: queue it outside a captured CUDA graph of the rest). Throws for a
  // rate that is negative or not finite.
  void set_lr(double lr);
  void begin();                      // every flag = 0: before the checks of a step
  int32_t* flag(int i);              // parameter i's overflow flag (the device's memory)
  void decide();                     // step_decide over the flags
  // The decision of the flags as they are now into *out (the device's memory; skip and
  // first_bad are what count), leaving the state alone: data-parallel replicas keep their own
  // decision before their flags are OR-ed with the other replicas' (train/replicas/collective.h).
  void decide_into(StepState* out);
  int32_t* flags() { return flags_; }  // all params() flags, contiguous
  void finish();                     // step_finish: the loss scaler's transition, the count
  // backward's seed: a one-element tensor of `dtype` on the device holding the current scale x
  // share (loss_seed: rounded once from the double product; f64 keeps the double).
  Tensor seed(double share, DType dtype);

  // Pointers (the device's memory) for the optimizer and for copies of the state.
  StepState* state() { return state_; }
  const StepState* state() const { return state_; }
  const float* inv_scale() const { return &state_->inv_scale; }
  const int32_t* skip() const { return &state_->skip; }
  const int64_t* t() const { return &state_->t; }
  const double* lr() const { return &state_->lr; }

  // The state as it is after everything queued so far (on a GPU a synchronous copy, which
  // waits for the stream: tests, checkpoints, never a training step).
  StepState read() const;

  const LossScalerConfig& config() const { return config_; }
  int params() const { return params_; }
  Device device() const { return context_.device; }
  const Context& context() const { return context_; }  // where the step and the update run

 private:
  LossScalerConfig config_;
  int params_;
  Context context_;
  DeviceBuffer mem_;                 // cuda: the StepState, then params_ int32 flags
  std::vector<int64_t> host_;        // cpu: the same layout (int64_t: aligned for StepState)
  StepState* state_ = nullptr;
  int32_t* flags_ = nullptr;
};

}  // namespace cutrain
