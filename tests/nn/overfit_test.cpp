// The ops, the tape, the model builder and the optimizer working together: a tiny CNN must
// memorise one fixed batch. A wrong gradient anywhere, a tape that runs out of order or an
// optimizer that updates the wrong way shows up here as a loss that will not fall.
#include <cmath>
#include <vector>

#include "kernels/rng.h"
#include "nn/device_step.h"
#include "nn/loss_scaler.h"
#include "nn/model.h"
#include "nn/optim.h"
#include "tests/test_util.h"

using namespace cutrain;

namespace {
const char* kTiny = R"(# a tiny CNN: 12x12x1 -> 4 classes
conv 8 3x3 pad=1
bn
relu
maxpool 2x2
conv 16 3x3 pad=1
bn
relu
gap
linear classes
)";

struct OverfitResult {
  double first_loss = 0, last_loss = 0;
  int steps = 0;
  int64_t correct = 0;
};

// Trains on one batch of 16 noise images with fixed random labels until the loss is below
// `target` or 300 steps pass, as the trainer steps: the step state (a fixed `loss_scale`) seeds
// backward with the scale, and SGD, through take_step, divides it out.
OverfitResult overfit(DType dtype, double loss_scale, double target) {
  ModelOptions o;
  o.H = 12, o.W = 12, o.C = 1, o.classes = 4, o.dtype = dtype, o.seed = 3;
  auto model = build_model(parse_model_spec(kTiny, "tiny"), o);
  const int N = 16;
  VarPtr x = make_var(cutrain_test::uniform({N, 12, 12, 1}, dtype, 11, -1, 1));
  std::vector<int32_t> y(N);
  for (int i = 0; i < N; i++) y[size_t(i)] = int32_t(rng_u64(5, uint64_t(i)) % 4);
  const Tensor labels = Tensor::from_ints(y, {N});

  SGD opt(model->parameters(), SgdParams{0.05, 0.9, 0.0, false});
  LossScalerConfig scaler;
  scaler.dynamic = false, scaler.init = loss_scale;
  DeviceStep ds(scaler, int(opt.params().size()), Context::cpu());
  ds.reset(loss_scaler_start(scaler), 0);
  OverfitResult r;
  for (r.steps = 0; r.steps < 300; r.steps++) {
    Tape tape;
    VarPtr logits = model->forward(tape, x, true);
    VarPtr loss = softmax_cross_entropy(tape, logits, labels, 0.0);
    const double l = loss->value.item();
    REQUIRE(std::isfinite(l));
    if (r.steps == 0) r.first_loss = l;
    r.last_loss = l;
    r.correct = top1_correct(logits->value, labels);
    if (l < target) break;
    tape.backward(loss, ds.seed(1.0, loss->value.dtype()));  // one micro-batch: share 1
    REQUIRE(take_step(opt, ds, 0.05));
    opt.zero_grad();
  }
  return r;
}
}  // namespace

TEST_CASE("overfit: a tiny CNN memorises one batch on the CPU (f32)") {
  const OverfitResult r = overfit(DType::f32, 1.0, 0.05);
  INFO("loss " << r.first_loss << " -> " << r.last_loss << " in " << r.steps << " steps");
  REQUIRE(r.first_loss > 1.0);  // ~log(4) = 1.39 at the start: nothing learnt yet
  REQUIRE(r.last_loss < 0.05);
  REQUIRE(r.correct == 16);
}

TEST_CASE("overfit: the same in fp16 with a loss scale of 1024 and fp32 master weights") {
  // fp16 activations, weights and gradients; BN statistics, the loss and the master weights
  // in fp32. The loss scale keeps small gradients out of fp16's subnormal range.
  const OverfitResult r = overfit(DType::f16, 1024.0, 0.05);
  INFO("loss " << r.first_loss << " -> " << r.last_loss << " in " << r.steps << " steps");
  REQUIRE(r.first_loss > 1.0);
  REQUIRE(r.last_loss < 0.05);
  REQUIRE(r.correct == 16);
}
