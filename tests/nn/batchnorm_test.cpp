// batchnorm2d, the op: training moves the running statistics and eval does not, fp16
// activations with fp32 parameters, the eval backward uses the statistics its forward saw,
// bad arguments are refused with a message naming the problem, and the fused ReLU gives the
// two ops' bits.
#include <cmath>
#include <cstring>
#include <utility>
#include <vector>

#include "nn/ops.h"
#include "tests/test_util.h"

using namespace cutrain;
using cutrain_test::require_close;
using cutrain_test::uniform;

namespace {

// The hand example of tests/kernels/batchnorm_test.cpp as one (1,2,2,2) NHWC image:
// channel 0 holds 7, 9, 9, 15 (mean 10, unbiased var 12), channel 1 holds 1, -1, -3, -1
// (mean -1, unbiased var 8/3).
const std::vector<double> kX = {7, 1, 9, -1, 9, -3, 15, -1};

BatchNormState fresh_state(int C, DType acc) {
  BatchNormState s;
  s.running_mean = Tensor::zeros({C}, acc);
  s.running_var = Tensor::zeros({C}, acc);
  s.running_var.fill_(1.0);
  return s;
}

VarPtr param(const std::vector<double>& v, DType dtype, bool requires_grad = true) {
  return make_var(Tensor::from_doubles(v, {int(v.size())}, dtype), requires_grad);
}

// gamma * (x - mean) / sqrt(var + eps) + beta for a (M,C) array, per channel c = i % C.
std::vector<double> affine_normalise(const std::vector<double>& x, const std::vector<double>& g,
                                     const std::vector<double>& b, const std::vector<double>& mean,
                                     const std::vector<double>& var, double eps) {
  std::vector<double> y(x.size());
  const size_t C = g.size();
  for (size_t i = 0; i < x.size(); i++)
    y[i] = g[i % C] * (x[i] - mean[i % C]) / std::sqrt(var[i % C] + eps) + b[i % C];
  return y;
}

}  // namespace

TEST_CASE("batchnorm2d: training moves the running statistics, eval does not") {
  VarPtr x = make_var(Tensor::from_doubles(kX, {1, 2, 2, 2}, DType::f32));
  VarPtr gamma = param({2, 3}, DType::f32), beta = param({0.5, 0.25}, DType::f32);
  BatchNormState st = fresh_state(2, DType::f32);
  Tape tape;  // recording: eval must leave the state alone whether or not a tape records

  VarPtr y = batchnorm2d(tape, x, gamma, beta, st, false);
  require_close(st.running_mean, {0, 0}, 0);
  require_close(st.running_var, {1, 1}, 0);
  require_close(y->value, affine_normalise(kX, {2, 3}, {0.5, 0.25}, {0, 0}, {1, 1}, st.eps),
                1e-5);

  batchnorm2d(tape, x, gamma, beta, st, true);
  // momentum 0.1 from (0, 1): mean 0.1 * (10, -1), var 0.9 + 0.1 * (12, 8/3)
  require_close(st.running_mean, {1.0, -0.1}, 1e-6);
  require_close(st.running_var, {2.1, 0.9 + 0.8 / 3}, 1e-6);

  y = batchnorm2d(tape, x, gamma, beta, st, false);
  require_close(st.running_mean, {1.0, -0.1}, 1e-6);
  require_close(st.running_var, {2.1, 0.9 + 0.8 / 3}, 1e-6);
  const std::vector<double> rm = {1.0, -0.1}, rv = {2.1, 0.9 + 0.8 / 3};
  require_close(y->value, affine_normalise(kX, {2, 3}, {0.5, 0.25}, rm, rv, st.eps), 1e-5);
}

TEST_CASE("batchnorm2d: fp16 activations with fp32 parameters match the f64 op") {
  // Inputs and the output gradient are rounded to fp16 first, so the f16 and f64 runs see
  // the same numbers. y and dx differ by one fp16 rounding (2^-11 relative) plus fp32 noise;
  // dgamma is summed and stored in fp32 in the f16 run (no fp16 rounding of its own), so it
  // agrees with f64 to fp32 rounding (1e-5 leaves room for 18 rounded additions).
  const Shape shape = {2, 3, 3, 2};
  const Tensor x16 = uniform(shape, DType::f16, 5, -3, 3), dy16 = uniform(shape, DType::f16, 6);
  const std::vector<double> g = {1.5, -0.5}, b = {0.25, 2};
  for (bool training : {true, false}) {
    INFO("training = " << training);
    auto run = [&](const Tensor& x, const Tensor& dy, DType acc, Tensor* dx, Tensor* dg) {
      VarPtr xv = make_var(x, true), gv = param(g, acc), bv = param(b, acc);
      BatchNormState st = fresh_state(2, acc);
      Tape tape;
      VarPtr y = batchnorm2d(tape, xv, gv, bv, st, training);
      tape.backward(y, dy);
      *dx = xv->grad;
      *dg = gv->grad;
      return y->value;
    };
    Tensor dx16, dg16, dx64, dg64;
    const Tensor y16 = run(x16, dy16, DType::f32, &dx16, &dg16);
    const Tensor y64 = run(x16.to(DType::f64), dy16.to(DType::f64), DType::f64, &dx64, &dg64);
    REQUIRE(y16.dtype() == DType::f16);
    REQUIRE(dx16.dtype() == DType::f16);
    REQUIRE(dg16.dtype() == DType::f32);
    require_close(y16, y64.to_doubles(), 1e-6, std::ldexp(1.0, -11));
    require_close(dx16, dx64.to_doubles(), 1e-5, std::ldexp(1.0, -11));
    require_close(dg16, dg64.to_doubles(), 1e-5, 1e-5);
  }
}

TEST_CASE("batchnorm2d: the eval backward uses the statistics its forward saw") {
  // A training step between the eval forward and its backward moves the running statistics;
  // the recorded backward must still use the ones the forward normalised with.
  VarPtr x = make_var(Tensor::from_doubles(kX, {4, 2}, DType::f64), true);
  VarPtr gamma = param({2, 3}, DType::f64), beta = param({0.5, 0.25}, DType::f64);
  BatchNormState st = fresh_state(2, DType::f64);
  Tape tape;
  VarPtr y = batchnorm2d(tape, x, gamma, beta, st, false);
  Tape off(Context::cpu(), false);
  batchnorm2d(off, x, gamma, beta, st, true);
  REQUIRE(st.running_var.to_doubles()[0] != 1.0);
  Tensor ones = Tensor::zeros({4, 2}, DType::f64);
  ones.fill_(1.0);
  tape.backward(y, ones);
  // dx = dy * gamma / sqrt(var + eps) with the running var the forward saw: (1, 1)
  const double s = 1 / std::sqrt(1 + st.eps);
  require_close(x->grad, {2 * s, 3 * s, 2 * s, 3 * s, 2 * s, 3 * s, 2 * s, 3 * s}, 1e-12);
  // dgamma = sum dy * (x - 0) * s: (7+9+9+15) s and (1-1-3-1) s
  require_close(gamma->grad, {40 * s, -4 * s}, 1e-12);
}

TEST_CASE("batchnorm2d: bad arguments are refused with a message naming the problem") {
  Tape tape(Context::cpu(), false);
  const int C = 4;
  VarPtr x = make_var(uniform({2, 3, 3, C}, DType::f32, 9));
  VarPtr gamma = param({1, 1, 1, 1}, DType::f32), beta = param({0, 0, 0, 0}, DType::f32);
  BatchNormState st = fresh_state(C, DType::f32);
  REQUIRE_NOTHROW(batchnorm2d(tape, x, gamma, beta, st, true));

  SUBCASE("gamma of the wrong size") {
    VarPtr g5 = param({1, 1, 1, 1, 1}, DType::f32);
    REQUIRE_ERROR(batchnorm2d(tape, x, g5, beta, st, true), "gamma must be (4)");
  }
  SUBCASE("f16 gamma with f16 x: parameters must be in the accumulation dtype") {
    VarPtr x16 = make_var(x->value.to(DType::f16));
    REQUIRE_NOTHROW(batchnorm2d(tape, x16, gamma, beta, st, true));  // f32 gamma: fine
    VarPtr g16 = param({1, 1, 1, 1}, DType::f16);
    REQUIRE_ERROR(batchnorm2d(tape, x16, g16, beta, st, true), "gamma must be f32");
  }
  SUBCASE("beta and running statistics in the wrong dtype or shape") {
    VarPtr b64 = param({0, 0, 0, 0}, DType::f64);
    REQUIRE_ERROR(batchnorm2d(tape, x, gamma, b64, st, true), "beta must be f32");
    st.running_var = Tensor::zeros({C + 1}, DType::f32);
    REQUIRE_ERROR(batchnorm2d(tape, x, gamma, beta, st, false), "running_var must be (4)");
  }
  SUBCASE("x of rank 3") {
    VarPtr x3 = make_var(uniform({2, 3, C}, DType::f32, 9));
    REQUIRE_ERROR(batchnorm2d(tape, x3, gamma, beta, st, true), "must be (N,H,W,C) or (N,C)");
  }
  SUBCASE("undefined running statistics") {
    BatchNormState no_mean = st, no_var = st;
    no_mean.running_mean = Tensor();
    no_var.running_var = Tensor();
    REQUIRE_ERROR(batchnorm2d(tape, x, gamma, beta, no_mean, false), "running_mean is undefined");
    REQUIRE_ERROR(batchnorm2d(tape, x, gamma, beta, no_var, true), "running_var is undefined");
  }
  SUBCASE("one value per channel in training (M == 1)") {
    VarPtr x1 = make_var(uniform({1, 1, 1, C}, DType::f32, 9));
    REQUIRE_ERROR(batchnorm2d(tape, x1, gamma, beta, st, true), "batch variance is undefined");
    VarPtr xn1 = make_var(uniform({1, C}, DType::f32, 9));
    REQUIRE_ERROR(batchnorm2d(tape, xn1, gamma, beta, st, true), "M = N*H*W = 1");
    // eval needs no batch statistics: a single image is fine
    REQUIRE_NOTHROW(batchnorm2d(tape, x1, gamma, beta, st, false));
  }
  SUBCASE("eps and momentum out of range") {
    st.eps = 0;
    REQUIRE_ERROR(batchnorm2d(tape, x, gamma, beta, st, true), "eps must be > 0");
    st.eps = 1e-5;
    st.momentum = 1.5;
    REQUIRE_ERROR(batchnorm2d(tape, x, gamma, beta, st, true), "momentum must lie in [0, 1]");
  }
}

TEST_CASE("batchnorm2d with step_sums: the forwards only sum their batch statistics; the step's "
          "one update uses their mean") {
  // Two micro-batches of 3 images 2x2 with 3 channels, in double; the update worked out here
  // from the values themselves (per channel: mean, unbiased variance over N*H*W = 12 values).
  const int C = 3, M = 12;
  const Tensor x1 = uniform({3, 2, 2, C}, DType::f64, 41, -2, 3);
  const Tensor x2 = uniform({3, 2, 2, C}, DType::f64, 42, -1, 5);
  VarPtr gamma = param({1, 2, 3}, DType::f64), beta = param({0, 0, 0}, DType::f64);
  BatchNormState st = fresh_state(C, DType::f64);
  st.running_mean.fill_(0.5);
  st.step_sums = Tensor::zeros({2 * C}, DType::f64);
  Tape tape;
  for (const Tensor& x : {x1, x2}) batchnorm2d(tape, make_var(x), gamma, beta, st, true);
  require_close(st.running_mean, {0.5, 0.5, 0.5}, 0);  // not moved by the forwards
  require_close(st.running_var, {1, 1, 1}, 0);
  std::vector<double> want_mean(C), want_var(C), sums(2 * C, 0.0);
  for (const Tensor& x : {x1, x2}) {
    const std::vector<double> v = x.to_doubles();
    for (int c = 0; c < C; c++) {
      double mean = 0, ss = 0;
      for (int m = 0; m < M; m++) mean += v[size_t(m * C + c)] / M;
      for (int m = 0; m < M; m++) ss += (v[size_t(m * C + c)] - mean) * (v[size_t(m * C + c)] - mean);
      sums[size_t(c)] += mean, sums[size_t(C + c)] += ss / (M - 1);
    }
  }
  require_close(st.step_sums, sums, 1e-12);
  batchnorm_step_update(Context::cpu(), st, 0.5);  // the mean of 2
  for (int c = 0; c < C; c++) {
    want_mean[size_t(c)] = 0.9 * 0.5 + 0.1 * sums[size_t(c)] / 2;
    want_var[size_t(c)] = 0.9 * 1.0 + 0.1 * sums[size_t(C + c)] / 2;
  }
  require_close(st.running_mean, want_mean, 1e-12);
  require_close(st.running_var, want_var, 1e-12);
  // Wrong sums are refused by name.
  st.step_sums = Tensor::zeros({C}, DType::f64);
  REQUIRE_THROWS_WITH(batchnorm2d(tape, make_var(x1), gamma, beta, st, true),
                      doctest::Contains("step_sums must be (6) f64"));
}

// relu = true fuses the ReLU into BN's kernels (kernels/batchnorm.h): the output, the input's
// gradient and gamma's and beta's are the two ops' bit for bit, in every dtype, in training
// and in eval. About half the values are negative, so the mask matters; the incoming gradient
// has exact zeros and negative zeros where the mask passes, the signed-zero cases.
TEST_CASE("batchnorm2d relu=true: relu(batchnorm2d(x)) fused, the same bits forward and backward") {
  for (DType dt : {DType::f64, DType::f32, DType::f16})
    for (bool training : {true, false}) {
      INFO(dtype_name(dt) << (training ? " training" : " eval"));
      const DType acc = acc_dtype(dt);
      const Shape shape = {3, 4, 5, 6};
      const Tensor x0 = uniform(shape, dt, 11, -2.0, 2.0);
      Tensor dy = uniform(shape, dt, 12, -1.0, 1.0);
      std::vector<double> d = dy.to_doubles();  // some +0 and -0 among them
      for (size_t i = 0; i < d.size(); i += 7) d[i] = (i / 7) % 2 ? 0.0 : -0.0;
      dy = Tensor::from_doubles(d, shape, dt);
      struct Out {
        Tensor y, dx, dg, db, rm, rv;
      };
      auto run = [&](bool fused) {
        VarPtr x = make_var(x0.clone(), true);
        VarPtr g = make_var(uniform({6}, acc, 13, 0.5, 1.5), true);
        VarPtr b = make_var(uniform({6}, acc, 14, -0.5, 0.5), true);
        BatchNormState st = fresh_state(6, acc);
        Tape tape;
        VarPtr y = fused ? batchnorm2d(tape, x, g, b, st, training, true)
                         : relu(tape, batchnorm2d(tape, x, g, b, st, training));
        tape.backward(y, dy);
        return Out{y->value, x->grad, g->grad, b->grad, st.running_mean, st.running_var};
      };
      const Out a = run(false), f = run(true);
      for (auto [p, q] : {std::pair{a.y, f.y}, {a.dx, f.dx}, {a.dg, f.dg}, {a.db, f.db},
                          {a.rm, f.rm}, {a.rv, f.rv}}) {
        REQUIRE(p.bytes() == q.bytes());
        REQUIRE(std::memcmp(p.raw(), q.raw(), p.bytes()) == 0);
      }
      int zeros = 0;  // the mask did something
      for (double v : f.y.to_doubles()) zeros += v == 0;
      REQUIRE(zeros > int(x0.numel()) / 4);
    }
}
