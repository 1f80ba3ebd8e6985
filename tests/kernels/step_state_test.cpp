// The step state (kernels/step_state.h) on the CPU: step_finish walks the loss scaler's
// states (loss_scaler_next from loss_scaler_start, nn/loss_scaler.h) on a scripted run hitting
// both bounds, on a long random run, with the defaults (growth at the 2000th clean step) and
// with a fixed scale; steps_taken, t and inv_scale follow; step_decide names the first flagged
// parameter; loss_seed and scalar_accumulate round once. A CPU DeviceStep (nn/device_step.h)
// is these functions on host memory, state for state; a cuda one needs a GPU.
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/rng.h"
#include "kernels/step_state.h"
#include "nn/device_step.h"
#include "nn/loss_scaler.h"
#include "tests/kernels/step_state_compare.h"
#include "tests/test_util.h"

using namespace cutrain;
using cutrain_test::require_same_state;
using cutrain_test::test_gpu;

namespace {
// init 8, x2 after 3 clean steps, x0.5 on overflow, within [1, 32] (as loss_scaler_test).
LossScalerConfig small_config() {
  LossScalerConfig c;
  c.init = 8, c.growth = 2, c.backoff = 0.5, c.min_scale = 1, c.max_scale = 32;
  c.growth_interval = 3;
  c.max_consecutive_skips = 1000;  // the abort is loss_scaler_check's, not the step state's
  return c;
}

// The scaler part of s equals the reference scaler state, and the bookkeeping follows from it.
void require_matches(const StepState& s, const LossScalerState& ref, int64_t steps_taken) {
  REQUIRE(s.scaler.scale == ref.scale);
  REQUIRE(s.scaler.clean_steps == ref.clean_steps);
  REQUIRE(s.scaler.consecutive_skips == ref.consecutive_skips);
  REQUIRE(s.scaler.skipped_total == ref.skipped_total);
  REQUIRE(s.steps_taken == steps_taken);
  REQUIRE(s.t == steps_taken + 1);
  REQUIRE(s.inv_scale == float(1.0 / ref.scale));
}


// One step of the device's sequence on the CPU: decide over `flags`, then finish.
void run_step(const LossScalerConfig& c, const std::vector<int32_t>& flags, StepState* s) {
  step_decide_cpu(int(flags.size()), flags.data(), s);
  step_finish_cpu(c, s);
}

// The same step through a CPU DeviceStep: set_lr, begin, the flags, decide, finish.
void run_step(DeviceStep& ds, const std::vector<int32_t>& flags, double lr) {
  ds.set_lr(lr);
  ds.begin();
  for (size_t i = 0; i < flags.size(); i++)
    if (flags[i]) *ds.flag(int(i)) = flags[i];
  ds.decide();
  ds.finish();
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

TEST_CASE("step state: step_finish and a CPU DeviceStep walk the loss scaler's states on a "
          "script hitting both bounds") {
  const LossScalerConfig c = small_config();
  // 'C' clean, 'O' overflow: the script of loss_scaler_test (growth, max, backoff, min).
  const char* script = "CCCCCCCCCOCCOOOOOCCC";
  LossScalerState ref = loss_scaler_start(c);
  StepState s = step_state_make(ref, 0);
  DeviceStep ds(c, 3, Context::cpu());
  ds.reset(ref, 0);
  int64_t taken = 0;
  std::vector<int32_t> flags(3, 0);
  for (int i = 0; script[i]; i++) {
    INFO("step " << i << " (" << script[i] << ")");
    const bool overflow = script[i] == 'O';
    flags[1] = overflow;
    const double before = ref.scale;
    run_step(c, flags, &s);
    run_step(ds, flags, 0);
    ref = loss_scaler_next(c, ref, overflow);
    taken += !overflow;
    REQUIRE(s.skip == int32_t(overflow));
    REQUIRE(s.first_bad == (overflow ? 1 : -1));
    REQUIRE(s.scale_used == before);
    require_matches(s, ref, taken);
    require_same_state(ds.read(), s);
  }
  REQUIRE(s.scaler.skipped_total == 6);
  REQUIRE(s.scaler.scale == 2);
  REQUIRE(s.scaler.consecutive_skips == 0);  // three clean steps since the five overflows
  REQUIRE(s.peak_skips == 5);                // which are not forgotten
}

TEST_CASE("step state: step_finish and a CPU DeviceStep equal the loss scaler over a long random "
          "run") {
  // odd bounds and factors too: the clamps hit values that are no power of two
  LossScalerConfig odd = small_config();
  odd.init = 24, odd.growth = 3, odd.backoff = 0.25, odd.min_scale = 0.75, odd.max_scale = 500;
  odd.growth_interval = 2;
  for (const LossScalerConfig& c : {small_config(), odd}) {
    LossScalerState ref = loss_scaler_start(c);
    StepState s = step_state_make(ref, 0);
    DeviceStep ds(c, 5, Context::cpu());
    ds.reset(ref, 0);
    int64_t taken = 0;
    std::vector<int32_t> flags(5, 0);
    for (uint64_t i = 0; i < 3000; i++) {
      INFO("step " << i);
      // runs of overflows are likelier than independent draws would make them
      const bool overflow = rng_uniform(7, i) < (s.scaler.consecutive_skips > 0 ? 0.6f : 0.2f);
      flags.assign(5, 0);
      const int bad = int(rng_uniform(8, i) * 5);
      if (overflow) flags[size_t(bad)] = 1;
      const double before = ref.scale;
      const double lr = 0.1 * rng_uniform(9, i);
      step_set_lr_cpu(&s, lr);
      run_step(c, flags, &s);
      run_step(ds, flags, lr);
      ref = loss_scaler_next(c, ref, overflow);
      taken += !overflow;
      REQUIRE(s.first_bad == (overflow ? bad : -1));
      REQUIRE(s.scale_used == before);
      require_matches(s, ref, taken);
      require_same_state(ds.read(), s);
      REQUIRE(s.scaler.scale >= c.min_scale);
      REQUIRE(s.scaler.scale <= c.max_scale);
    }
  }
}

TEST_CASE("step state: with the defaults the scale doubles at the 2000th clean step, not before") {
  const LossScalerConfig c;
  StepState s = step_state_make(loss_scaler_start(c), 0);
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
  StepState s = step_state_make(loss_scaler_start(c), 0);
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
  LossScalerState ref = loss_scaler_start(c);
  StepState s = step_state_make(ref, 10);
  const char* script = "CCCCOCOOCCC";
  int64_t taken = 10;
  for (int i = 0; script[i]; i++) {
    INFO("step " << i);
    const bool overflow = script[i] == 'O';
    run_step(c, {int32_t(overflow)}, &s);
    ref = loss_scaler_next(c, ref, overflow);
    taken += !overflow;
    require_matches(s, ref, taken);
    REQUIRE(s.scaler.scale == 1);
    REQUIRE(s.scaler.clean_steps == 0);  // clean steps are not counted
  }
  REQUIRE(s.scaler.skipped_total == 3);
  REQUIRE(s.steps_taken == 18);
}

TEST_CASE("step state: loss_seed rounds once, from double; scalar_accumulate sums in double") {
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

  double acc = 1.5;
  const float x = 2.0f;
  scalar_accumulate_cpu(&x, 0.25, &acc);
  REQUIRE(acc == 2.0);
  // three micro-batches of a third each, summed in double, never rounded to float
  const float xs[3] = {0.1f, 0.7f, 1.3f};
  acc = 0;
  double want = 0;
  for (const float& xi : xs) {
    scalar_accumulate_cpu(&xi, 1.0 / 3, &acc);
    want = want + double(xi) * (1.0 / 3);
    REQUIRE(acc == want);
  }
  REQUIRE(acc != double(float(acc)));  // the double sum keeps bits a float would drop
  // a double-precision run's loss (f64) adds in as it is
  const double xd = 1.0 + std::ldexp(1.0, -40);
  acc = 0;
  scalar_accumulate_cpu(&xd, 1.0, &acc);
  REQUIRE(acc == xd);
}

TEST_CASE("step state: a CPU DeviceStep runs these functions on its state, at once") {
  REQUIRE_ERROR(DeviceStep(LossScalerConfig{}, 0, Context::cpu()), "DeviceStep: 0 parameters");
  const LossScalerConfig c = small_config();
  DeviceStep ds(c, 3, Context::cpu());
  REQUIRE(ds.params() == 3);
  REQUIRE(ds.device() == Device::cpu);
  REQUIRE(ds.config().growth_interval == 3);
  REQUIRE(ds.flag(0) == ds.flags());  // contiguous, one per parameter
  REQUIRE(ds.flag(2) == ds.flags() + 2);
  REQUIRE_ERROR(ds.flag(3), "DeviceStep: flag 3 of 3");
  REQUIRE_ERROR(ds.flag(-1), "DeviceStep: flag -1 of 3");

  // reset: step_state_make's state, every flag down
  LossScalerState sc;
  sc.scale = 16, sc.clean_steps = 2, sc.consecutive_skips = 1, sc.skipped_total = 4;
  *ds.flag(1) = 1;
  ds.reset(sc, 41);
  require_same_state(ds.read(), step_state_make(sc, 41));
  REQUIRE(ds.flags()[1] == 0);
  REQUIRE(*ds.inv_scale() == 1.0f / 16);  // the accessors point into the state
  REQUIRE(*ds.t() == 42);

  // set_lr: into the state; a negative or non-finite rate refused, the state's kept
  ds.set_lr(0.125);
  REQUIRE(ds.read().lr == 0.125);
  REQUIRE(*ds.lr() == 0.125);
  REQUIRE_ERROR(ds.set_lr(-1), "the learning rate must be >= 0, got -1");
  REQUIRE_ERROR(ds.set_lr(INFINITY), "the learning rate must be >= 0");
  REQUIRE_ERROR(ds.set_lr(std::nan("")), "the learning rate must be >= 0");
  REQUIRE(ds.read().lr == 0.125);

  // begin lowers every flag
  for (int i = 0; i < 3; i++) *ds.flag(i) = 1;
  ds.begin();
  for (int i = 0; i < 3; i++) REQUIRE(*ds.flag(i) == 0);

  // decide_into: the flags' decision into another state (a replica's own), ds's left alone
  *ds.flag(2) = 1;
  const StepState before = ds.read();
  StepState mine = step_state_make(LossScalerState{}, 0);
  ds.decide_into(&mine);
  REQUIRE(mine.skip == 1);
  REQUIRE(mine.first_bad == 2);
  require_same_state(ds.read(), before);
  REQUIRE(before.skip == 0);

  // decide and finish: step_decide and step_finish on the state
  StepState want = ds.read();
  step_decide_cpu(3, ds.flags(), &want);
  ds.decide();
  require_same_state(ds.read(), want);
  REQUIRE(*ds.skip() == 1);
  REQUIRE(ds.read().first_bad == 2);
  step_finish_cpu(c, &want);
  ds.finish();
  require_same_state(ds.read(), want);
  REQUIRE(ds.read().scaler.scale == 8);       // the overflow halved it
  REQUIRE(ds.read().steps_taken == 41);       // and was no step taken
  REQUIRE(ds.read().peak_skips == 2);         // the restored skip and this one

  // seed: scale x share, rounded once to f32 (loss_seed), or the double product for an f64 loss
  const Tensor s32 = ds.seed(0.1, DType::f32);
  REQUIRE(s32.device() == Device::cpu);
  REQUIRE(s32.dtype() == DType::f32);
  REQUIRE(s32.numel() == 1);
  float want32 = 0;
  const StepState now = ds.read();
  loss_seed_cpu(&now, 0.1, &want32);
  REQUIRE(s32.data<float>()[0] == want32);
  REQUIRE(want32 == float(8 * 0.1));
  const Tensor s64 = ds.seed(0.1, DType::f64);
  REQUIRE(s64.dtype() == DType::f64);
  REQUIRE(s64.data<double>()[0] == 8 * 0.1);
  REQUIRE(s64.data<double>()[0] != double(want32));  // the double kept, not the float's
  REQUIRE_ERROR(ds.seed(0.1, DType::f16), "DeviceStep::seed: the loss is f32 or f64, got f16");
}

TEST_CASE("step state: a cuda DeviceStep refuses bad sizes, and needs a GPU") {
  REQUIRE_ERROR(DeviceStep(LossScalerConfig{}, 0, test_gpu()), "DeviceStep: 0 parameters");
  if (!gpu_usable()) {
    REQUIRE_ERROR(DeviceStep(LossScalerConfig{}, 3, test_gpu()),
                  "DeviceStep: " + gpu_unavailable_reason());
  } else {
    DeviceStep ds(LossScalerConfig{}, 3, test_gpu());
    REQUIRE(ds.params() == 3);
    REQUIRE(ds.device() == Device::cuda);
    REQUIRE_ERROR(ds.flag(3), "DeviceStep: flag 3 of 3");
    REQUIRE_ERROR(ds.flag(-1), "DeviceStep: flag -1 of 3");
  }
}
