// The AdamW step: two steps worked out by hand (bias correction, decoupled weight decay, the
// loss scale), the float reference against the double one, and fp32 masters for fp16 weights.
#include <cmath>
#include <vector>

#include "kernels/adamw.h"
#include "nn/device_step.h"
#include "nn/loss_scaler.h"
#include "nn/optim.h"
#include "tests/test_util.h"

using namespace cutrain;

TEST_CASE("adamw: two steps by hand, with bias correction and decoupled weight decay") {
  // w = 1, m = v = 0; lr 0.1, betas 0.9 / 0.999, eps 1e-8, weight decay 0.5; loss scale 4.
  const AdamWParams p{0.1, 0.9, 0.999, 1e-8, 0.5};
  double w = 1, m = 0, v = 0;
  // step 1: stored grad 8 -> g = 2.  m = 0.1*2 = 0.2;  v = 0.001*4 = 0.004
  //   m^ = 0.2 / (1-0.9) = 2;  v^ = 0.004 / (1-0.999) = 4;  sqrt(v^) = 2
  //   w = 1 - 0.1*0.5*1 - 0.1 * 2/(2 + 1e-8) = 0.95 - 0.0999999995 = 0.8500000005
  const double g1 = 8;
  adamw_step_cpu<double>(1, &g1, 0.25, &w, &m, &v, nullptr, p, 1);
  REQUIRE(m == doctest::Approx(0.2).epsilon(1e-15));
  REQUIRE(v == doctest::Approx(0.004).epsilon(1e-15));
  const double w1 = 0.95 - 0.1 * 2 / (2 + 1e-8);
  REQUIRE(w == doctest::Approx(w1).epsilon(1e-15));
  REQUIRE(w == doctest::Approx(0.8500000005).epsilon(1e-15));
  // step 2: stored grad -4 -> g = -1.
  //   m = 0.9*0.2 - 0.1 = 0.08;  v = 0.999*0.004 + 0.001 = 0.004996
  //   m^ = 0.08 / (1-0.81) = 8/19 = 0.42105...
  //   v^ = 0.004996 / (1-0.998001) = 4996/1999 = 2.49925...
  //   w = w1 * (1 - 0.05) - 0.1 * (8/19) / (sqrt(4996/1999) + 1e-8) = 0.78086629667...
  // Without the bias correction the step would be 0.1 * 0.08/sqrt(0.004996) = 0.113, not 0.0266.
  const double g2 = -4;
  adamw_step_cpu<double>(1, &g2, 0.25, &w, &m, &v, nullptr, p, 2);
  REQUIRE(m == doctest::Approx(0.08).epsilon(1e-14));
  REQUIRE(v == doctest::Approx(0.004996).epsilon(1e-14));
  const double w2 = w1 * 0.95 - 0.1 * (8.0 / 19) / (std::sqrt(4996.0 / 1999) + 1e-8);
  REQUIRE(w == doctest::Approx(w2).epsilon(1e-14));
  REQUIRE(w == doctest::Approx(0.7808662966774312).epsilon(1e-14));
}

TEST_CASE("adamw: weight decay is decoupled: a zero gradient still shrinks w by lr*wd") {
  // With g = 0 the Adam term is 0/(0+eps) = 0, so w = w * (1 - lr*wd) exactly as in AdamW
  // (L2 decay inside Adam would instead be normalised to a step of ~lr).
  const AdamWParams p{0.01, 0.9, 0.999, 1e-8, 0.1};
  double w = 3, m = 0, v = 0;
  const double g = 0;
  adamw_step_cpu<double>(1, &g, 1.0, &w, &m, &v, nullptr, p, 1);
  REQUIRE(w == doctest::Approx(3 * (1 - 0.001)).epsilon(1e-15));
}

TEST_CASE("adamw: the float reference follows the double one over 20 steps (odd size)") {
  const int64_t n = 37;
  const AdamWParams p{3e-3, 0.9, 0.999, 1e-8, 0.05};
  std::vector<double> wd(n), md(n, 0), vd(n, 0);
  std::vector<float> wf(n), mf(n, 0), vf(n, 0);
  for (int64_t i = 0; i < n; i++) wf[size_t(i)] = float(wd[size_t(i)] = std::sin(double(i)));
  for (int64_t t = 1; t <= 20; t++) {
    std::vector<double> gd(n);
    std::vector<float> gf(n);
    for (int64_t i = 0; i < n; i++)
      gf[size_t(i)] = float(gd[size_t(i)] = 1024 * std::cos(double(i * t)));  // scale 1024
    adamw_step_cpu<double>(n, gd.data(), 1.0 / 1024, wd.data(), md.data(), vd.data(), nullptr,
                           p, t);
    adamw_step_cpu<float>(n, gf.data(), 1.0 / 1024, wf.data(), mf.data(), vf.data(), nullptr,
                          p, t);
  }
  cutrain_test::require_near(cutrain_test::doubles(wf), wd, 1e-6, 1e-5);
  cutrain_test::require_near(cutrain_test::doubles(vf), vd, 1e-9, 1e-5);
}

TEST_CASE("adamw: fp16 parameters keep fp32 master weights and moments") {
  // Each Adam step moves w by ~lr whatever the gradient's size (m^/sqrt(v^) = 1 for a constant
  // gradient). 1e-4 is a tenth of fp16's spacing near 1: lost in fp16, kept in the fp32 master.
  VarPtr w = make_var(Tensor::from_floats({1}, {1}, DType::f16), true, "w");
  AdamW opt({w}, AdamWParams{1e-4, 0.9, 0.999, 1e-8, 0.0});
  const auto state = opt.state_tensors();
  REQUIRE(state.size() == 3);
  REQUIRE(state[0].first == "w.master");
  REQUIRE(state[0].second->dtype() == DType::f32);
  REQUIRE(state[1].first == "w.adam_m");
  REQUIRE(state[1].second->dtype() == DType::f32);
  REQUIRE(state[2].first == "w.adam_v");
  REQUIRE(state[2].second->dtype() == DType::f32);
  LossScalerConfig fixed;  // the loss scale fixed at 1: only the update is under test
  fixed.dynamic = false, fixed.init = 1;
  DeviceStep ds(fixed, 1, Context::cpu());
  ds.reset(loss_scaler_start(fixed), 0);
  for (int i = 0; i < 10; i++) {
    w->grad = Tensor::from_floats({0.5f}, {1}, DType::f16);
    REQUIRE(take_step(opt, ds, 1e-4));
  }
  REQUIRE(ds.read().steps_taken == 10);
  const float master = state[0].second->data<float>()[0];
  REQUIRE(master == doctest::Approx(0.999).epsilon(1e-6));
  REQUIRE(float(w->value.data<half_t>()[0]) == float(half_t(master)));
  REQUIRE(float(w->value.data<half_t>()[0]) < 1.0f);
}

TEST_CASE("adamw: bad hyper-parameters are rejected") {
  VarPtr w = make_var(Tensor::from_floats({1}, {1}), true, "w");
  REQUIRE_ERROR(AdamW({w}, AdamWParams{0.0, 0.9, 0.999, 1e-8, 0}),
                "learning rate must be positive");
  REQUIRE_ERROR(AdamW({w}, AdamWParams{1e-3, 1.0, 0.999, 1e-8, 0}), "beta1 must be in [0, 1)");
  REQUIRE_ERROR(AdamW({w}, AdamWParams{1e-3, 0.9, -0.1, 1e-8, 0}), "beta2 must be in [0, 1)");
  REQUIRE_ERROR(AdamW({w}, AdamWParams{1e-3, 0.9, 0.999, 0, 0}), "eps must be positive");
  REQUIRE_ERROR(AdamW({w}, AdamWParams{1e-3, 0.9, 0.999, 1e-8, -1}), "weight decay must be >= 0");
  REQUIRE_ERROR(AdamW({}, AdamWParams{}), "AdamW: no parameters to optimize");
}

TEST_CASE("adamw: beta^t by repeated squaring (host = device) is std::pow to ~t ulps") {
  // t = 1 and 2 take one exact / one correctly rounded product: the same as std::pow
  REQUIRE(adamw_power(0.999, 1) == 0.999);
  REQUIRE(adamw_power(0.999, 2) == std::pow(0.999, 2.0));
  REQUIRE(adamw_power(0.9, 0) == 1.0);
  // each squaring doubles the relative error, so beta^t is off by up to ~t ulps; but
  // t beta^t stays small (at most 1 / (e ln(1/beta)): 368 for beta = 0.999), so the bias
  // correction 1 - beta^t is off by ~1e-14 at worst, invisible once rounded to float
  for (int64_t t : {3, 10, 1000, 123457, 10000000}) {
    INFO("t = " << t);
    for (double beta : {0.9, 0.999, 0.9999}) {
      const double want = std::pow(beta, double(t));
      REQUIRE(std::fabs(adamw_power(beta, t) - want) <= 2 * double(t) * 0x1p-53 * want);
      REQUIRE(std::fabs(adamw_power(beta, t) - want) <= 1e-13);
      REQUIRE(adamw_bias_correction<float>(beta, t) == float(1 - want));
    }
  }
}
