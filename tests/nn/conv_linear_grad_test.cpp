// conv2d and linear through the autograd op, in double, against finite differences: every
// input and parameter, with and without bias, strides, padding, rectangular filters and odd
// sizes; then small compositions, to show the tape chains ops and sums into shared inputs.
#include <vector>

#include "nn/ops.h"
#include "tests/test_util.h"

using namespace cutrain;
using cutrain_test::gradcheck;
using cutrain_test::uniform;

namespace {

// A leaf of the graph: random values in [-1, 1), needs a gradient.
VarPtr leaf(const Shape& shape, uint64_t seed, const char* name) {
  return make_var(uniform(shape, DType::f64, seed), true, name);
}

struct ConvCase {
  const char* name;
  int N, H, W, C, K, R, S, stride_h, stride_w, pad_h, pad_w;
  bool bias;
};

void gradcheck_conv(const ConvCase& c) {
  INFO("case: " << c.name);
  std::vector<VarPtr> leaves = {leaf({c.N, c.H, c.W, c.C}, 1, "x"),
                                leaf({c.K, c.R, c.S, c.C}, 2, "w")};
  if (c.bias) leaves.push_back(leaf({c.K}, 3, "b"));
  gradcheck(
      [&](Tape& t, const std::vector<VarPtr>& l) {
        return conv2d(t, l[0], l[1], l.size() > 2 ? l[2] : nullptr, c.stride_h, c.stride_w,
                      c.pad_h, c.pad_w);
      },
      leaves);
}

}  // namespace

TEST_CASE("conv2d gradcheck: x, w and b") {
  const ConvCase cases[] = {
      // name                               N  H  W  C  K  R  S  sh sw ph pw bias
      {"3x3, pad 1, bias",                  2, 5, 4, 3, 2, 3, 3, 1, 1, 1, 1, true},
      {"3x3, pad 1, no bias",               2, 5, 4, 3, 2, 3, 3, 1, 1, 1, 1, false},
      {"3x3, stride 2, pad 1",              2, 5, 4, 3, 2, 3, 3, 2, 2, 1, 1, true},
      {"3x3, stride 2, no pad, no bias",    2, 5, 4, 3, 2, 3, 3, 2, 2, 0, 0, false},
      {"2x3 filter, stride 2x1, pad 0x2",   1, 5, 4, 2, 3, 2, 3, 2, 1, 0, 2, true},
      {"1x3 filter, pad 0x1",               2, 3, 5, 1, 2, 1, 3, 1, 1, 0, 1, true},
      // stride 3 over H = 7 with R = 3 reads rows 0..5 only: row 6 must get a zero gradient
      {"3x1 filter, stride 3 leaves a row", 1, 7, 3, 2, 2, 3, 1, 3, 1, 0, 0, false},
      // pad 2 with a 2x2 filter: the corner outputs see only padding (y = b)
      {"pad wider than the filter",         1, 3, 3, 2, 2, 2, 2, 1, 1, 2, 2, true},
      {"1x1 filter, many channels",         2, 3, 2, 5, 4, 1, 1, 1, 1, 0, 0, true},
  };
  for (const ConvCase& c : cases) gradcheck_conv(c);
}

TEST_CASE("conv2d: gradients only where requires_grad") {
  VarPtr x = leaf({2, 4, 3, 2}, 1, "x"), w = leaf({3, 2, 2, 2}, 2, "w"), b = leaf({3}, 3, "b");
  const auto f = [](Tape& t, const std::vector<VarPtr>& l) {
    return conv2d(t, l[0], l[1], l[2], 1, 1, 1, 0);
  };
  SUBCASE("x is data, w and b are learned") {
    x->requires_grad = false;
    gradcheck(f, {x, w, b});
    REQUIRE(!x->grad.defined());
  }
  SUBCASE("only the bias is learned (no dw computed)") {
    x->requires_grad = false;
    w->requires_grad = false;
    gradcheck(f, {x, w, b});
    REQUIRE(!x->grad.defined());
    REQUIRE(!w->grad.defined());
  }
  SUBCASE("only x needs a gradient") {
    w->requires_grad = false;
    b->requires_grad = false;
    gradcheck(f, {x, w, b});
    REQUIRE(!w->grad.defined());
    REQUIRE(!b->grad.defined());
  }
  SUBCASE("nothing needs a gradient: nothing is recorded") {
    x->requires_grad = w->requires_grad = b->requires_grad = false;
    Tape tape;
    VarPtr y = conv2d(tape, x, w, b, 1, 1, 1, 0);
    REQUIRE(tape.size() == 0);
    REQUIRE(!y->requires_grad);
  }
}

TEST_CASE("linear gradcheck: x, w and b") {
  SUBCASE("with bias") {
    gradcheck([](Tape& t, const std::vector<VarPtr>& l) { return linear(t, l[0], l[1], l[2]); },
              {leaf({3, 5}, 1, "x"), leaf({4, 5}, 2, "w"), leaf({4}, 3, "b")});
  }
  SUBCASE("without bias") {
    gradcheck([](Tape& t, const std::vector<VarPtr>& l) { return linear(t, l[0], l[1], nullptr); },
              {leaf({3, 5}, 1, "x"), leaf({4, 5}, 2, "w")});
  }
  SUBCASE("one row, one output") {
    gradcheck([](Tape& t, const std::vector<VarPtr>& l) { return linear(t, l[0], l[1], l[2]); },
              {leaf({1, 7}, 4, "x"), leaf({1, 7}, 5, "w"), leaf({1}, 6, "b")});
  }
}

TEST_CASE("gradcheck: conv2d -> relu -> flatten -> linear chains on the tape") {
  // x (2,5,4,3) -conv 3x3 stride 2 pad 1-> (2,3,2,4) -relu-> -flatten-> (2,24) -linear-> (2,3)
  gradcheck(
      [](Tape& t, const std::vector<VarPtr>& l) {
        VarPtr h = relu(t, conv2d(t, l[0], l[1], l[2], 2, 2, 1, 1));
        return linear(t, flatten(t, h), l[3], l[4]);
      },
      {leaf({2, 5, 4, 3}, 1, "x"), leaf({4, 3, 3, 3}, 2, "conv.w"), leaf({4}, 3, "conv.b"),
       leaf({3, 24}, 4, "fc.w"), leaf({3}, 5, "fc.b")});
}

TEST_CASE("gradcheck: x feeding two convolutions gets the sum of both gradients") {
  // y = conv3x3(x, w1, pad 1) + conv1x1(x, w2): both (2,4,5,3), so x's gradient is the sum of
  // two backward-data calls that accumulate into the same buffer.
  gradcheck(
      [](Tape& t, const std::vector<VarPtr>& l) {
        return add(t, conv2d(t, l[0], l[1], nullptr, 1, 1, 1, 1),
                   conv2d(t, l[0], l[2], l[3], 1, 1, 0, 0));
      },
      {leaf({2, 4, 5, 2}, 1, "x"), leaf({3, 3, 3, 2}, 2, "w1"), leaf({3, 1, 1, 2}, 3, "w2"),
       leaf({3}, 4, "b2")});
}
