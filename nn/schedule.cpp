#include "nn/schedule.h"

#include <cmath>

#include "kernels/check.h"

namespace cutrain {

namespace {
int64_t onecycle_warmup(int64_t total) { return total * 3 / 10 > 1 ? total * 3 / 10 : 1; }
}  // namespace

void validate_schedule(const ScheduleConfig& c) {
  const std::string& k = c.kind;
  CHECK(k == "cosine" || k == "linear" || k == "constant" || k == "onecycle",
        "unknown lr schedule '" << k << "' (expected cosine, linear, constant or onecycle)");
  CHECK(std::isfinite(c.base_lr) && c.base_lr > 0,
        "lr schedule: base_lr must be positive, got " << c.base_lr);
  CHECK(c.warmup_steps >= 0, "lr schedule: warmup_steps must be >= 0, got " << c.warmup_steps);
  CHECK(c.final_fraction >= 0 && c.final_fraction <= 1,
        "lr schedule: final_fraction must be in [0, 1], got " << c.final_fraction);
  if (k == "constant") return;
  if (k == "onecycle") {
    CHECK(c.warmup_steps == 0, "lr schedule onecycle: the warm-up is part of the preset (30% of "
                               "total_steps); leave warmup_steps at 0, got "
                                   << c.warmup_steps);
    CHECK(c.total_steps >= 2, "lr schedule onecycle: total_steps must be >= 2, got "
                                  << c.total_steps);
    return;
  }
  CHECK(c.total_steps > c.warmup_steps,
        "lr schedule " << k << ": total_steps (" << c.total_steps
                       << ") must be greater than warmup_steps (" << c.warmup_steps << ")");
}

double lr_at(const ScheduleConfig& c, int64_t step) {
  validate_schedule(c);
  CHECK(step >= 0, "lr schedule: step must be >= 0, got " << step);
  const bool onecycle = c.kind == "onecycle";
  const int64_t W = onecycle ? onecycle_warmup(c.total_steps) : c.warmup_steps;
  const int64_t T = c.total_steps;
  const double base = c.base_lr, final_lr = c.base_lr * c.final_fraction;

  if (step < W) return base * double(step + 1) / double(W);
  if (c.kind == "constant") return base;
  if (step >= T) return final_lr;
  const double p = double(step - W) / double(T - W);
  if (c.kind == "linear") return base + (final_lr - base) * p;
  const double pi = 3.14159265358979323846;
  return final_lr + (base - final_lr) * 0.5 * (1 + std::cos(pi * p));  // cosine, onecycle
}

}  // namespace cutrain
