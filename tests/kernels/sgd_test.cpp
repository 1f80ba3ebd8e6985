// The optimizer step: hand-computed SGD updates, skipped steps on inf/NaN (the SGD optimizer
// through take_step on a CPU step state), and why fp16 parameters need fp32 master weights.
#include <cmath>
#include <cstring>

#include "kernels/sgd.h"
#include "nn/device_step.h"
#include "nn/loss_scaler.h"
#include "nn/optim.h"
#include "tests/test_util.h"

using namespace cutrain;
using cutrain_test::require_close;

namespace {
// fp32 training's loss scaler: the scale fixed at 1.
LossScalerConfig fp32_scaler() {
  LossScalerConfig c;
  c.dynamic = false;
  c.init = 1;
  return c;
}
}  // namespace

TEST_CASE("sgd: momentum, weight decay and the loss scale, by hand") {
  // w = 1, v = 0, stored grad 8 at loss scale 4 -> g = 2; wd 0.5 -> g' = 2 + 0.5*1 = 2.5
  // step 1: v = 0.9*0 + 2.5 = 2.5;      w = 1 - 0.1*2.5 = 0.75
  // step 2: g' = 2 + 0.5*0.75 = 2.375;  v = 0.9*2.5 + 2.375 = 4.625;  w = 0.75 - 0.4625 = 0.2875
  SgdParams p{0.1, 0.9, 0.5, false};
  double w = 1, v = 0;
  const double g = 8;
  sgd_step_cpu<double>(1, &g, 0.25, &w, &v, nullptr, p);
  REQUIRE(w == doctest::Approx(0.75).epsilon(1e-15));
  sgd_step_cpu<double>(1, &g, 0.25, &w, &v, nullptr, p);
  REQUIRE(v == doctest::Approx(4.625).epsilon(1e-15));
  REQUIRE(w == doctest::Approx(0.2875).epsilon(1e-15));
}

TEST_CASE("sgd: nesterov looks ahead by momentum * v") {
  // w = 1, v = 1, g' = 2 (no decay): v = 0.9 + 2 = 2.9; w -= 0.1 * (2 + 0.9*2.9) = 0.461
  SgdParams p{0.1, 0.9, 0.0, true};
  double w = 1, v = 1;
  const double g = 2;
  sgd_step_cpu<double>(1, &g, 1.0, &w, &v, nullptr, p);
  REQUIRE(v == doctest::Approx(2.9).epsilon(1e-15));
  REQUIRE(w == doctest::Approx(1 - 0.461).epsilon(1e-15));
}

TEST_CASE("sgd: an inf or NaN gradient skips the whole step, changing nothing") {
  VarPtr a = make_var(Tensor::from_floats({1, 2, 3}, {3}), true, "a");
  VarPtr b = make_var(Tensor::from_floats({4, 5}, {2}), true, "b");
  SGD opt({a, b}, SgdParams{0.1, 0.9, 0.01, false});
  DeviceStep ds(fp32_scaler(), 2, Context::cpu());
  ds.reset(loss_scaler_start(ds.config()), 0);
  a->grad_buffer() = Tensor::from_floats({1, 1, 1}, {3});
  b->grad_buffer() = Tensor::from_floats({1, 1}, {2});
  REQUIRE(take_step(opt, ds, 0.1));  // one clean step so the velocities are non-zero
  const Tensor a0 = a->value.clone(), b0 = b->value.clone();
  for (float bad : {INFINITY, NAN}) {
    b->grad = Tensor::from_floats({0.5f, bad}, {2});  // only one element of one parameter
    REQUIRE_FALSE(take_step(opt, ds, 0.1));
    REQUIRE(ds.read().first_bad == 1);
    REQUIRE(std::memcmp(a->value.raw(), a0.raw(), a0.bytes()) == 0);
    REQUIRE(std::memcmp(b->value.raw(), b0.raw(), b0.bytes()) == 0);
  }
  REQUIRE(ds.read().steps_taken == 1);
  // a finite gradient that overflows only when unscaled by a tiny scale is also caught
  LossScalerState tiny;
  tiny.scale = 1e-10;
  ds.reset(tiny, 1);
  b->grad = Tensor::from_floats({1e30f, 1}, {2});
  REQUIRE_FALSE(take_step(opt, ds, 0.1));
  REQUIRE(std::memcmp(b->value.raw(), b0.raw(), b0.bytes()) == 0);
}

TEST_CASE("sgd: fp16 parameters keep fp32 master weights, so small updates are not lost") {
  // Near 1, fp16 spacing is 2^-10 ~ 0.001: an update of 1e-4 rounds away in fp16 storage.
  // With an fp32 master it accumulates: 10 steps of 1e-4 move the master to 0.999, and the
  // working copy follows as soon as the change is representable.
  VarPtr w = make_var(Tensor::from_floats({1}, {1}, DType::f16), true, "w");
  SGD opt({w}, SgdParams{1e-4, 0.0, 0.0, false});
  DeviceStep ds(fp32_scaler(), 1, Context::cpu());
  ds.reset(loss_scaler_start(ds.config()), 0);
  for (int i = 0; i < 10; i++) {
    w->grad = Tensor::from_floats({1}, {1}, DType::f16);
    REQUIRE(take_step(opt, ds, 1e-4));
  }
  REQUIRE(float(w->value.data<half_t>()[0]) == float(half_t(0.999f)));
  REQUIRE(float(w->value.data<half_t>()[0]) < 1.0f);
  // the same updates applied to the fp16 value itself never move it
  half_t h(1.0f);
  for (int i = 0; i < 10; i++) h = half_t(float(h) - 1e-4f);
  REQUIRE(float(h) == 1.0f);
}

TEST_CASE("sgd: bad hyper-parameters are rejected") {
  VarPtr w = make_var(Tensor::from_floats({1}, {1}), true, "w");
  VarPtr c = make_var(Tensor::from_floats({1}, {1}), false, "frozen");
  REQUIRE_ERROR(SGD({w}, SgdParams{0.0, 0.9, 0, false}), "learning rate must be positive");
  REQUIRE_ERROR(SGD({w}, SgdParams{0.1, 1.0, 0, false}), "momentum must be in [0, 1)");
  REQUIRE_ERROR(SGD({c}, SgdParams{}), "'frozen' does not require a gradient");
  // the step's rate comes from the step state, refused there
  SGD ok({w}, SgdParams{});
  DeviceStep ds(fp32_scaler(), 1, Context::cpu());
  ds.reset(loss_scaler_start(ds.config()), 0);
  w->grad = Tensor::from_floats({1}, {1});
  REQUIRE_ERROR(take_step(ok, ds, -0.1), "the learning rate must be >= 0");
  REQUIRE(w->value.item() == 1);
}
