// Learning-rate schedules: values at the key steps worked out by hand, monotonic phases, and
// the errors for configs that make no sense.
#include <cmath>
#include <string>

#include "nn/schedule.h"
#include "tests/test_util.h"

using namespace cutrain;

namespace {
ScheduleConfig config(const std::string& kind, double base, int64_t warmup, int64_t total,
                      double final_fraction) {
  ScheduleConfig c;
  c.kind = kind, c.base_lr = base, c.warmup_steps = warmup, c.total_steps = total;
  c.final_fraction = final_fraction;
  return c;
}
bool near(double got, double want) {
  return std::fabs(got - want) <= 1e-15 + 1e-12 * std::fabs(want);
}
}  // namespace

TEST_CASE("schedule: cosine with warm-up, by hand") {
  // base 0.1, 10 warm-up steps, 110 in all, down to 0.1 * 0.1 = 0.01; decay over steps 10..110
  const ScheduleConfig c = config("cosine", 0.1, 10, 110, 0.1);
  REQUIRE(near(lr_at(c, 0), 0.01));   // 0.1 * 1/10: small, not zero
  REQUIRE(near(lr_at(c, 4), 0.05));   // 0.1 * 5/10
  REQUIRE(near(lr_at(c, 9), 0.1));    // the last warm-up step reaches base
  REQUIRE(near(lr_at(c, 10), 0.1));   // p = 0: cos 0 = 1
  // p = 25/100: 0.01 + 0.09 * (1 + cos(pi/4)) / 2 = 0.01 + 0.045 * (1 + sqrt(2)/2)
  REQUIRE(near(lr_at(c, 35), 0.01 + 0.045 * (1 + std::sqrt(2.0) / 2)));
  REQUIRE(near(lr_at(c, 60), 0.055));  // p = 1/2: halfway between 0.1 and 0.01
  REQUIRE(near(lr_at(c, 110), 0.01));  // the end ...
  REQUIRE(near(lr_at(c, 100000), 0.01));  // ... and held there
}

TEST_CASE("schedule: linear decay, by hand") {
  const ScheduleConfig c = config("linear", 0.1, 10, 110, 0.1);
  REQUIRE(near(lr_at(c, 0), 0.01));
  REQUIRE(near(lr_at(c, 10), 0.1));
  REQUIRE(near(lr_at(c, 35), 0.0775));  // 0.1 - 0.09 * 0.25
  REQUIRE(near(lr_at(c, 60), 0.055));
  REQUIRE(near(lr_at(c, 109), 0.1 - 0.09 * 0.99));
  REQUIRE(near(lr_at(c, 110), 0.01));
  REQUIRE(near(lr_at(c, 500), 0.01));
  // no warm-up: the first step is at base; decay to 0 by default
  const ScheduleConfig d = config("linear", 0.4, 0, 4, 0.0);
  REQUIRE(near(lr_at(d, 0), 0.4));
  REQUIRE(near(lr_at(d, 1), 0.3));
  REQUIRE(near(lr_at(d, 3), 0.1));
  REQUIRE(lr_at(d, 4) == 0);
}

TEST_CASE("schedule: constant, with and without warm-up") {
  const ScheduleConfig c = config("constant", 0.1, 4, 0, 0.0);
  REQUIRE(near(lr_at(c, 0), 0.025));
  REQUIRE(near(lr_at(c, 1), 0.05));
  REQUIRE(near(lr_at(c, 2), 0.075));
  REQUIRE(near(lr_at(c, 3), 0.1));
  REQUIRE(near(lr_at(c, 1000000), 0.1));
  REQUIRE(lr_at(config("constant", 0.3, 0, 0, 0.0), 0) == 0.3);
}

TEST_CASE("schedule: onecycle is cosine with a 30% warm-up") {
  // 100 steps: warm-up over steps 0..29 (0.1 * (s+1)/30), then cosine from step 30 to 100
  const ScheduleConfig c = config("onecycle", 0.1, 0, 100, 0.0);
  REQUIRE(near(lr_at(c, 0), 0.1 / 30));
  REQUIRE(near(lr_at(c, 14), 0.05));
  REQUIRE(near(lr_at(c, 29), 0.1));
  REQUIRE(near(lr_at(c, 30), 0.1));
  REQUIRE(near(lr_at(c, 65), 0.05));  // p = 35/70 = 1/2
  REQUIRE(lr_at(c, 99) < 1e-4);       // ~0 on the last step
  REQUIRE(lr_at(c, 100) == 0);
  // it is exactly the cosine schedule with warmup_steps = 30
  const ScheduleConfig cos = config("cosine", 0.1, 30, 100, 0.0);
  for (int64_t s = 0; s <= 120; s++) REQUIRE(lr_at(c, s) == lr_at(cos, s));
  // tiny runs still get one warm-up step
  REQUIRE(near(lr_at(config("onecycle", 0.1, 0, 2, 0.0), 0), 0.1));
}

TEST_CASE("schedule: warm-up rises and the decay falls, step by step") {
  for (const char* kind : {"cosine", "linear", "onecycle"}) {
    const bool onecycle = kind == std::string("onecycle");
    const ScheduleConfig c = config(kind, 0.2, onecycle ? 0 : 37, 1000, 0.05);
    const int64_t W = onecycle ? 300 : 37;  // onecycle: 30% of 1000
    INFO(kind);
    for (int64_t s = 1; s < W; s++) REQUIRE(lr_at(c, s) > lr_at(c, s - 1));
    for (int64_t s = W + 1; s <= 1000; s++) REQUIRE(lr_at(c, s) < lr_at(c, s - 1));
    for (int64_t s = 0; s <= 1100; s++) {
      REQUIRE(lr_at(c, s) > 0);
      REQUIRE(lr_at(c, s) <= 0.2);
    }
  }
}

TEST_CASE("schedule: bad configs are refused, naming the field") {
  REQUIRE_ERROR(lr_at(config("step", 0.1, 0, 10, 0), 0), "unknown lr schedule 'step'");
  REQUIRE_ERROR(lr_at(config("cosine", 0.0, 0, 10, 0), 0), "base_lr must be positive");
  REQUIRE_ERROR(lr_at(config("cosine", 0.1, -1, 10, 0), 0), "warmup_steps must be >= 0");
  REQUIRE_ERROR(lr_at(config("cosine", 0.1, 0, 10, 1.5), 0), "final_fraction must be in [0, 1]");
  REQUIRE_ERROR(lr_at(config("cosine", 0.1, 0, 0, 0), 0),
                "total_steps (0) must be greater than warmup_steps (0)");
  REQUIRE_ERROR(lr_at(config("linear", 0.1, 10, 10, 0), 0),
                "total_steps (10) must be greater than warmup_steps (10)");
  REQUIRE_ERROR(lr_at(config("onecycle", 0.1, 5, 100, 0), 0), "leave warmup_steps at 0");
  REQUIRE_ERROR(lr_at(config("onecycle", 0.1, 0, 1, 0), 0), "total_steps must be >= 2");
  REQUIRE_ERROR(lr_at(config("cosine", 0.1, 0, 10, 0), -1), "step must be >= 0");
}
