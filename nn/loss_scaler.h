// defines: LossScalerConfig, LossScalerState, loss_scaler_next (the transition) and LossScaler
// (the transition plus the abort after too many consecutive skips).
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
// overflow still skips the step and counts towards the abort, and clean steps are not counted.
// After max_consecutive_skips overflows in a row nothing is being learnt (the model has
// diverged, or the data holds inf/NaN): update() throws, naming the step and the scale.
//
// The state is a small plain struct so that a checkpoint can save it and a GPU version can
// keep it in device memory and apply loss_scaler_next() in a kernel, with no host round trip.
//
//   LossScaler scaler(LossScalerConfig{});
//   tape.backward(loss, scaler.scale());
//   const bool taken = opt.step(scaler.scale());
//   scaler.update(!taken, step);          // throws after 30 skips in a row
#pragma once
#include <cstdint>

namespace cutrain {

struct LossScalerConfig {
  double init = 65536;           // 2^16
  double growth = 2;
  double backoff = 0.5;
  double min_scale = 1;
  double max_scale = 16777216;   // 2^24
  int growth_interval = 2000;    // clean steps in a row before the scale grows
  int max_consecutive_skips = 30;
  bool dynamic = true;
};

struct LossScalerState {
  double scale = 65536;
  int32_t clean_steps = 0;        // clean steps since the last change of scale or overflow
  int32_t consecutive_skips = 0;  // overflows in a row
  int64_t skipped_total = 0;
};

// Throws naming the field for a config that makes no sense (growth < 1, min > max, ...).
void validate_loss_scaler_config(const LossScalerConfig& c);

// The state after one optimizer step attempt: the transition above, nothing else.
LossScalerState loss_scaler_next(const LossScalerConfig& c, LossScalerState s, bool overflow);

class LossScaler {
 public:
  explicit LossScaler(const LossScalerConfig& config = LossScalerConfig{});

  double scale() const { return s_.scale; }
  int clean_steps() const { return s_.clean_steps; }
  int consecutive_skips() const { return s_.consecutive_skips; }
  int64_t skipped_total() const { return s_.skipped_total; }
  const LossScalerConfig& config() const { return c_; }

  // After each optimizer step attempt; `step` is that step's number, for the message. Throws
  // cutrain::Error "step S: N consecutive steps overflowed ... (loss scale now X) ..." once
  // the N-th overflow in a row is recorded (the state is updated first).
  void update(bool overflow, int64_t step);

  // For checkpoints. restore() checks the state against the config (scale within bounds).
  LossScalerState state() const { return s_; }
  void restore(const LossScalerState& s);

 private:
  LossScalerConfig c_;
  LossScalerState s_;
};

}  // namespace cutrain
