// The dynamic loss scale as training runs it: the step state moves it (DeviceStep::finish
// applies loss_scaler_next; a CPU one here, the very calls a GPU queues) and
// loss_scaler_check aborts. The exact state machine on a scripted run, the growth step with the
// defaults, the abort that names the step, a fixed scale, a restored state
// (loss_scaler_restored) and bad configs.
#include <string>
#include <vector>

#include "nn/device_step.h"
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

// One step attempt, as the trainer makes it: the overflow (or not) into the flags, decide,
// finish (the scaler's transition), then the abort check. The scaler's state after it.
LossScalerState attempt(DeviceStep& ds, bool overflow, int64_t step,
                        const std::string& first_bad = "") {
  ds.begin();
  if (overflow) *ds.flag(0) = 1;
  ds.decide();
  ds.finish();
  const LossScalerState s = ds.read().scaler;
  loss_scaler_check(ds.config(), s, step, first_bad);
  return s;
}

// A run's start: the config's initial scale, nothing counted.
void start(DeviceStep& ds) { ds.reset(loss_scaler_start(ds.config()), 0); }
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
  DeviceStep ds(small_config(), 1, Context::cpu());
  start(ds);
  REQUIRE(ds.read().scaler.scale == 8);
  REQUIRE(ds.read().scaler.clean_steps == 0);
  int64_t step = 0, skipped = 0;
  for (const Expect& e : script) {
    const LossScalerState s = attempt(ds, e.event == 'O', step);
    skipped += e.event == 'O';
    INFO("step " << step << " (" << e.event << ")");
    REQUIRE(s.scale == e.scale);
    REQUIRE(s.clean_steps == e.clean);
    REQUIRE(s.consecutive_skips == e.skips);
    REQUIRE(s.skipped_total == skipped);
    // what the next step uses: backward's seed (share 1) and the optimizer's unscale
    REQUIRE(ds.seed(1.0, DType::f32).item() == e.scale);
    REQUIRE(ds.read().inv_scale == float(1.0 / e.scale));
    step++;
  }
  REQUIRE(skipped == 6);
  REQUIRE(ds.read().steps_taken == int64_t(script.size()) - 6);
}

TEST_CASE("loss scaler: with the defaults the scale doubles at the 2000th clean step, not before") {
  DeviceStep ds(LossScalerConfig{}, 1, Context::cpu());
  start(ds);
  REQUIRE(ds.read().scaler.scale == 65536);
  for (int i = 1; i <= 1999; i++) attempt(ds, false, i);
  REQUIRE(ds.read().scaler.scale == 65536);
  REQUIRE(ds.read().scaler.clean_steps == 1999);
  REQUIRE(attempt(ds, false, 2000).scale == 131072);
  REQUIRE(ds.read().scaler.clean_steps == 0);
  // an overflow halves it and restarts the count: 2000 more clean steps for the next growth
  REQUIRE(attempt(ds, true, 2001).scale == 65536);
  for (int i = 1; i <= 1999; i++) attempt(ds, false, 2001 + i);
  REQUIRE(ds.read().scaler.scale == 65536);
  REQUIRE(attempt(ds, false, 4001).scale == 131072);
}

TEST_CASE("loss scaler: N consecutive overflows abort, naming the step and the scale") {
  LossScalerConfig c;
  c.init = 4;
  c.max_consecutive_skips = 3;
  DeviceStep ds(c, 1, Context::cpu());
  start(ds);
  // a clean step in between resets the run of skips
  attempt(ds, true, 100);
  attempt(ds, true, 101);
  attempt(ds, false, 102);
  attempt(ds, true, 103);
  const LossScalerState s = attempt(ds, true, 104);
  REQUIRE(s.consecutive_skips == 2);
  REQUIRE(s.scale == 1);
  REQUIRE_USER_ERROR(attempt(ds, true, 1234), "step 1234: 3 consecutive steps overflowed");
  // the step state moved before the check threw
  REQUIRE(ds.read().scaler.consecutive_skips == 3);
  REQUIRE(ds.read().scaler.skipped_total == 5);
  REQUIRE(ds.read().peak_skips == 3);
  DeviceStep t(c, 1, Context::cpu());
  start(t);
  attempt(t, true, 7);
  attempt(t, true, 8);
  REQUIRE_USER_ERROR(attempt(t, true, 9, "conv1.w"),
                     "(inf/NaN gradients, first in conv1.w) and were skipped (loss scale now 1)");
  // the check alone: below the limit it passes, at it it throws
  LossScalerState after;
  after.scale = 1, after.consecutive_skips = 2;
  loss_scaler_check(c, after, 10);
  after.consecutive_skips = 3;
  REQUIRE_USER_ERROR(loss_scaler_check(c, after, 11), "step 11: 3 consecutive steps overflowed");
}

TEST_CASE("loss scaler: a fixed scale never moves, but overflows still skip and abort") {
  LossScalerConfig c;
  c.dynamic = false;
  c.init = 1;  // fp32 training
  c.max_consecutive_skips = 2;
  DeviceStep ds(c, 1, Context::cpu());
  start(ds);
  for (int i = 0; i < 5000; i++) attempt(ds, false, i);
  REQUIRE(ds.read().scaler.scale == 1);
  REQUIRE(ds.read().scaler.clean_steps == 0);
  const LossScalerState s = attempt(ds, true, 5000);
  REQUIRE(s.scale == 1);
  REQUIRE(s.skipped_total == 1);
  REQUIRE_USER_ERROR(attempt(ds, true, 5001, "conv1.w"),
                     "step 5001: inf/NaN gradient, first in conv1.w (2 steps in a row). There is no "
                     "loss scale to lower in fp32");
}

TEST_CASE("loss scaler: a restored state continues exactly as the original") {
  const LossScalerConfig c = small_config();
  const std::vector<bool> overflow = {false, false, true, false, false, false, false, true,
                                      false, false, false, false, false, false, false};
  DeviceStep a(c, 1, Context::cpu());
  start(a);
  for (size_t i = 0; i < 6; i++) attempt(a, overflow[i], int64_t(i));
  // a checkpoint keeps the scaler's state and the step count
  const LossScalerState saved = a.read().scaler;
  DeviceStep b(c, 1, Context::cpu());
  b.reset(loss_scaler_restored(c, saved), a.read().steps_taken);
  REQUIRE(b.read().scaler.scale == a.read().scaler.scale);
  REQUIRE(b.read().scaler.clean_steps == a.read().scaler.clean_steps);
  REQUIRE(b.read().scaler.skipped_total == a.read().scaler.skipped_total);
  for (size_t i = 6; i < overflow.size(); i++) {
    const LossScalerState sa = attempt(a, overflow[i], int64_t(i));
    const LossScalerState sb = attempt(b, overflow[i], int64_t(i));
    REQUIRE(sb.scale == sa.scale);
    REQUIRE(sb.clean_steps == sa.clean_steps);
    REQUIRE(sb.consecutive_skips == sa.consecutive_skips);
    REQUIRE(sb.skipped_total == sa.skipped_total);
    REQUIRE(b.read().steps_taken == a.read().steps_taken);
  }
  LossScalerState bad = saved;
  bad.scale = 64;
  REQUIRE_ERROR(loss_scaler_restored(c, bad), "saved scale 64 is outside [min_scale, max_scale]");
  bad = saved;
  bad.clean_steps = 3;
  REQUIRE_ERROR(loss_scaler_restored(c, bad), "must be below growth_interval 3");
  bad = saved;
  bad.skipped_total = -1;
  REQUIRE_ERROR(loss_scaler_restored(c, bad), "saved counters must be >= 0");
  // A state the run would have stopped at (saved by a GPU checkpoint of steps not yet seen).
  bad = saved;
  bad.consecutive_skips = c.max_consecutive_skips;
  REQUIRE_USER_ERROR(loss_scaler_restored(c, bad), "overflows in a row, and this run stops at");
  // One below it restores, and the skips it carries count towards the abort.
  LossScalerState close = saved;
  close.consecutive_skips = c.max_consecutive_skips - 1;
  b.reset(loss_scaler_restored(c, close), 0);
  REQUIRE_USER_ERROR(attempt(b, true, 20), "step 20: 10 consecutive steps overflowed");
  // A fixed scale (fp32) stops at the first overflow: skips an older checkpoint counted are
  // dropped, not refused.
  LossScalerConfig fixed;
  fixed.dynamic = false, fixed.init = 1, fixed.max_consecutive_skips = 1;
  LossScalerState old_fp32;
  old_fp32.scale = 1, old_fp32.consecutive_skips = 4, old_fp32.skipped_total = 9;
  const LossScalerState f = loss_scaler_restored(fixed, old_fp32);
  REQUIRE(f.consecutive_skips == 0);
  REQUIRE(f.skipped_total == 9);
}

TEST_CASE("loss scaler: bad configs are refused, naming the field") {
  // by the check itself, and by the two ways a run gets its scaler's state
  auto refused = [](void (*edit)(LossScalerConfig&), const char* message) {
    INFO(message);
    LossScalerConfig c;
    edit(c);
    REQUIRE_ERROR(validate_loss_scaler_config(c), message);
    REQUIRE_ERROR(loss_scaler_start(c), message);
    REQUIRE_ERROR(loss_scaler_restored(c, LossScalerState{}), message);
  };
  refused([](LossScalerConfig& c) { c.init = 0; }, "init must be positive");
  refused([](LossScalerConfig& c) { c.init = 1e9; },
          "init (1e+09) must be within [min_scale, max_scale]");
  refused([](LossScalerConfig& c) { c.min_scale = 0; }, "min_scale must be positive");
  refused([](LossScalerConfig& c) { c.max_scale = 0.5; }, "max_scale (0.5) must be >= min_scale (1)");
  refused([](LossScalerConfig& c) { c.growth = 0.5; }, "growth must be >= 1");
  refused([](LossScalerConfig& c) { c.backoff = 2; }, "backoff must be in (0, 1]");
  refused([](LossScalerConfig& c) { c.growth_interval = 0; }, "growth_interval must be >= 1");
  refused([](LossScalerConfig& c) { c.max_consecutive_skips = 0; },
          "max_consecutive_skips must be >= 1");
  // a fixed scale uses neither the growth nor the bounds
  LossScalerConfig fixed;
  fixed.dynamic = false, fixed.init = 1, fixed.min_scale = 0, fixed.growth = 0;
  REQUIRE(loss_scaler_start(fixed).scale == 1);
}
