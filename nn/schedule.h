// defines: ScheduleConfig and lr_at(config, step), the learning rate of each optimizer step.
//
// `step` is the 0-based number of the optimizer step about to be taken; W = warmup_steps,
// T = total_steps, base = base_lr, final = base_lr * final_fraction.
//
//   warm-up, step < W:       lr = base * (step + 1) / W     (linear; the first step is not 0)
//   then, for W <= step < T: p = (step - W) / (T - W), from 0 to just below 1
//     cosine:                lr = final + (base - final) * (1 + cos(pi * p)) / 2
//     linear:                lr = base + (final - base) * p
//   step >= T:               lr = final                     (held there)
//   constant:                lr = base after the warm-up; T is not used (may be 0)
//   onecycle:                the cosine schedule with W = max(1, floor(0.3 * T)), i.e. up to
//                            base over the first 30% of the steps, then down to final (0 by
//                            default). Its warm-up is part of the preset: warmup_steps must be 0.
//
// The warm-up keeps the first updates small while the statistics of a freshly initialised
// network (BN, Adam's moments, the loss scale) settle; the decay makes the last epochs average
// out the gradient noise.
#pragma once
#include <cstdint>
#include <string>

namespace cutrain {

struct ScheduleConfig {
  std::string kind = "cosine";  // cosine | linear | constant | onecycle
  double base_lr = 0.1;
  int64_t warmup_steps = 0;
  int64_t total_steps = 0;      // needed by cosine, linear and onecycle
  double final_fraction = 0.0;  // the lr at the end, as a fraction of base_lr, in [0, 1]
};

// Throws cutrain::Error naming the field for a config that makes no sense.
void validate_schedule(const ScheduleConfig& c);

// The lr of step `step` (>= 0). Validates the config (cheap) on every call.
double lr_at(const ScheduleConfig& c, int64_t step);

}  // namespace cutrain
