// defines: LossScaler (the transition of kernels/loss_scale.h plus the abort after too many
// consecutive skips) and validate_loss_scaler_config. LossScalerConfig, LossScalerState and
// loss_scaler_next (the transition) live in kernels/loss_scale.h, shared with the GPU.
//
// Why: fp16 gradients underflow to zero below 2^-24, so the loss is multiplied by a large
// scale before backward and the optimizer divides it out (Optimizer::step(scale)). Too large a
// scale overflows to inf; then the step is skipped and the scale lowered. The scale that
// works drifts during training, so it is searched for all the time:
//
//   overflow (the step was skipped):  scale = max(min_scale, scale * backoff), clean = 0,
//                                     consecutive_skips++, skipped_total++
//   clean step:                       clean++, consecutive_skips = 0; when clean reaches
//                                     growth_interval: scale = min(max_scale, scale * growth),
//                                     clean = 0
//
// With the defaults: start 2^16, x2 after 2000 consecutive clean steps, x0.5 on overflow,
// within [1, 2^24]. dynamic = false keeps the scale fixed at init (1 for fp32 training): an
// overflow still skips the step and counts towards the abort, and clean steps are not counted
// (fp32 training stops at the first: train/trainer.cpp, loss_scaler_config).
// After max_consecutive_skips overflows in a row nothing is being learnt (the model has
// diverged, or the data holds inf/NaN): update() throws, naming the step and the scale.
//
// The state is a small plain struct so that a checkpoint can save it and the GPU trainer can
// keep it in device memory and apply loss_scaler_next() in a kernel, with no host round trip
// (kernels/step_state.h).
//
//   LossScaler scaler(LossScalerConfig{});
//   tape.backward(loss, scaler.scale());
//   const bool taken = opt.step(scaler.scale());
//   scaler.update(!taken, step);          // throws after 30 skips in a row
#pragma once
#include <cstdint>
#include <string>

#include "kernels/loss_scale.h"

namespace cutrain {

// Throws naming the field for a config that makes no sense (growth < 1, min > max, ...).
void validate_loss_scaler_config(const LossScalerConfig& c);

class LossScaler {
 public:
  explicit LossScaler(const LossScalerConfig& config = LossScalerConfig{});

  double scale() const { return s_.scale; }
  int clean_steps() const { return s_.clean_steps; }
  int consecutive_skips() const { return s_.consecutive_skips; }
  int64_t skipped_total() const { return s_.skipped_total; }
  const LossScalerConfig& config() const { return c_; }

  // After each optimizer step attempt; `step` is that step's number and `first_bad` the
  // parameter whose gradient overflowed first, for the message. Throws cutrain::UserError
  // "step S: N consecutive steps overflowed (..., first in conv1.w) ... (loss scale now X)"
  // once the N-th overflow in a row is recorded (the state is updated first); with a fixed
  // scale it says there is no scale to lower.
  void update(bool overflow, int64_t step, const std::string& first_bad = "");

  // For checkpoints. restore() checks the state against the config (scale within bounds).
  LossScalerState state() const { return s_; }
  void restore(const LossScalerState& s);

 private:
  LossScalerConfig c_;
  LossScalerState s_;
};

}  // namespace cutrain
