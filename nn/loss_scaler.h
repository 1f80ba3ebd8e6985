// defines: the loss scaler's rules around its transition: validate_loss_scaler_config,
// loss_scaler_start, loss_scaler_restored (a checkpoint's state, checked) and
// loss_scaler_check (the abort after too many consecutive skips). LossScalerConfig,
// LossScalerState and loss_scaler_next (the transition) live in kernels/loss_scale.h; the
// state lives in the step state on the model's device (StepState::scaler, nn/device_step.h),
// moved by DeviceStep::finish on the CPU and the GPU alike. There is no other copy of it.
//
// Why: fp16 gradients underflow to zero below 2^-24, so the loss is multiplied by a large
// scale before backward and the optimizer divides it out (StepState::inv_scale). Too large a
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
// (fp32 training stops at the first: train/engine/trainer.cpp, loss_scaler_config).
// After max_consecutive_skips overflows in a row nothing is being learnt (the model has
// diverged, or the data holds inf/NaN): loss_scaler_check throws, naming the step and the
// scale.
//
// The state is a small plain struct so that a checkpoint can save it and the step state can
// keep it where the model lives and apply loss_scaler_next() there (on a GPU in a kernel, with
// no host round trip: kernels/step_state.h).
//
//   DeviceStep ds(config, P, device);  ds.reset(loss_scaler_start(config), 0);
//   ... each step: tape.backward(loss, ds.seed(share, dtype)); take_step(opt, ds, lr);
//   loss_scaler_check(config, ds.read().scaler, step, name);   // throws after 30 in a row
#pragma once
#include <cstdint>
#include <string>

#include "kernels/loss_scale.h"

namespace cutrain {

// Throws naming the field for a config that makes no sense (growth < 1, min > max, ...).
void validate_loss_scaler_config(const LossScalerConfig& c);

// The state a run starts from: scale = init, every counter 0 (the config validated first).
LossScalerState loss_scaler_start(const LossScalerConfig& c);

// A saved state (a checkpoint's) checked against the config (scale within bounds, counters
// >= 0) and made this config's: a fixed scale (fp32) forgets old skips, since it stops at the
// first. Throws a UserError when the state was saved at or past this config's abort
// (max_consecutive_skips in a row: raise --max-skips to go on).
LossScalerState loss_scaler_restored(const LossScalerConfig& c, const LossScalerState& saved);

// After the step `step` left the scaler in `after`: throws cutrain::UserError
// "step S: N consecutive steps overflowed (..., first in conv1.w) ... (loss scale now X)" once
// N = max_consecutive_skips overflows in a row are recorded; with a fixed scale it says there
// is no scale to lower. first_bad names the parameter whose gradient overflowed first.
void loss_scaler_check(const LossScalerConfig& c, const LossScalerState& after, int64_t step,
                       const std::string& first_bad = "");

}  // namespace cutrain
