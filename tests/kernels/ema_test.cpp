// The weights' moving average (kernels/ema.h) against its definition, and in the multi-tensor
// CPU references (kernels/multi_tensor.h): every slot with an average and the averaged-only
// slots move on a step taken, nothing moves on a skipped one; the check leaves the
// averaged-only slots out; a table puts the parameters first.
#include <cmath>
#include <vector>

#include "kernels/ema.h"
#include "kernels/multi_tensor.h"
#include "kernels/rng.h"
#include "tests/test_util.h"

using namespace cutrain;

TEST_CASE("ema_decay_at: min(decay, (1 + t) / (10 + t)), rounded once") {
  REQUIRE(ema_decay_at<double>(0.999, 1) == 2.0 / 11.0);
  REQUIRE(ema_decay_at<double>(0.999, 1000) == 1001.0 / 1010.0);
  REQUIRE(ema_decay_at<double>(0.999, 9000) == 0.999);  // 9001/9010 > 0.999
  REQUIRE(ema_decay_at<float>(0.99, 5) == float(6.0 / 15.0));
  REQUIRE(ema_decay_at<float>(0.9, 1000000) == 0.9f);
}

TEST_CASE_TEMPLATE("ema_update_cpu over many steps is the weighted sum of its definition", A,
                   float, double) {
  // e_T = prod(d_t) e_0 + sum_t (1 - d_t) prod_{s>t}(d_s) w_t, computed in long double from
  // the same rounded factors; the loop rounds each step in A.
  const int n = 5, T = 300;
  const double decay = 0.98;
  std::vector<A> e(n), w(n);
  std::vector<long double> want(n);
  for (int i = 0; i < n; i++) e[size_t(i)] = A(i), want[size_t(i)] = i;
  for (int t = 1; t <= T; t++) {
    const A d = ema_decay_at<A>(decay, t);
    for (int i = 0; i < n; i++) {
      w[size_t(i)] = A(std::sin(0.1 * t + i));
      want[size_t(i)] = (long double)d * want[size_t(i)] +
                        (long double)(A(1) - d) * (long double)w[size_t(i)];
    }
    ema_update_cpu<A>(n, w.data(), e.data(), decay, t);
  }
  const double tol = sizeof(A) == 4 ? 1e-5 : 1e-13;
  for (int i = 0; i < n; i++) REQUIRE(std::fabs(double(e[size_t(i)]) - double(want[size_t(i)])) < tol);
  // and the first step, by hand: d = 2/11, so e = 2/11 * e0 + 9/11 * w
  A e1 = A(1), w1 = A(12);
  ema_update_cpu<A>(1, &w1, &e1, 0.999, 1);
  const A d1 = ema_decay_at<A>(0.999, 1);
  REQUIRE(e1 == d1 * A(1) + (A(1) - d1) * A(12));
}

namespace {
struct Slots {
  std::vector<float> g0, m0, v0, e0;  // a float parameter: gradient, master, velocity, average
  std::vector<float> m1, e1;          // an averaged-only slot: its tensor and its average
  std::vector<ParamSlot> slots() {
    ParamSlot p;
    p.n = int64_t(m0.size()), p.grad = g0.data(), p.master = m0.data(), p.state1 = v0.data();
    p.ema = e0.data();
    ParamSlot b;
    b.n = int64_t(m1.size()), b.master = m1.data(), b.ema = e1.data();
    return {p, b};
  }
};
Slots make(uint64_t seed) {
  Slots s;
  for (int i = 0; i < 40; i++) {
    s.g0.push_back(float(rng_uniform(seed, uint64_t(i)) * 100 - 50));
    s.m0.push_back(float(rng_uniform(seed + 1, uint64_t(i))));
    s.v0.push_back(0.0f);
    s.e0.push_back(float(rng_uniform(seed + 2, uint64_t(i))));
  }
  for (int i = 0; i < 9; i++) {
    s.m1.push_back(float(rng_uniform(seed + 3, uint64_t(i)) + 1));
    s.e1.push_back(1.0f);
  }
  return s;
}
}  // namespace

TEST_CASE("multi_tensor CPU references: the averages move on a step taken, after the update") {
  SgdParams sp;
  sp.lr = 0.1, sp.momentum = 0.9;
  for (bool skip : {false, true}) {
    INFO((skip ? "skipped" : "taken"));
    Slots a = make(5), want = make(5);
    multi_sgd_step_cpu(a.slots(), 1.0 / 64, skip, sp, 7, 0.99);
    if (!skip) {  // by the per-tensor functions: the update, then the averages of both slots
      sgd_step_cpu<float>(40, want.g0.data(), 1.0 / 64, want.m0.data(), want.v0.data(), nullptr,
                          sp);
      ema_update_cpu<float>(40, want.m0.data(), want.e0.data(), 0.99, 7);
      ema_update_cpu<float>(9, want.m1.data(), want.e1.data(), 0.99, 7);
    }
    REQUIRE(a.m0 == want.m0);
    REQUIRE(a.e0 == want.e0);
    REQUIRE(a.e1 == want.e1);
    REQUIRE(a.m1 == want.m1);  // the averaged-only slot's tensor is only read
    REQUIRE((a.e0 != make(5).e0) == !skip);
    for (float g : a.g0) REQUIRE(g == 0.0f);  // zeroed, skipped or not
  }
}

TEST_CASE("multi_tensor CPU references: AdamW's averages too; the check skips averaged-only slots") {
  AdamWParams ap;
  ap.lr = 1e-3;
  Slots a = make(8), want = make(8);
  std::vector<float> v2(40, 0.0f), w2(40, 0.0f);
  std::vector<ParamSlot> sa = a.slots();
  sa[0].state2 = v2.data();
  a.m1[3] = NAN;  // a statistic is not a gradient: never flagged
  std::vector<int32_t> flags(2, 0);
  multi_grads_nonfinite_cpu(sa, 1.0 / 64, flags.data());
  REQUIRE(flags == std::vector<int32_t>{0, 0});
  a.m1[3] = want.m1[3];
  multi_adamw_step_cpu(sa, 1.0 / 64, false, ap, 3, 0.999);
  adamw_step_cpu<float>(40, want.g0.data(), 1.0 / 64, want.m0.data(), want.v0.data(), w2.data(),
                        nullptr, ap, 3);
  ema_update_cpu<float>(40, want.m0.data(), want.e0.data(), 0.999, 3);
  ema_update_cpu<float>(9, want.m1.data(), want.e1.data(), 0.999, 3);
  REQUIRE(a.m0 == want.m0);
  REQUIRE(a.e0 == want.e0);
  REQUIRE(a.e1 == want.e1);
}

TEST_CASE("ParamTable: averaged-only slots after the parameters, complete, or refused") {
  Slots s = make(1);
  std::vector<ParamSlot> slots = s.slots();
  ParamTable t;
  const std::vector<ParamSlot> reversed = {slots[1], slots[0]};
  REQUIRE_ERROR(t.build(reversed, 0, nullptr), "parameters come first");
  ParamSlot no_average = slots[1];
  no_average.ema = nullptr;
  const std::vector<ParamSlot> incomplete = {slots[0], no_average};
  REQUIRE_ERROR(t.build(incomplete, 0, nullptr), "needs its tensor and its average");
  // the sizes the costs count: the parameter's 40 elements, both averages
  const ParamTotals tot = param_totals(slots);
  REQUIRE(tot.elements == 40);
  REQUIRE(tot.ema_elements == 49);
  REQUIRE(tot.ema_bytes == 40 * 8 + 9 * 12);
}
