// batchnorm2d gradients against finite differences, in double, for x, gamma and beta, in
// training mode (batch statistics: x reaches every output of its channel through the mean
// and variance) and in eval mode (running statistics: a per-channel affine map).
#include "nn/ops.h"
#include "tests/test_util.h"

using namespace cutrain;
using cutrain_test::gradcheck;
using cutrain_test::uniform;

namespace {

// Running statistics that are not the batch ones, so eval mode differs from training.
BatchNormState make_state(int C) {
  BatchNormState s;
  s.running_mean = uniform({C}, DType::f64, 31, -0.5, 0.5);
  s.running_var = uniform({C}, DType::f64, 32, 0.5, 2.0);
  s.eps = 1e-5;
  s.momentum = 0.1;
  return s;
}

void check_batchnorm_grads(const Shape& x_shape, bool training) {
  const int C = x_shape.back();
  // gamma away from 0 and of both signs, so no gradient vanishes by accident.
  std::vector<VarPtr> leaves = {
      make_var(uniform(x_shape, DType::f64, 1, -2, 2), true, "x"),
      make_var(uniform({C}, DType::f64, 2, 0.5, 1.5), true, "gamma"),
      make_var(uniform({C}, DType::f64, 3, -1, 1), true, "beta")};
  double* g = leaves[1]->value.data<double>();
  for (int c = 0; c < C; c += 2) g[c] = -g[c];
  BatchNormState state = make_state(C);
  // gradcheck runs the forward many times. In training mode each run moves the running
  // statistics, but the training output depends only on the batch statistics, so every run
  // computes the same function and the finite differences are valid.
  gradcheck(
      [&](Tape& tape, const std::vector<VarPtr>& v) {
        return batchnorm2d(tape, v[0], v[1], v[2], state, training);
      },
      leaves);
}

}  // namespace

TEST_CASE("batchnorm2d grad: training, NHWC (N=3,H=2,W=3,C=4)") {
  check_batchnorm_grads({3, 2, 3, 4}, true);
}

TEST_CASE("batchnorm2d grad: training, (N,C) = (5,3)") { check_batchnorm_grads({5, 3}, true); }

TEST_CASE("batchnorm2d grad: training, the smallest batch (M = 2)") {
  // With two values per channel xhat is nearly +-1 whatever x is (exactly so but for eps),
  // so dx nearly vanishes: the terms through the mean and the variance must cancel the
  // direct term almost exactly.
  check_batchnorm_grads({2, 1, 1, 3}, true);
}

TEST_CASE("batchnorm2d grad: eval, NHWC (N=3,H=2,W=3,C=4)") {
  check_batchnorm_grads({3, 2, 3, 4}, false);
}

TEST_CASE("batchnorm2d grad: eval, (N,C) = (5,3)") { check_batchnorm_grads({5, 3}, false); }
