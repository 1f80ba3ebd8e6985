#include "nn/loss_scaler.h"

#include <algorithm>
#include <cmath>
#include <iomanip>

#include "kernels/check.h"

namespace cutrain {

void validate_loss_scaler_config(const LossScalerConfig& c) {
  CHECK(std::isfinite(c.init) && c.init > 0, "loss scaler: init must be positive, got " << c.init);
  CHECK(c.max_consecutive_skips >= 1,
        "loss scaler: max_consecutive_skips must be >= 1, got " << c.max_consecutive_skips);
  if (!c.dynamic) return;  // a fixed scale: the growth and bounds are not used
  CHECK(std::isfinite(c.min_scale) && c.min_scale > 0,
        "loss scaler: min_scale must be positive, got " << c.min_scale);
  CHECK(std::isfinite(c.max_scale) && c.max_scale >= c.min_scale,
        "loss scaler: max_scale (" << c.max_scale << ") must be >= min_scale (" << c.min_scale
                                   << ")");
  CHECK(c.init >= c.min_scale && c.init <= c.max_scale,
        "loss scaler: init (" << c.init << ") must be within [min_scale, max_scale] = ["
                              << c.min_scale << ", " << c.max_scale << "]");
  CHECK(std::isfinite(c.growth) && c.growth >= 1,
        "loss scaler: growth must be >= 1, got " << c.growth);
  CHECK(c.backoff > 0 && c.backoff <= 1, "loss scaler: backoff must be in (0, 1], got "
                                             << c.backoff);
  CHECK(c.growth_interval >= 1,
        "loss scaler: growth_interval must be >= 1, got " << c.growth_interval);
}

LossScalerState loss_scaler_start(const LossScalerConfig& c) {
  validate_loss_scaler_config(c);
  LossScalerState s;
  s.scale = c.init;
  return s;
}

void loss_scaler_check(const LossScalerConfig& c, const LossScalerState& after, int64_t step,
                       const std::string& first_bad) {
  if (after.consecutive_skips < c.max_consecutive_skips) return;
  const std::string where = first_bad.empty() ? "" : ", first in " + first_bad;
  // A fixed scale (fp32): nothing to lower, so nothing to wait for.
  USER_CHECK(c.dynamic, "step " << step << ": inf/NaN gradient" << where << " ("
                                << after.consecutive_skips << " step"
                                << (after.consecutive_skips == 1 ? "" : "s")
                                << " in a row). There is no loss scale to lower in fp32: the run "
                                   "stops, and its checkpoints keep the weights from before. "
                                   "Training has diverged or the data holds inf/NaN: try a "
                                   "lower --lr or a longer --warmup");
  USER_CHECK(false, "step " << step << ": " << after.consecutive_skips
                            << " consecutive steps overflowed (inf/NaN gradients" << where
                            << ") and were skipped (loss scale now " << std::setprecision(12)
                            << after.scale
                            << "); training has diverged or the data holds inf/NaN: try a lower "
                               "learning rate, a longer warm-up, or --precision fp32");
}

LossScalerState loss_scaler_restored(const LossScalerConfig& c, const LossScalerState& saved) {
  validate_loss_scaler_config(c);
  CHECK(std::isfinite(saved.scale) && saved.scale > 0,
        "loss scaler: saved scale must be positive, got " << saved.scale);
  CHECK(!c.dynamic || (saved.scale >= c.min_scale && saved.scale <= c.max_scale),
        "loss scaler: saved scale " << saved.scale << " is outside [min_scale, max_scale] = ["
                                    << c.min_scale << ", " << c.max_scale << "]");
  CHECK(saved.clean_steps >= 0 && saved.consecutive_skips >= 0 && saved.skipped_total >= 0,
        "loss scaler: saved counters must be >= 0");
  CHECK(!c.dynamic || saved.clean_steps < c.growth_interval,
        "loss scaler: saved clean_steps " << saved.clean_steps
                                          << " must be below growth_interval "
                                          << c.growth_interval);
  LossScalerState s = saved;
  // A fixed scale (fp32) now stops at the first overflow: the skips a checkpoint of an older
  // cutrain counted are of a rule that no longer holds, and nothing is pending from them.
  if (!c.dynamic) s.consecutive_skips = 0;
  USER_CHECK(s.consecutive_skips < c.max_consecutive_skips,
             "the checkpoint was saved after " << s.consecutive_skips << " overflows in a row, "
                                               << "and this run stops at "
                                               << c.max_consecutive_skips
                                               << ": raise --max-skips to go on");
  return s;
}

}  // namespace cutrain
