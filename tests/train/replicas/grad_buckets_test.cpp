// GradBuckets (train/replicas/grad_buckets.h) and what it stands on: Tensor::flat_view, and
// Tape::grad_ready announcing each gradient as soon as the last closure adding to it has run.
#include <cstdint>
#include <cstring>

#include "nn/model.h"
#include "tests/test_util.h"
#include "tests/train/train_fixture.h"
#include "train/replicas/grad_buckets.h"

using namespace cutrain;
using namespace cutrain_test;

TEST_CASE("flat_view: shares the storage at an offset, and keeps it alive") {
  Tensor v;
  {
    Tensor flat = Tensor::zeros({10}, DType::f32);
    v = flat.flat_view(4, {2, 3});
    v.data<float>()[0] = 5;
    REQUIRE(flat.data<float>()[4] == 5);
    REQUIRE(v.bytes() == 24);
    REQUIRE_ERROR(flat.flat_view(5, {2, 3}), "outside");
  }
  v.fill_(1);  // the flat buffer is gone from here, but not its storage
  REQUIRE(v.to_doubles() == std::vector<double>(6, 1.0));
}

TEST_CASE("Tape::grad_ready: each input once, right after the last closure that adds to it") {
  Tape tape;
  VarPtr x = make_var(uniform({2, 3}, DType::f32, 1), true, "x");
  VarPtr w = make_var(uniform({4, 3}, DType::f32, 2), true, "w");
  VarPtr b = make_var(uniform({4}, DType::f32, 3), true, "b");
  std::vector<std::string> order;
  VarPtr h = relu(tape, linear(tape, x, w, b));  // (2,4)
  VarPtr y = add(tape, h, h);                    // h used twice by one closure
  VarPtr loss = softmax_cross_entropy(tape, y, Tensor::from_ints({1, 2}, {2}), 0.0);
  tape.grad_ready = [&](const Var& v) { order.push_back(v.name.empty() ? "?" : v.name); };
  tape.backward(loss);
  // y, h and the linear output are unnamed intermediates ("?"); the parameters and x arrive
  // together after the linear backward, in the order linear gave them to wants().
  REQUIRE(order == std::vector<std::string>{"?", "?", "?", "x", "w", "b"});
}

TEST_CASE("GradBuckets: gradients are views of one flat buffer, buckets in backward order") {
  ModelOptions mo;
  mo.H = mo.W = 12, mo.C = 1, mo.classes = 10;
  auto model = build_model(parse_model_spec(kSmallModel, "small"), mo);
  const auto& params = model->parameters();  // conv1.w, bn1.gamma, bn1.beta, conv2.w, ...
  GradBuckets per_layer(params, 0);
  REQUIRE(per_layer.numel() == model->parameter_count());
  // One bucket per layer, the last layer first: linear1, bn2, conv2, bn1, conv1.
  REQUIRE(per_layer.size() == 5);
  REQUIRE(per_layer[0].layers == "linear1");
  REQUIRE(per_layer[4].layers == "conv1");
  REQUIRE(per_layer[0].data == params.back()->grad.raw());
  // Contiguous: each bucket starts where the one before it ends.
  for (size_t k = 1; k < per_layer.size(); k++)
    REQUIRE(static_cast<char*>(per_layer[k].data) ==
            static_cast<char*>(per_layer[k - 1].data) + per_layer[k - 1].numel * 4);
  // Backward writes land in the buffer.
  params[0]->grad_buffer().data<float>()[0] = 3;
  REQUIRE(static_cast<float*>(per_layer[4].data)[0] == 3);
  per_layer.zero();
  REQUIRE(params[0]->grad.data<float>()[0] == 0);

  // Readiness: a bucket completes with its last parameter; finish() hands over the rest.
  per_layer.arm();
  int linear_w = -1, linear_b = -1;
  for (const VarPtr& p : params) {
    if (p->name == "linear1.w") linear_w = per_layer.ready(*p);
    if (p->name == "linear1.b") linear_b = per_layer.ready(*p);
  }
  REQUIRE(linear_w + linear_b == -1);  // one of them -1, the other 0
  REQUIRE(std::max(linear_w, linear_b) == 0);
  REQUIRE(per_layer.finish() == std::vector<int>{1, 2, 3, 4});

  // A minimum size merges small layers: everything fits in one bucket of 64 KiB.
  GradBuckets merged(model->parameters(), size_t(64) << 10);
  REQUIRE(merged.size() == 1);
  REQUIRE(merged[0].layers == "linear1..conv1");
}

TEST_CASE("GradBuckets: fp16 conv weights and fp32 BatchNorm parameters in two buffers") {
  ModelOptions mo;
  mo.H = mo.W = 12, mo.C = 1, mo.classes = 10, mo.dtype = DType::f16;
  auto model = build_model(parse_model_spec(kSmallModel, "small"), mo);
  // Per layer (no minimum): linear1 (f16), bn2 (f32), conv2 (f16), bn1 (f32), conv1 (f16),
  // in the order backward completes them.
  GradBuckets per_layer(model->parameters(), 0);
  REQUIRE(per_layer.size() == 5);
  REQUIRE(per_layer[0].layers == "linear1");
  REQUIRE(per_layer[1].layers == "bn2");
  REQUIRE(per_layer[1].dtype == DType::f32);
  REQUIRE(per_layer[4].layers == "conv1");
  // Merged: each dtype's buffer is cut on its own, so the BatchNorm layers between the convs
  // make one fp32 bucket (not one between every two convs), listed by when it completes: with
  // bn1, before conv1, which completes the fp16 one.
  GradBuckets g(model->parameters(), size_t(1) << 20);
  REQUIRE(g.size() == 2);
  REQUIRE(g[0].dtype == DType::f32);
  REQUIRE(g[0].layers == "bn2..bn1");
  REQUIRE(g[1].dtype == DType::f16);
  REQUIRE(g[1].layers == "linear1..conv1");
  // Backward completes them in that order.
  g.arm();
  std::vector<int> completed;
  const auto& params = model->parameters();
  for (auto it = params.rbegin(); it != params.rend(); ++it)
    if (const int k = g.ready(**it); k >= 0) completed.push_back(k);
  REQUIRE(completed == std::vector<int>{0, 1});
  REQUIRE(g.finish().empty());
  // Every gradient 16-byte aligned (cuDNN and the vector loads): linear1.b's 10 fp16 values
  // take 32 bytes, not 20.
  size_t padded = 0;
  for (const VarPtr& p : model->parameters()) {
    REQUIRE(reinterpret_cast<uintptr_t>(p->grad.raw()) % 16 == 0);
    padded += (p->value.bytes() + 15) / 16 * 16;
  }
  REQUIRE(g.numel() == model->parameter_count());
  REQUIRE(g.bytes() == padded);
  REQUIRE(g.bytes() == size_t(model->parameter_count() - 2 * (8 + 16)) * 2 + 2 * (8 + 16) * 4 + 12);
}
