// defines: LossScalerConfig, LossScalerState and loss_scaler_next, the dynamic loss scale's
// transition, written once for the host and the device (CUTRAIN_HD).
//
// The rules around it (the start, a restored state's checks, the abort after too many skips)
// are in nn/loss_scaler.h; the transition is here, in kernels/, because the step state applies
// it where the model lives (kernels/step_state.h): in a kernel on a GPU, so the skip decision
// never leaves the device, and as this very function on the CPU, so both follow the same
// sequence of scales bit for bit.
#pragma once
#include <cstdint>

#include "kernels/hd.h"

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

// The state after one optimizer step attempt (nn/loss_scaler.h has the rules in words).
// mul_rn: one rounding, never contracted, the same on both sides (kernels/hd.h).
CUTRAIN_HD inline LossScalerState loss_scaler_next(const LossScalerConfig& c, LossScalerState s,
                                                   bool overflow) {
  if (overflow) {
    s.consecutive_skips++;
    s.skipped_total++;
    s.clean_steps = 0;
    if (c.dynamic) {
      const double lower = mul_rn(s.scale, c.backoff);
      s.scale = lower < c.min_scale ? c.min_scale : lower;
    }
    return s;
  }
  s.consecutive_skips = 0;
  if (!c.dynamic) return s;
  if (++s.clean_steps >= c.growth_interval) {
    const double higher = mul_rn(s.scale, c.growth);
    s.scale = higher > c.max_scale ? c.max_scale : higher;
    s.clean_steps = 0;
  }
  return s;
}

}  // namespace cutrain
