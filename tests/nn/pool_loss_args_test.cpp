// maxpool2d, global_avgpool, softmax_cross_entropy, top1_correct and add at the op level:
// output shapes and dtypes (the loss in the accumulation dtype), what gets recorded, and bad
// arguments rejected with a message naming the op and the problem.
#include <cmath>
#include <vector>

#include "nn/ops.h"
#include "tests/test_util.h"

using namespace cutrain;
using cutrain_test::uniform;

TEST_CASE("ops: pool output shapes, and nothing recorded without requires_grad") {
  VarPtr x = make_var(uniform({2, 7, 9, 3}, DType::f32, 1), false);
  Tape tape;
  REQUIRE(maxpool2d(tape, x, 3, 3, 2, 2, 1, 1)->value.shape() == Shape{2, 4, 5, 3});
  REQUIRE(maxpool2d(tape, x, 2, 3, 2, 3, 0, 0)->value.shape() == Shape{2, 3, 3, 3});
  REQUIRE(global_avgpool(tape, x)->value.shape() == Shape{2, 3});
  REQUIRE(tape.size() == 0);
  x->requires_grad = true;
  VarPtr y = maxpool2d(tape, x, 2, 2, 2, 2, 0, 0);
  REQUIRE(y->requires_grad);
  REQUIRE(tape.size() == 1);
}

TEST_CASE("ops: f16 logits give an f32 loss; the seed (loss scale) reaches the gradient") {
  // logits (2,3) f16, uniform row 0 and a confident row 1; labels 0 and 2
  VarPtr z = make_var(Tensor::from_floats({0, 0, 0, 0, 0, 8}, {2, 3}, DType::f16), true);
  const Tensor labels = Tensor::from_ints({0, 2}, {2});
  Tape tape;
  VarPtr loss = softmax_cross_entropy(tape, z, labels);
  REQUIRE(loss->value.dtype() == DType::f32);
  REQUIRE(loss->value.shape() == Shape{1});
  const double s1 = std::exp(-8.0);
  const double want = (std::log(3.0) + std::log1p(2 * s1)) / 2;
  REQUIRE(std::fabs(loss->value.item() - want) < 1e-6);
  tape.backward(loss, 1024.0);
  // dz = 1024 * (p - q) / 2: row 0 (1/3 - 1, 1/3, 1/3) * 512
  const std::vector<double> g = z->grad.to_doubles();
  REQUIRE(z->grad.dtype() == DType::f16);
  REQUIRE(std::fabs(g[0] - 512 * (1.0 / 3 - 1)) < 0.25);
  REQUIRE(std::fabs(g[1] - 512.0 / 3) < 0.25);
  REQUIRE(std::fabs(g[5] - 512 * (1 / (1 + 2 * s1) - 1)) < 0.01);
}

TEST_CASE("ops: f64 logits give an f64 loss; the labels are kept for backward, not copied") {
  VarPtr z = make_var(Tensor::from_doubles({1, 2, 3, 4, 5, 6}, {2, 3}), true);
  Tensor labels = Tensor::from_ints({2, 0}, {2});
  Tape tape;
  VarPtr loss = softmax_cross_entropy(tape, z, labels, 0.0);
  REQUIRE(loss->value.dtype() == DType::f64);
  // The op holds the tensor itself (ops.h: labels keep their values until backward), so a
  // change in between is what backward reads: row 0 now against label 0.
  labels.data<int32_t>()[0] = 0;
  tape.backward(loss);
  const std::vector<double> g = z->grad.to_doubles();
  const double e = std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
  REQUIRE(std::fabs(g[0] - (std::exp(1.0) / e - 1) / 2) < 1e-12);
  REQUIRE(std::fabs(g[2] - std::exp(3.0) / e / 2) < 1e-12);
}

TEST_CASE("ops: top1_correct counts the first largest logit") {
  const Tensor z = Tensor::from_floats({2, 2, 1,  //
                                        0, 3, 3,  //
                                        1, 0, 0},
                                       {3, 3}, DType::f16);
  REQUIRE(top1_correct(z, Tensor::from_ints({0, 1, 0}, {3})) == 3);
  REQUIRE(top1_correct(z, Tensor::from_ints({1, 2, 0}, {3})) == 1);
}

TEST_CASE("ops: softmax_cross_entropy rejects bad labels and logits, naming the problem") {
  Tape tape;
  VarPtr z = make_var(uniform({3, 4}, DType::f32, 2), true);
  REQUIRE_ERROR(softmax_cross_entropy(tape, z, Tensor::from_ints({0, 9, 1}, {3})),
                "softmax_cross_entropy: label 9 at row 1 is outside [0,4)");
  REQUIRE_ERROR(softmax_cross_entropy(tape, z, Tensor::from_ints({0, 1, -2}, {3})),
                "label -2 at row 2");
  REQUIRE_ERROR(softmax_cross_entropy(tape, z, Tensor::from_floats({0, 1, 2}, {3})),
                "softmax_cross_entropy: labels must be i32, got f32");
  REQUIRE_ERROR(softmax_cross_entropy(tape, z, Tensor::from_ints({0, 1}, {2})),
                "labels must be (N) = (3) for logits (3,4), got (2)");
  REQUIRE_ERROR(softmax_cross_entropy(tape, z, Tensor::from_ints({0, 1, 2}, {3, 1})),
                "labels must be (N) = (3)");
  VarPtr z3 = make_var(uniform({3, 4, 1}, DType::f32, 3), true);
  REQUIRE_ERROR(softmax_cross_entropy(tape, z3, Tensor::from_ints({0, 1, 2}, {3})),
                "softmax_cross_entropy: logits must be (N,K), got f32 cpu (3,4,1)");
  REQUIRE_ERROR(softmax_cross_entropy(tape, z, Tensor::from_ints({0, 1, 2}, {3}), 1.0),
                "label smoothing must be in [0,1), got 1");
  VarPtr zi = make_var(Tensor::from_ints({0, 1, 2, 3}, {1, 4}), false);
  REQUIRE_ERROR(softmax_cross_entropy(tape, zi, Tensor::from_ints({0}, {1})),
                "logits must be floating");
  const Tensor y = Tensor::from_ints({0, 1, 2}, {3});
  REQUIRE_ERROR(softmax_cross_entropy(tape, z, y, 0.0, Tensor::from_floats({1, 1, 1}, {3})),
                "class weights must be (4) f32 on the logits' device for logits f32 cpu (3,4), "
                "got f32 cpu (3)");
  REQUIRE_ERROR(softmax_cross_entropy(tape, z, y, 0.0,
                                      Tensor::from_floats({1, 1, 1, 1}, {4}, DType::f64)),
                "class weights must be (4) f32");
  REQUIRE_ERROR(top1_correct(z->value, Tensor::from_ints({0, 4, 1}, {3})),
                "top1_correct: label 4 at row 1");
  REQUIRE_ERROR(top1_correct(z->value, Tensor::from_floats({0, 1, 2}, {3})),
                "top1_correct: labels must be i32");
  REQUIRE(tape.size() == 0);  // nothing recorded by the calls that threw
}

TEST_CASE("ops: maxpool2d and global_avgpool reject impossible shapes") {
  Tape tape;
  VarPtr x = make_var(uniform({1, 3, 4, 2}, DType::f32, 4), true);
  REQUIRE_ERROR(maxpool2d(tape, x, 4, 4, 1, 1, 0, 0),
                "maxpool2d: window 4x4 is larger than the padded input 3x4");
  REQUIRE(maxpool2d(tape, x, 4, 4, 1, 1, 1, 0)->value.shape() == Shape{1, 2, 1, 2});  // pad fits
  REQUIRE_ERROR(maxpool2d(tape, x, 2, 2, 0, 1, 0, 0), "maxpool2d: stride must be >= 1, got 0x1");
  REQUIRE_ERROR(maxpool2d(tape, x, 2, 2, 2, 2, 2, 0), "padding 2x0 must be smaller than the window");
  VarPtr x3 = make_var(uniform({3, 4, 2}, DType::f32, 5), true);
  REQUIRE_ERROR(maxpool2d(tape, x3, 2, 2, 2, 2, 0, 0),
                "maxpool2d: x must be (N,H,W,C), got f32 cpu (3,4,2)");
  REQUIRE_ERROR(global_avgpool(tape, x3), "global_avgpool: x must be (N,H,W,C)");
  VarPtr x0 = make_var(Tensor::zeros({2, 0, 3, 1}, DType::f32), true);
  REQUIRE_ERROR(global_avgpool(tape, x0), "global_avgpool: needs at least one pixel");
}

TEST_CASE("ops: add rejects different shapes and dtypes") {
  Tape tape;
  VarPtr a = make_var(uniform({2, 3}, DType::f32, 6), true);
  VarPtr b = make_var(uniform({3, 2}, DType::f32, 7), true);
  VarPtr c = make_var(uniform({2, 3}, DType::f16, 8), true);
  REQUIRE_ERROR(add(tape, a, b), "add: shapes differ: (2,3) and (3,2)");
  REQUIRE_ERROR(add(tape, a, c), "add: dtypes differ");
}
