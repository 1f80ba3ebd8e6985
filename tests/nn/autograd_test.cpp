// The tape: reverse order, accumulation, seeds, and what it refuses.
#include <map>

#include "nn/ops.h"
#include "tests/test_util.h"

using namespace cutrain;
using cutrain_test::require_close;

TEST_CASE("autograd: backward runs in reverse and accumulates into shared inputs") {
  // y = relu(x) + x, x used twice: dy/dx = 1[x>0] + 1
  VarPtr x = make_var(Tensor::from_floats({-2, 3}, {2}), true, "x");
  Tape tape;
  VarPtr y = add(tape, relu(tape, x), x);
  REQUIRE(tape.size() == 2);
  tape.backward(y, Tensor::from_floats({1, 1}, {2}));
  REQUIRE(tape.size() == 0);  // the tape is consumed
  require_close(x->grad, {1, 2}, 0);
}

TEST_CASE("autograd: a seed is taken as it is only when nothing else shares its storage") {
  VarPtr x = make_var(Tensor::from_floats({-2, 3}, {2}), true, "x");
  {  // a temporary of its own: adopted, no copy
    Tape tape;
    VarPtr y = relu(tape, x);
    Tensor seed = Tensor::from_floats({1, 1}, {2});
    const void* p = seed.raw();
    REQUIRE(seed.owns_alone());
    tape.backward(y, std::move(seed));
    REQUIRE(y->grad.raw() == p);
  }
  {  // moved in while a copy is alive: copied (the copy would see backward's writes)
    Tape tape;
    VarPtr y = relu(tape, x);
    Tensor seed = Tensor::from_floats({1, 1}, {2});
    const Tensor kept = seed;
    REQUIRE_FALSE(seed.owns_alone());
    tape.backward(y, std::move(seed));
    REQUIRE(y->grad.raw() != kept.raw());
  }
  {  // a view of a bigger buffer: copied
    Tape tape;
    VarPtr y = relu(tape, x);
    Tensor buffer = Tensor::from_floats({1, 1, 1, 1}, {4});
    Tensor view = buffer.flat_view(2, {2});
    REQUIRE_FALSE(view.owns_alone());
    tape.backward(y, std::move(view));
    REQUIRE(y->grad.raw() != static_cast<char*>(buffer.raw()) + 2 * sizeof(float));
    REQUIRE(y->grad.owns_alone());
  }
  {  // a const reference: always copied
    Tape tape;
    VarPtr y = relu(tape, x);
    const Tensor seed = Tensor::from_floats({1, 1}, {2});
    tape.backward(y, seed);
    REQUIRE(y->grad.raw() != seed.raw());
  }
  require_close(x->grad, {0, 4}, 0);  // four backwards of relu at 3, seed 1
}

TEST_CASE("autograd: the seed scales every gradient (the loss scale)") {
  VarPtr x = make_var(Tensor::from_floats({1, 2}, {1, 2}), true);
  VarPtr w = make_var(Tensor::from_floats({3, 4}, {1, 2}), true);
  Tape tape;
  VarPtr y = linear(tape, x, w, nullptr);  // y = 1*3 + 2*4 = 11
  REQUIRE(y->value.item() == 11);
  tape.backward(y, 1024.0);
  require_close(w->grad, {1024, 2048}, 0);
  require_close(x->grad, {3072, 4096}, 0);
}

TEST_CASE("autograd: gradients accumulate over backward calls until zeroed") {
  VarPtr x = make_var(Tensor::from_floats({2}, {1, 1}), false);
  VarPtr w = make_var(Tensor::from_floats({5}, {1, 1}), true);
  for (int i = 0; i < 3; i++) {
    Tape tape;
    tape.backward(linear(tape, x, w, nullptr), 1.0);
  }
  require_close(w->grad, {6}, 0);  // 3 micro-batches x dy/dw = 2
  w->zero_grad();
  require_close(w->grad, {0}, 0);
}

TEST_CASE("autograd: nothing is recorded for constants or with a disabled tape") {
  VarPtr x = make_var(Tensor::from_floats({1, -1}, {2}), false);
  Tape tape;
  VarPtr y = relu(tape, x);
  REQUIRE(tape.size() == 0);
  REQUIRE_FALSE(y->requires_grad);
  REQUIRE_ERROR(tape.backward(y, Tensor::from_floats({1, 1}, {2})), "does not depend on anything");
  VarPtr p = make_var(Tensor::from_floats({1, -1}, {2}), true);
  Tape off(Context::cpu(), false);
  relu(off, p);
  REQUIRE(off.size() == 0);
  REQUIRE_ERROR(off.backward(p, Tensor::from_floats({1, 1}, {2})), "records nothing");
}

TEST_CASE("autograd: backward needs a one-element loss or a matching seed") {
  VarPtr x = make_var(Tensor::from_floats({1, 2}, {2}), true);
  Tape tape;
  VarPtr y = relu(tape, x);
  REQUIRE_ERROR(tape.backward(y, 1.0), "one-element loss");
  REQUIRE_ERROR(tape.backward(y, Tensor::from_floats({1, 1, 1}, {3})), "does not match output");
}

TEST_CASE("gradcheck: steps around a kink and counts it") {
  // 20 inputs, one of them exactly on ReLU's kink at 0: that coordinate is stepped around,
  // the other 19 are compared.
  std::vector<double> v(20);
  for (size_t i = 0; i < v.size(); i++) v[i] = (double(i) - 9.5) / 4;  // no other near 0
  v[7] = 0.0;
  VarPtr x = make_var(Tensor::from_doubles(v, {20}), true, "x");
  auto stats = cutrain_test::gradcheck(
      [](Tape& t, const std::vector<VarPtr>& in) { return relu(t, in[0]); }, {x});
  REQUIRE(stats.kinks == 1);
  REQUIRE(stats.checked == 19);
}

TEST_CASE("autograd: ops run in their tape's context, and refuse a tensor on another device") {
  // The CPU is the default context; the gradients are made where the values were.
  VarPtr x = make_var(Tensor::from_floats({1, -1}, {1, 2}), true);
  VarPtr w = make_var(Tensor::from_floats({3, 4, 5, 6}, {2, 2}), true);
  Tape tape;
  REQUIRE(tape.context().device == Device::cpu);
  tape.backward(linear(tape, x, w, nullptr), Tensor::from_floats({1, 1}, {1, 2}));
  REQUIRE(w->grad.device() == Device::cpu);
  // A tape whose context is a GPU refuses CPU tensors before it allocates or launches
  // anything (so this runs without a GPU), naming the op, the tensor and the device.
  Tape on_gpu(Context::cuda(nullptr));
  REQUIRE(on_gpu.context().device == Device::cuda);
  REQUIRE_ERROR(linear(on_gpu, x, w, nullptr),
                "linear: f32 cpu (1,2) is not on the device the op runs on (cuda)");
  REQUIRE_ERROR(relu(on_gpu, x), "relu: f32 cpu (1,2) is not on the device the op runs on");
  BatchNormState bn;
  bn.running_mean = Tensor::zeros({2}, DType::f32);
  bn.running_var = Tensor::from_floats({1, 1}, {2});
  VarPtr g = make_var(Tensor::from_floats({1, 1}, {2}), true);
  VarPtr b = make_var(Tensor::zeros({2}, DType::f32), true);
  REQUIRE_ERROR(batchnorm2d(on_gpu, x, g, b, bn, false),
                "batchnorm2d: f32 cpu (2) is not on the device the op runs on (cuda)");
  REQUIRE(on_gpu.size() == 0);
}

TEST_CASE("autograd: the activations' gradients are zeroed in one buffer, one memset in all") {
  LaunchPlan plan;
  Context c = Context::cpu();
  c.plan = &plan;  // notes the zeroing of every tensor made in c (kernels/launch_plan.h)
  VarPtr x = make_var(Tensor::from_floats({-1, 2, -3, 4, 5, -6}, {2, 3}), true, "x");  // a leaf
  Tape tape(c);
  VarPtr y1 = relu(tape, x), y2 = add(tape, y1, y1), y3 = relu(tape, y2);
  // Each gradient as it is complete (grad_ready), since backward releases them after.
  std::map<const Var*, Tensor> seen;
  tape.grad_ready = [&](const Var& v) { seen[&v] = v.grad; };
  plan.record(true);
  tape.backward(y3, Tensor::from_floats({1, 1, 1, 1, 1, 1}, {2, 3}));
  int memsets = 0;
  for (const LaunchPlan::Row& r : plan.rows()) memsets += r.cost.kernel == "memset";
  REQUIRE(memsets == 1);  // y1's and y2's gradients (y3's is the seed; x's is the leaf's own)
  // one buffer, in the ops' order, each gradient on a 128-byte boundary
  const Tensor g1 = seen.at(y1.get()), g2 = seen.at(y2.get());
  REQUIRE(static_cast<char*>(g2.raw()) - static_cast<char*>(g1.raw()) == 128);
  require_close(g2, {0, 1, 0, 1, 1, 0}, 0);
  require_close(g1, {0, 2, 0, 2, 2, 0}, 0);
  require_close(x->grad, {0, 2, 0, 2, 2, 0}, 0);
  // Released after backward: an output kept after the step (y1 here) keeps no gradient
  // buffer alive; the parameters' (x's) and the seed's stay.
  REQUIRE_FALSE(y1->grad.defined());
  REQUIRE_FALSE(y2->grad.defined());
  REQUIRE(y3->grad.defined());
  REQUIRE(x->grad.defined());
}
