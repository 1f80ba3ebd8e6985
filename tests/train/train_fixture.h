// defines: tiny_run_config(), a resolved configuration for short training runs on real
// Fashion-MNIST images (a small CNN, a few hundred images, batches of 32), for the trainer's
// tests; kTinyModel and kSmallModel, the model descriptions they use; require_same_state(),
// two trainers' snapshots equal bit for bit; require_device_clock(), a trainer's steps timed on
// its device's clock.
#pragma once
#include <cstring>
#include <string>

#include "tests/test_util.h"
#include "train/checkpoint/checkpoint.h"
#include "train/engine/trainer.h"

#include "tests/train/fashion_mnist_data.h"
#include "train/setup/config.h"
#include "train/setup/resolve.h"

namespace cutrain_test {

// About 3,000 parameters and 0.2 MFLOP an image: a step of 32 images takes ~20 ms on a CPU.
inline const char* kTinyModel = R"(# tiny: for tests of the training loop
conv 8 3x3 pad=1
bn
relu
maxpool 2x2
conv 8 3x3 pad=1 stride=2
bn
relu
maxpool 2x2
flatten
linear classes
)";

// About 9,000 parameters and 0.6 MFLOP an image (the default model is 44 MFLOP): what a CPU in
// CI can train to > 80% on 5,000 Fashion-MNIST images in seconds. Flatten rather than global
// average pooling: at this width, where a feature is matters (87.5% against 76.5% after 3
// epochs, measured).
inline const char* kSmallModel = R"(# small: trains on a CPU in seconds
conv 8 3x3 pad=1
bn
relu
maxpool 2x2
conv 16 3x3 pad=1
bn
relu
maxpool 2x2
flatten
linear classes
)";

// `images` training images, 100 validation images, batches of 32 in 2 micro-batches, random
// crops (pad 3) and flips, cosine schedule with a warm-up, in `out`. Resolved.
inline cutrain::TrainConfig tiny_run_config(const std::string& out, int images = 160,
                                            int epochs = 3) {
  const FashionMnistFiles& fm = fashion_mnist_jpegs();
  cutrain::TrainConfig c;
  c.train = fm.train, c.val = fm.test;
  c.limit_train = images, c.limit_val = 100;
  c.model = "tiny", c.model_text = kTinyModel;
  c.batch = 32, c.accum = 2, c.epochs = epochs, c.augment = true;
  c.lr = 0.05, c.warmup = 0.4, c.seed = 7, c.threads = 2, c.log_every = 1;
  c.out = out;
  // Every kernel launched by the host (a GPU run's default is CUDA graphs): the GPU tests hold
  // the launched step against the CPU's; the graphs' tests turn them on and hold them against
  // the launched step (tests/train/engine/trainer_gpu_test.cpp).
  c.cuda_graph = false;
  cutrain::resolve_config(c);
  return c;
}

// Every tensor of two snapshots equal bit for bit (names, shapes, dtypes, bytes), and every
// scalar, the step and the cursor equal.
inline void require_same_state(const cutrain::Checkpoint& a, const cutrain::Checkpoint& b) {
  REQUIRE(a.tensors.size() == b.tensors.size());
  for (size_t i = 0; i < a.tensors.size(); i++) {
    INFO("tensor " << a.tensors[i].first);
    REQUIRE(a.tensors[i].first == b.tensors[i].first);
    const cutrain::Tensor &x = a.tensors[i].second, &y = b.tensors[i].second;
    REQUIRE(x.shape() == y.shape());
    REQUIRE(x.dtype() == y.dtype());
    REQUIRE(std::memcmp(x.raw(), y.raw(), x.bytes()) == 0);
  }
  REQUIRE(a.scalars == b.scalars);
  REQUIRE(a.step == b.step);
  REQUIRE(a.cursor == b.cursor);
}

// Steps of `t` (with validation data) launched ahead as a run does, an evaluation after the
// fifth: every step's device clock is a time (compute > 0, the waits >= 0), the host's held
// wait is part of its wait, and the first step and the one after the evaluation count no
// idle time (nothing ran before the first; the evaluation is not idle). host_clock (the CPU):
// every other step counts some (on a GPU the host may be ahead, and then there is none).
inline void require_device_clock(cutrain::Trainer& t, bool host_clock, int steps = 10) {
  std::vector<cutrain::StepResult> got;
  for (int s = 0; s < steps; s++) {
    t.launch();
    if (s == 4) {
      for (const cutrain::StepResult& r : t.results(true)) got.push_back(r);
      t.evaluate();
    }
  }
  for (const cutrain::StepResult& r : t.results(true)) got.push_back(r);
  REQUIRE(got.size() == size_t(steps));
  for (const cutrain::StepResult& r : got) {
    INFO("step " << r.step);
    REQUIRE(r.device.compute_s > 0);
    REQUIRE(r.device.wait_s >= 0);
    REQUIRE(r.device.idle_s >= 0);
    REQUIRE(r.data_wait_held_s >= 0);
    REQUIRE(r.data_wait_held_s <= r.data_wait_s);
    REQUIRE(r.loader_s > 0);  // the loader decoded each batch
  }
  // No idle time before the first step and the one after the evaluation; some before every
  // other (the host's bookkeeping between two steps takes time on any clock).
  for (int s = 0; s < steps; s++) {
    INFO("step " << s);
    if (s == 0 || s == 5)
      REQUIRE(got[size_t(s)].device.idle_s == 0);
    else if (host_clock)
      REQUIRE(got[size_t(s)].device.idle_s > 0);
    REQUIRE((got[size_t(s)].device.launch_s > 0) == !host_clock);  // a GPU's launches only
  }
}

}  // namespace cutrain_test
