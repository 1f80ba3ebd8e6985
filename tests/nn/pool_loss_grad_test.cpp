// Finite-difference gradient checks, in double, of maxpool2d, global_avgpool,
// softmax_cross_entropy, and of relu, add and flatten, alone and composed (a tensor used
// twice, a small network). gradcheck() steps around kinks (ReLU at 0, max-pool ties) and
// fails if more than a tenth of the coordinates sit on one.
#include <vector>

#include "nn/ops.h"
#include "tests/test_util.h"

using namespace cutrain;
using cutrain_test::gradcheck;
using cutrain_test::uniform;

namespace {

using Leaves = std::vector<VarPtr>;

VarPtr leaf(const Shape& shape, uint64_t seed, const char* name, double lo = -1, double hi = 1) {
  return make_var(uniform(shape, DType::f64, seed, lo, hi), true, name);
}

}  // namespace

TEST_CASE("grad: maxpool2d, random inputs, several geometries") {
  struct Case {
    Shape x;
    int r, s, sh, sw, ph, pw;
  };
  const Case cases[] = {
      {{2, 4, 6, 3}, 2, 2, 2, 2, 0, 0},  // the classic 2x2 stride 2
      {{2, 5, 6, 3}, 3, 3, 2, 2, 1, 1},  // overlapping windows with padding, odd sizes
      {{1, 5, 7, 2}, 2, 3, 1, 2, 1, 0},  // non-square window, different strides and pads
      {{3, 3, 3, 1}, 3, 3, 1, 1, 1, 1},  // every window sees most of the image
  };
  for (const Case& c : cases) {
    INFO("x " << shape_str(c.x) << " window " << c.r << "x" << c.s << " stride " << c.sh << "x"
              << c.sw << " pad " << c.ph << "x" << c.pw);
    VarPtr x = leaf(c.x, 11, "x");
    gradcheck([&](Tape& t, const Leaves& v) {
      return maxpool2d(t, v[0], c.r, c.s, c.sh, c.sw, c.ph, c.pw);
    }, {x});
  }
}

TEST_CASE("grad: maxpool2d with exact ties steps around them") {
  // (1,4,4,2), 2x2 stride 2: in channel 0 the first window's max is duplicated, so those two
  // coordinates are kinks (moving either one up moves the max, moving it down does not).
  VarPtr x = leaf({1, 4, 4, 2}, 5, "x");
  double* v = x->value.data<double>();
  // channel 0 of pixels (0,0), (0,1), (1,0), (1,1): indices 0, 2, 8, 10
  v[0] = 2.0, v[10] = 2.0;  // tie for the max of window (0,0)
  v[2] = 0.5, v[8] = -0.5;
  gradcheck([](Tape& t, const Leaves& l) { return maxpool2d(t, l[0], 2, 2, 2, 2, 0, 0); }, {x});
  // the analytic gradient follows the rule: all of it to the first of the tied pair
  Tape tape;
  VarPtr y = maxpool2d(tape, x, 2, 2, 2, 2, 0, 0);
  x->grad = Tensor();
  tape.backward(y, Tensor::from_doubles(std::vector<double>(8, 1.0), {1, 2, 2, 2}));
  const std::vector<double> g = x->grad.to_doubles();
  REQUIRE(g[0] == 1.0);
  REQUIRE(g[10] == 0.0);
}

TEST_CASE("grad: global_avgpool") {
  VarPtr x = leaf({3, 2, 5, 4}, 21, "x");
  gradcheck([](Tape& t, const Leaves& v) { return global_avgpool(t, v[0]); }, {x});
}

TEST_CASE("grad: softmax_cross_entropy, with and without smoothing, odd N and K") {
  const Tensor labels = Tensor::from_ints({0, 6, 3, 3, 1}, {5});
  for (double eps : {0.0, 0.1}) {
    INFO("smoothing " << eps);
    VarPtr z = leaf({5, 7}, 31, "logits", -3, 3);
    gradcheck([&](Tape& t, const Leaves& v) {
      return softmax_cross_entropy(t, v[0], labels, eps);
    }, {z});
  }
  // one row, two classes: the smallest case
  VarPtr z = leaf({1, 2}, 32, "logits");
  gradcheck([](Tape& t, const Leaves& v) {
    return softmax_cross_entropy(t, v[0], Tensor::from_ints({1}, {1}), 0.3);
  }, {z});
}

TEST_CASE("grad: softmax_cross_entropy with class weights (one of them 0)") {
  const Tensor labels = Tensor::from_ints({0, 6, 3, 3, 1, 2}, {6});
  const Tensor w = Tensor::from_doubles({0.5, 2.0, 0.0, 1.25, 1.0, 1.0, 3.0}, {7});
  for (double eps : {0.0, 0.1}) {
    INFO("smoothing " << eps);
    VarPtr z = leaf({6, 7}, 33, "logits", -3, 3);
    gradcheck([&](Tape& t, const Leaves& v) {
      return softmax_cross_entropy(t, v[0], labels, eps, w);
    }, {z});
  }
}

TEST_CASE("grad: relu, away from 0 and near it") {
  VarPtr x = leaf({3, 4, 5}, 41, "x");
  double* v = x->value.data<double>();
  // near and on the kink: within h = 1e-6 of 0, so gradcheck must step around them
  v[3] = 1e-7, v[17] = -1e-7, v[30] = 0.0, v[44] = 3e-7;
  gradcheck([](Tape& t, const Leaves& l) { return relu(t, l[0]); }, {x});
}

TEST_CASE("grad: add of two tensors, and of one tensor with itself") {
  VarPtr a = leaf({2, 3, 5}, 51, "a"), b = leaf({2, 3, 5}, 52, "b");
  gradcheck([](Tape& t, const Leaves& v) { return add(t, v[0], v[1]); }, {a, b});

  VarPtr x = leaf({4, 3}, 53, "x");
  gradcheck([](Tape& t, const Leaves& v) { return add(t, v[0], v[0]); }, {x});
  // y = x + x: dy/dx = 2, from two accumulations into the same grad
  Tape tape;
  x->grad = Tensor();
  VarPtr y = add(tape, x, x);
  tape.backward(y, Tensor::from_doubles(std::vector<double>(12, 1.0), {4, 3}));
  cutrain_test::require_close(x->grad, std::vector<double>(12, 2.0), 0);
}

TEST_CASE("grad: add with only one input needing a gradient") {
  VarPtr a = leaf({6}, 54, "a");
  VarPtr c = make_var(uniform({6}, DType::f64, 55), false, "const");
  gradcheck([&](Tape& t, const Leaves& v) { return add(t, v[0], c); }, {a});
  REQUIRE_FALSE(c->grad.defined());
}

TEST_CASE("grad: flatten") {
  VarPtr x = leaf({2, 3, 4, 5}, 61, "x");
  gradcheck([](Tape& t, const Leaves& v) {
    VarPtr y = flatten(t, v[0]);
    REQUIRE(y->value.shape() == Shape{2, 60});
    return y;
  }, {x});
}

TEST_CASE("grad: residual y = relu(x) + x accumulates both paths") {
  VarPtr x = leaf({3, 7}, 71, "x");
  gradcheck([](Tape& t, const Leaves& v) { return add(t, relu(t, v[0]), v[0]); }, {x});
  // dy/dx = [x > 0] + 1
  Tape tape;
  x->grad = Tensor();
  VarPtr y = add(tape, relu(tape, x), x);
  tape.backward(y, Tensor::from_doubles(std::vector<double>(21, 1.0), {3, 7}));
  std::vector<double> want;
  for (double xi : x->value.to_doubles()) want.push_back(xi > 0 ? 2.0 : 1.0);
  cutrain_test::require_close(x->grad, want, 0);
}

TEST_CASE("grad: a small network: relu, maxpool, global_avgpool, linear, loss") {
  VarPtr x = leaf({2, 6, 5, 3}, 81, "x");
  VarPtr w = leaf({4, 3}, 82, "w"), b = leaf({4}, 83, "b");
  const Tensor labels = Tensor::from_ints({3, 0}, {2});
  gradcheck([&](Tape& t, const Leaves& v) {
    VarPtr h = maxpool2d(t, relu(t, v[0]), 3, 3, 2, 2, 1, 1);  // (2,3,3,3)
    VarPtr z = linear(t, global_avgpool(t, h), v[1], v[2]);    // (2,4)
    return softmax_cross_entropy(t, z, labels, 0.1);
  }, {x, w, b});
}
