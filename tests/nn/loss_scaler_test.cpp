// The dynamic loss scale: the exact state machine on a scripted run, the growth step with the
// defaults, the abort that names the step, a fixed scale, save/restore, and bad configs.
#include <string>
#include <vector>

#include "nn/loss_scaler.h"
#include "tests/test_util.h"

using namespace cutrain;

namespace {
// init 8, x2 after 3 clean steps, x0.5 on overflow, within [1, 32].
LossScalerConfig small_config() {
  LossScalerConfig c;
  c.init = 8, c.growth = 2, c.backoff = 0.5, c.min_scale = 1, c.max_scale = 32;
  c.growth_interval = 3;
  c.max_consecutive_skips = 10;
  return c;
}
}  // namespace

TEST_CASE("loss scaler: the exact (scale, clean counter) sequence, hitting both bounds") {
  // 'C' = a clean step, 'O' = an overflow (skipped step); after each, the expected state.
  struct Expect { char event; double scale; int clean; int skips; };
  const std::vector<Expect> script = {
      {'C', 8, 1, 0},  {'C', 8, 2, 0},  {'C', 16, 0, 0},  // 3 clean: x2
      {'C', 16, 1, 0}, {'C', 16, 2, 0}, {'C', 32, 0, 0},  // reaches max_scale
      {'C', 32, 1, 0}, {'C', 32, 2, 0}, {'C', 32, 0, 0},  // at the max: counter resets, no growth
      {'O', 16, 0, 1},                                    // overflow: x0.5
      {'C', 16, 1, 0}, {'C', 16, 2, 0},                   // clean counter restarts ...
      {'O', 8, 0, 1},                                     // ... and an overflow resets it
      {'O', 4, 0, 2},  {'O', 2, 0, 3},  {'O', 1, 0, 4},   // down to min_scale
      {'O', 1, 0, 5},                                     // held at the min
      {'C', 1, 1, 0},  {'C', 1, 2, 0},  {'C', 2, 0, 0},   // and back up
  };
  LossScaler s(small_config());
  REQUIRE(s.scale() == 8);
  REQUIRE(s.clean_steps() == 0);
  int64_t step = 0, skipped = 0;
  for (const Expect& e : script) {
    s.update(e.event == 'O', step);
    skipped += e.event == 'O';
    INFO("step " << step << " (" << e.event << ")");
    REQUIRE(s.scale() == e.scale);
    REQUIRE(s.clean_steps() == e.clean);
    REQUIRE(s.consecutive_skips() == e.skips);
    REQUIRE(s.skipped_total() == skipped);
    step++;
  }
  REQUIRE(skipped == 6);
}

TEST_CASE("loss scaler: with the defaults the scale doubles at the 2000th clean step, not before") {
  LossScaler s;
  REQUIRE(s.scale() == 65536);
  for (int i = 1; i <= 1999; i++) s.update(false, i);
  REQUIRE(s.scale() == 65536);
  REQUIRE(s.clean_steps() == 1999);
  s.update(false, 2000);
  REQUIRE(s.scale() == 131072);
  REQUIRE(s.clean_steps() == 0);
  // an overflow halves it and restarts the count: 2000 more clean steps for the next growth
  s.update(true, 2001);
  REQUIRE(s.scale() == 65536);
  for (int i = 1; i <= 1999; i++) s.update(false, 2001 + i);
  REQUIRE(s.scale() == 65536);
  s.update(false, 4001);
  REQUIRE(s.scale() == 131072);
}

TEST_CASE("loss scaler: N consecutive overflows abort, naming the step and the scale") {
  LossScalerConfig c;
  c.init = 4;
  c.max_consecutive_skips = 3;
  LossScaler s(c);
  // a clean step in between resets the run of skips
  s.update(true, 100);
  s.update(true, 101);
  s.update(false, 102);
  s.update(true, 103);
  s.update(true, 104);
  REQUIRE(s.consecutive_skips() == 2);
  REQUIRE(s.scale() == 1);
  REQUIRE_ERROR(s.update(true, 1234), "step 1234: 3 consecutive steps overflowed");
  REQUIRE(s.consecutive_skips() == 3);
  REQUIRE(s.skipped_total() == 5);
  LossScaler t(c);
  t.update(true, 7);
  t.update(true, 8);
  REQUIRE_ERROR(t.update(true, 9), "(loss scale now 1)");
}

TEST_CASE("loss scaler: a fixed scale never moves, but overflows still skip and abort") {
  LossScalerConfig c;
  c.dynamic = false;
  c.init = 1;  // fp32 training
  c.max_consecutive_skips = 2;
  LossScaler s(c);
  for (int i = 0; i < 5000; i++) s.update(false, i);
  REQUIRE(s.scale() == 1);
  REQUIRE(s.clean_steps() == 0);
  s.update(true, 5000);
  REQUIRE(s.scale() == 1);
  REQUIRE(s.skipped_total() == 1);
  REQUIRE_USER_ERROR(s.update(true, 5001, "conv1.w"),
                     "step 5001: inf/NaN gradient, first in conv1.w (2 steps in a row). There is no "
                     "loss scale to lower in fp32");
}

TEST_CASE("loss scaler: a restored state continues exactly as the original") {
  const std::vector<bool> overflow = {false, false, true, false, false, false, false, true,
                                      false, false, false, false, false, false, false};
  LossScaler a(small_config());
  for (size_t i = 0; i < 6; i++) a.update(overflow[i], int64_t(i));
  const LossScalerState saved = a.state();
  LossScaler b(small_config());
  b.restore(saved);
  REQUIRE(b.scale() == a.scale());
  REQUIRE(b.clean_steps() == a.clean_steps());
  REQUIRE(b.skipped_total() == a.skipped_total());
  for (size_t i = 6; i < overflow.size(); i++) {
    a.update(overflow[i], int64_t(i));
    b.update(overflow[i], int64_t(i));
    REQUIRE(b.scale() == a.scale());
    REQUIRE(b.clean_steps() == a.clean_steps());
    REQUIRE(b.consecutive_skips() == a.consecutive_skips());
  }
  LossScalerState bad = saved;
  bad.scale = 64;
  REQUIRE_ERROR(b.restore(bad), "saved scale 64 is outside [min_scale, max_scale]");
  bad = saved;
  bad.clean_steps = 3;
  REQUIRE_ERROR(b.restore(bad), "must be below growth_interval 3");
  // A state the run would have stopped at (saved by a GPU checkpoint of steps not yet seen).
  bad = saved;
  bad.consecutive_skips = small_config().max_consecutive_skips;
  REQUIRE_USER_ERROR(b.restore(bad), "overflows in a row, and this run stops at");
  // A fixed scale (fp32) stops at the first overflow: skips an older checkpoint counted are
  // dropped, not refused.
  LossScalerConfig fixed;
  fixed.dynamic = false, fixed.init = 1, fixed.max_consecutive_skips = 1;
  LossScaler f(fixed);
  LossScalerState old_fp32;
  old_fp32.scale = 1, old_fp32.consecutive_skips = 4, old_fp32.skipped_total = 9;
  f.restore(old_fp32);
  REQUIRE(f.consecutive_skips() == 0);
  REQUIRE(f.skipped_total() == 9);
}

TEST_CASE("loss scaler: bad configs are refused, naming the field") {
  auto with = [](auto edit) {
    LossScalerConfig c;
    edit(c);
    return c;
  };
  REQUIRE_ERROR(LossScaler(with([](LossScalerConfig& c) { c.init = 0; })), "init must be positive");
  REQUIRE_ERROR(LossScaler(with([](LossScalerConfig& c) { c.init = 1e9; })),
                "init (1e+09) must be within [min_scale, max_scale]");
  REQUIRE_ERROR(LossScaler(with([](LossScalerConfig& c) { c.min_scale = 0; })),
                "min_scale must be positive");
  REQUIRE_ERROR(LossScaler(with([](LossScalerConfig& c) { c.max_scale = 0.5; })),
                "max_scale (0.5) must be >= min_scale (1)");
  REQUIRE_ERROR(LossScaler(with([](LossScalerConfig& c) { c.growth = 0.5; })),
                "growth must be >= 1");
  REQUIRE_ERROR(LossScaler(with([](LossScalerConfig& c) { c.backoff = 2; })),
                "backoff must be in (0, 1]");
  REQUIRE_ERROR(LossScaler(with([](LossScalerConfig& c) { c.growth_interval = 0; })),
                "growth_interval must be >= 1");
  REQUIRE_ERROR(LossScaler(with([](LossScalerConfig& c) { c.max_consecutive_skips = 0; })),
                "max_consecutive_skips must be >= 1");
}
