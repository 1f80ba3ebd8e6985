// conv2d and linear as ops: what they produce for good arguments (shapes, dtypes, what is
// recorded), and that bad shapes and bad arguments are refused with a message naming the
// problem, recording nothing.
#include <vector>

#include "nn/ops.h"
#include "tests/test_util.h"

using namespace cutrain;
using cutrain_test::require_close;

namespace {

VarPtr var(const Shape& shape, DType dtype = DType::f32) {
  return make_var(Tensor::zeros(shape, dtype), true);
}

}  // namespace

TEST_CASE_TEMPLATE("conv2d op: output shape (N,P,Q,K) and values in every float dtype", T, float,
                   double, half_t) {
  // x (1,3,3,1) = 1..9, w (1,2,2,1) = [1 2; 3 4], b = 0.5: the 37, 47, 67, 77 of the kernel
  // test (y[p][q] = sum_{r,s} x[p+r][q+s] w[r][s]) plus the bias. 37.5 etc. are exact in half.
  const DType dt = dtype_of<T>();
  VarPtr x = make_var(Tensor::from_floats({1, 2, 3, 4, 5, 6, 7, 8, 9}, {1, 3, 3, 1}, dt));
  VarPtr w = make_var(Tensor::from_floats({1, 2, 3, 4}, {1, 2, 2, 1}, dt), true);
  VarPtr b = make_var(Tensor::from_floats({0.5f}, {1}, dt), true);
  Tape tape;
  VarPtr y = conv2d(tape, x, w, b, 1, 1, 0, 0);
  REQUIRE(y->value.shape() == Shape{1, 2, 2, 1});
  REQUIRE(y->value.dtype() == dt);
  REQUIRE(y->requires_grad);
  REQUIRE(tape.size() == 1);
  require_close(y->value, {37.5, 47.5, 67.5, 77.5}, 0);
  // and its gradient, seeded with dy = 1: dw[r][s] = sum_{p,q} x[p+r][q+s], db = P*Q = 4
  tape.backward(y, Tensor::from_floats({1, 1, 1, 1}, {1, 2, 2, 1}, dt));
  require_close(w->grad, {1 + 2 + 4 + 5, 2 + 3 + 5 + 6, 4 + 5 + 7 + 8, 5 + 6 + 8 + 9}, 0);
  require_close(b->grad, {4}, 0);
}

TEST_CASE("conv2d op: stride and padding reach the kernel in (h, w) order") {
  // x (1,6,4,1), w (1,3,2,1), stride 2x1, pad 1x0: P = (6 + 2 - 3) / 2 + 1 = 3,
  // Q = (4 + 0 - 2) / 1 + 1 = 3. Swapping the strides would give P = 4 (and swapping the pads
  // P = 2, Q = 5).
  Tape tape;
  VarPtr y = conv2d(tape, var({1, 6, 4, 1}), var({1, 3, 2, 1}), nullptr, 2, 1, 1, 0);
  REQUIRE(y->value.shape() == Shape{1, 3, 3, 1});
  y = conv2d(tape, var({1, 6, 4, 1}), var({1, 3, 2, 1}), nullptr, 1, 2, 0, 1);
  REQUIRE(y->value.shape() == Shape{1, 4, 3, 1});  // P = (6 - 3) + 1, Q = (4 + 2 - 2) / 2 + 1
}

TEST_CASE("conv2d op: bad shapes and arguments are refused with a clear message") {
  Tape tape;
  VarPtr x = var({2, 5, 4, 3}), w = var({6, 3, 3, 3}), b = var({6});
  conv2d(tape, x, w, b, 1, 1, 1, 1);  // the good call, for contrast
  REQUIRE(tape.size() == 1);
  tape.clear();

  SUBCASE("mismatched channels") {
    REQUIRE_ERROR(conv2d(tape, x, var({6, 3, 3, 2}), b, 1, 1, 1, 1),
                  "conv2d: x (2,5,4,3) has C = 3 but w (6,3,3,2) expects C = 2");
  }
  SUBCASE("wrong rank") {
    REQUIRE_ERROR(conv2d(tape, var({5, 4, 3}), w, b, 1, 1, 1, 1),
                  "conv2d: x must be (N,H,W,C), got f32 cpu (5,4,3)");
    REQUIRE_ERROR(conv2d(tape, x, var({6, 9, 3}), b, 1, 1, 1, 1),
                  "conv2d: w must be (K,R,S,C), got f32 cpu (6,9,3)");
  }
  SUBCASE("bad bias shape") {
    REQUIRE_ERROR(conv2d(tape, x, w, var({3}), 1, 1, 1, 1), "conv2d: bias must be (6), got (3)");
    REQUIRE_ERROR(conv2d(tape, x, w, var({1, 6}), 1, 1, 1, 1),
                  "conv2d: bias must be (6), got (1,6)");
  }
  SUBCASE("stride 0") {
    REQUIRE_ERROR(conv2d(tape, x, w, b, 0, 1, 1, 1), "conv2d: stride must be at least 1, got 0x1");
    REQUIRE_ERROR(conv2d(tape, x, w, b, 2, -1, 1, 1), "stride must be at least 1, got 2x-1");
  }
  SUBCASE("negative pad") {
    REQUIRE_ERROR(conv2d(tape, x, w, b, 1, 1, -1, 0),
                  "conv2d: padding must not be negative, got -1x0");
  }
  SUBCASE("dtype mismatch") {
    REQUIRE_ERROR(conv2d(tape, x, var({6, 3, 3, 3}, DType::f64), b, 1, 1, 1, 1),
                  "conv2d: dtypes differ: f32 cpu (2,5,4,3) and f64 cpu (6,3,3,3)");
    REQUIRE_ERROR(conv2d(tape, x, w, var({6}, DType::f16), 1, 1, 1, 1),
                  "conv2d: dtypes differ: f32 cpu (2,5,4,3) and f16 cpu (6)");
  }
  SUBCASE("not a floating-point tensor") {
    VarPtr xi = make_var(Tensor::zeros({2, 5, 4, 3}, DType::i32));
    VarPtr wi = make_var(Tensor::zeros({6, 3, 3, 3}, DType::i32));
    REQUIRE_ERROR(conv2d(tape, xi, wi, nullptr, 1, 1, 1, 1),
                  "expected a floating-point tensor, got i32");
  }
  SUBCASE("filter larger than the input") {
    REQUIRE_ERROR(conv2d(tape, var({1, 3, 3, 1}), var({1, 5, 5, 1}), nullptr, 1, 1, 0, 0),
                  "conv2d: filter 5x5 is larger than the padded input 3x3 (pad 0)");
    REQUIRE_ERROR(conv2d(tape, x, var({6, 3, 7, 3}), b, 1, 1, 1, 1),
                  "conv2d: filter 3x7 is larger than the padded input 7x6 (pad 1)");
  }
  SUBCASE("empty batch") {
    REQUIRE_ERROR(conv2d(tape, var({0, 5, 4, 3}), w, b, 1, 1, 1, 1),
                  "conv2d: N (batch) must be positive, got 0");
  }
  REQUIRE(tape.size() == 0);  // a refused call records nothing
}

TEST_CASE("linear op: bad shapes and arguments are refused with a clear message") {
  Tape tape;
  VarPtr x = var({4, 5}), w = var({3, 5}), b = var({3});
  REQUIRE(linear(tape, x, w, b)->value.shape() == Shape{4, 3});  // the good call
  tape.clear();

  SUBCASE("mismatched channels") {
    REQUIRE_ERROR(linear(tape, x, var({3, 6}), b),
                  "linear: x (4,5) has C = 5 but w (3,6) expects C = 6");
  }
  SUBCASE("wrong rank") {
    REQUIRE_ERROR(linear(tape, var({4, 1, 5}), w, b),
                  "linear: x must be (N,C), got f32 cpu (4,1,5)");
    REQUIRE_ERROR(linear(tape, x, var({15}), b), "linear: w must be (K,C), got f32 cpu (15)");
  }
  SUBCASE("bad bias shape") {
    REQUIRE_ERROR(linear(tape, x, w, var({5})), "linear: bias must be (3), got (5)");
  }
  SUBCASE("dtype mismatch") {
    REQUIRE_ERROR(linear(tape, x, var({3, 5}, DType::f16), b),
                  "linear: dtypes differ: f32 cpu (4,5) and f16 cpu (3,5)");
    REQUIRE_ERROR(linear(tape, x, w, var({3}, DType::f64)),
                  "linear: dtypes differ: f32 cpu (4,5) and f64 cpu (3)");
  }
  REQUIRE(tape.size() == 0);
}
