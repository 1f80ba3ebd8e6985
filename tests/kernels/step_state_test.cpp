// The step state of GPU training on the CPU (kernels/step_state.h): step_finish walks the very
// states LossScaler (nn/loss_scaler.h) walks, on a scripted run hitting both bounds, on a long
// random run, with the defaults (growth at the 2000th clean step) and with a fixed scale;
// steps_taken, t and inv_scale follow; step_decide names the first flagged parameter;
// loss_seed and scalar_accumulate round once; DeviceStep refuses clearly without a GPU.
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/rng.h"
#include "kernels/step_state.h"
#include "nn/device_step.h"
#include "nn/loss_scaler.h"
#include "tests/test_util.h"

using namespace cutrain;

namespace {
// init 8, x2 after 3 clean steps, x0.5 on overflow, within [1, 32] (as loss_scaler_test).
LossScalerConfig small_config() {
  LossScalerConfig c;
  c.init = 8, c.growth = 2, c.backoff = 0.5, c.min_scale = 1, c.max_scale = 32;
  c.growth_interval = 3;
  c.max_consecutive_skips = 1000;  // the abort is LossScaler's, not the step state's
  return c;
}

// The scaler part of s equals the LossScaler's state, and the bookkeeping follows from it.
void require_matches(const StepState& s, const LossScaler& ref, int64_t steps_taken) {
  REQUIRE(s.scaler.scale == ref.scale());
  REQUIRE(s.scaler.clean_steps == ref.clean_steps());
  REQUIRE(s.scaler.consecutive_skips == ref.consecutive_skips());
  REQUIRE(s.scaler.skipped_total == ref.skipped_total());
  REQUIRE(s.steps_taken == steps_taken);
  REQUIRE(s.t == steps_taken + 1);
  REQUIRE(s.inv_scale == float(1.0 / ref.scale()));
}

// One step of the device's sequence on the CPU: decide over `flags`, then finish.
void run_step(const LossScalerConfig& c, const std::vector<int32_t>& flags, StepState* s) {
  step_decide_cpu(int(flags.size()), flags.data(), s);
  step_finish_cpu(c, s);
}
}  // namespace

TEST_CASE("step state: step_state_make sets t, inv_scale and nothing decided") {
  LossScalerState sc;
  sc.scale = 65536;
  sc.clean_steps = 17;
  sc.consecutive_skips = 2;
  sc.skipped_total = 9;
  const StepState s = step_state_make(sc, 41);
  REQUIRE(s.scaler.scale == 65536);
  REQUIRE(s.scaler.clean_steps == 17);
  REQUIRE(s.scaler.consecutive_skips == 2);
  REQUIRE(s.scaler.skipped_total == 9);
  REQUIRE(s.scale_used == 65536);
  REQUIRE(s.steps_taken == 41);
  REQUIRE(s.t == 42);
  REQUIRE(s.inv_scale == std::ldexp(1.0f, -16));  // exact: a power of two
  REQUIRE(s.skip == 0);
  REQUIRE(s.first_bad == -1);
  REQUIRE(s.peak_skips == 2);  // the restored run of skips counts
  REQUIRE(s.lr == 0);  // set before each step: step_set_lr
  StepState x = s;
  step_set_lr_cpu(&x, 0.125);
  REQUIRE(x.lr == 0.125);
  // a scale that is no power of two: 1/scale rounded to double, then once to float
  sc.scale = 3;
  REQUIRE(step_state_make(sc, 0).inv_scale == float(1.0 / 3));
  REQUIRE(step_state_make(sc, 0).t == 1);
}

TEST_CASE("step state: step_decide picks the first flagged parameter, -1 when none") {
  StepState s = step_state_make(LossScalerState{}, 6);
  s.scaler.scale = 512;
  s.t = 99;  // stale: decide sets it from steps_taken
  std::vector<int32_t> flags(7, 0);
  step_decide_cpu(7, flags.data(), &s);
  REQUIRE(s.skip == 0);
  REQUIRE(s.first_bad == -1);
  REQUIRE(s.t == 7);
  REQUIRE(s.scale_used == 512);
  flags[4] = 1;
  flags[6] = 1;
  step_decide_cpu(7, flags.data(), &s);
  REQUIRE(s.skip == 1);
  REQUIRE(s.first_bad == 4);
  flags[0] = 5;  // any nonzero value is a flag
  step_decide_cpu(7, flags.data(), &s);
  REQUIRE(s.first_bad == 0);
  flags.assign(7, 0);
  flags[6] = -1;  // the last one counts too
  step_decide_cpu(7, flags.data(), &s);
  REQUIRE(s.skip == 1);
  REQUIRE(s.first_bad == 6);
  // only the first P flags are read
  step_decide_cpu(6, flags.data(), &s);
  REQUIRE(s.skip == 0);
  REQUIRE(s.first_bad == -1);
  step_decide_cpu(0, flags.data(), &s);
  REQUIRE(s.skip == 0);
  // deciding changes neither the scaler nor the step count
  REQUIRE(s.scaler.scale == 512);
  REQUIRE(s.steps_taken == 6);
}

TEST_CASE("step state: step_finish walks LossScaler's states on a script hitting both bounds") {
  const LossScalerConfig c = small_config();
  // 'C' clean, 'O' overflow: the script of loss_scaler_test (growth, max, backoff, min).
  const char* script = "CCCCCCCCCOCCOOOOOCCC";
  LossScaler ref(c);
  StepState s = step_state_make(ref.state(), 0);
  int64_t taken = 0;
  std::vector<int32_t> flags(3, 0);
  for (int i = 0; script[i]; i++) {
    INFO("step " << i << " (" << script[i] << ")");
    const bool overflow = script[i] == 'O';
    flags[1] = overflow;
    const double before = ref.scale();
    run_step(c, flags, &s);
    ref.update(overflow, i);
    taken += !overflow;
    REQUIRE(s.skip == int32_t(overflow));
    REQUIRE(s.first_bad == (overflow ? 1 : -1));
    REQUIRE(s.scale_used == before);
    require_matches(s, ref, taken);
  }
  REQUIRE(s.scaler.skipped_total == 6);
  REQUIRE(s.scaler.scale == 2);
  REQUIRE(s.scaler.consecutive_skips == 0);  // three clean steps since the five overflows
  REQUIRE(s.peak_skips == 5);                // which are not forgotten
}

TEST_CASE("step state: step_finish equals LossScaler over a long random run") {
  // odd bounds and factors too: the clamps hit values that are no power of two
  LossScalerConfig odd = small_config();
  odd.init = 24, odd.growth = 3, odd.backoff = 0.25, odd.min_scale = 0.75, odd.max_scale = 500;
  odd.growth_interval = 2;
  for (const LossScalerConfig& c : {small_config(), odd}) {
    LossScaler ref(c);
    StepState s = step_state_make(ref.state(), 0);
    int64_t taken = 0;
    std::vector<int32_t> flags(5, 0);
    for (uint64_t i = 0; i < 3000; i++) {
      INFO("step " << i);
      // runs of overflows are likelier than independent draws would make them
      const bool overflow = rng_uniform(7, i) < (s.scaler.consecutive_skips > 0 ? 0.6f : 0.2f);
      flags.assign(5, 0);
      const int bad = int(rng_uniform(8, i) * 5);
      if (overflow) flags[size_t(bad)] = 1;
      const double before = ref.scale();
      run_step(c, flags, &s);
      ref.update(overflow, int64_t(i));
      taken += !overflow;
      REQUIRE(s.first_bad == (overflow ? bad : -1));
      REQUIRE(s.scale_used == before);
      require_matches(s, ref, taken);
      REQUIRE(s.scaler.scale >= c.min_scale);
      REQUIRE(s.scaler.scale <= c.max_scale);
    }
  }
}

TEST_CASE("step state: with the defaults the scale doubles at the 2000th clean step, not before") {
  const LossScalerConfig c;
  StepState s = step_state_make(LossScaler(c).state(), 0);
  REQUIRE(s.scaler.scale == 65536);
  const int32_t clean = 0, bad = 1;
  for (int i = 1; i <= 1999; i++) run_step(c, {clean}, &s);
  REQUIRE(s.scaler.scale == 65536);
  REQUIRE(s.scaler.clean_steps == 1999);
  REQUIRE(s.inv_scale == std::ldexp(1.0f, -16));
  run_step(c, {clean}, &s);
  REQUIRE(s.scaler.scale == 131072);
  REQUIRE(s.scaler.clean_steps == 0);
  REQUIRE(s.inv_scale == std::ldexp(1.0f, -17));
  REQUIRE(s.steps_taken == 2000);
  REQUIRE(s.t == 2001);
  // an overflow halves it, restarts the count, and is not a step taken
  run_step(c, {bad}, &s);
  REQUIRE(s.scaler.scale == 65536);
  REQUIRE(s.scaler.clean_steps == 0);
  REQUIRE(s.scaler.consecutive_skips == 1);
  REQUIRE(s.scaler.skipped_total == 1);
  REQUIRE(s.steps_taken == 2000);
  REQUIRE(s.t == 2001);
  for (int i = 1; i <= 1999; i++) run_step(c, {clean}, &s);
  REQUIRE(s.scaler.scale == 65536);
  run_step(c, {clean}, &s);
  REQUIRE(s.scaler.scale == 131072);
  REQUIRE(s.scaler.consecutive_skips == 0);
  REQUIRE(s.steps_taken == 4000);
}

TEST_CASE("step state: the scale stays within [min_scale, max_scale]") {
  LossScalerConfig c = small_config();
  c.init = 1;
  StepState s = step_state_make(LossScaler(c).state(), 0);
  for (int i = 0; i < 4; i++) run_step(c, {1}, &s);  // at the min already: held there
  REQUIRE(s.scaler.scale == 1);
  REQUIRE(s.inv_scale == 1.0f);
  REQUIRE(s.scaler.consecutive_skips == 4);
  for (int i = 0; i < 30; i++) run_step(c, {0}, &s);  // 10 growths: clamped to 32
  REQUIRE(s.scaler.scale == 32);
  REQUIRE(s.inv_scale == 1.0f / 32);
  REQUIRE(s.scaler.consecutive_skips == 0);
  REQUIRE(s.steps_taken == 30);
}

TEST_CASE("step state: dynamic = false keeps the scale; overflows still skip and count") {
  LossScalerConfig c;
  c.dynamic = false;
  c.init = 1;
  c.growth_interval = 2;
  LossScaler ref(c);
  StepState s = step_state_make(ref.state(), 10);
  const char* script = "CCCCOCOOCCC";
  int64_t taken = 10;
  for (int i = 0; script[i]; i++) {
    INFO("step " << i);
    const bool overflow = script[i] == 'O';
    run_step(c, {int32_t(overflow)}, &s);
    ref.update(overflow, i);
    taken += !overflow;
    require_matches(s, ref, taken);
    REQUIRE(s.scaler.scale == 1);
    REQUIRE(s.scaler.clean_steps == 0);  // clean steps are not counted
  }
  REQUIRE(s.scaler.skipped_total == 3);
  REQUIRE(s.steps_taken == 18);
}

TEST_CASE("step state: loss_seed and scalar_accumulate round once, from double") {
  StepState s = step_state_make(LossScalerState{}, 0);  // scale 65536
  float seed = 0;
  loss_seed_cpu(&s, 0.25, &seed);
  REQUIRE(seed == 16384.0f);
  loss_seed_cpu(&s, 0.1, &seed);
  REQUIRE(seed == float(6553.6));  // the double product, rounded once
  REQUIRE(seed == 6553.60009765625f);
  s.scaler.scale = 3;
  loss_seed_cpu(&s, 1.0 / 3, &seed);
  REQUIRE(seed == float(3 * (1.0 / 3)));
  REQUIRE(seed == 1.0f);

  float acc = 1.5f;
  const float x = 2.0f;
  scalar_accumulate_cpu(&x, 0.25, &acc);
  REQUIRE(acc == 2.0f);
  // three micro-batches of a third each, summed in double and rounded to float each time
  const float xs[3] = {0.1f, 0.7f, 1.3f};
  acc = 0;
  double want = 0;
  for (const float& xi : xs) {
    scalar_accumulate_cpu(&xi, 1.0 / 3, &acc);
    want = double(float(want + double(xi) * (1.0 / 3)));
    REQUIRE(acc == float(want));
  }
  // one rounding, not two: 1 + 2^-24 (a float tie) in double, then to float: 1 (to even)
  acc = 1.0f;
  const float tiny = std::ldexp(1.0f, -24);
  scalar_accumulate_cpu(&tiny, 1.0, &acc);
  REQUIRE(acc == 1.0f);
  const float tiny3 = 3 * std::ldexp(1.0f, -25);  // 1 + 1.5 * 2^-24: rounds up
  acc = 1.0f;
  scalar_accumulate_cpu(&tiny3, 1.0, &acc);
  REQUIRE(acc == 1.0f + std::ldexp(1.0f, -23));
}

TEST_CASE("step state: DeviceStep refuses bad sizes, and needs a GPU") {
  REQUIRE_ERROR(DeviceStep(LossScalerConfig{}, 0), "DeviceStep: 0 parameters");
  if (!gpu_usable()) {
    REQUIRE_ERROR(DeviceStep(LossScalerConfig{}, 3), "DeviceStep: ");
  } else {
    DeviceStep ds(LossScalerConfig{}, 3);
    REQUIRE(ds.params() == 3);
    REQUIRE_ERROR(ds.flag(3), "DeviceStep: flag 3 of 3");
    REQUIRE_ERROR(ds.flag(-1), "DeviceStep: flag -1 of 3");
  }
}
