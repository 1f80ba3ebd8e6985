// Data-parallel replicas on CPU threads (--devices cpu,cpu,...): R = 2, 3, 4 against one
// replica with the same global batch and data order (gradients within 1e-6, weights close after
// 20 steps), every replica's weights equal bit for bit after every step, each sample exactly
// once per epoch across the replicas, an inf on one replica skipping the step on all, resume
// onto another replica count, --check-replicas, and the --devices checks.
#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <set>

#include "tests/test_util.h"
#include "tests/train/replica_fixture.h"
#include "train/engine/trainer.h"

using namespace cutrain;
using namespace cutrain_test;

namespace {

RunDevice cpu(DType dtype = DType::f32) { return run_on(Device::cpu, dtype); }

// BatchNorm on the input, after a convolution and after a linear layer.
const char* const kSyncBnModel =
    "bn\nconv 8 3x3 pad=1\nbn\nrelu\nmaxpool 2x2\nconv 8 3x3 pad=1 stride=2\nbn\nrelu\n"
    "maxpool 2x2\nflatten\nlinear 16\nbn\nrelu\nlinear classes\n";

}  // namespace

TEST_CASE("replicas: R = 2, 3, 4 step like one replica with the same global batch") {
  TempDir dir;
  require_replicas_step_like_one(
      dir.str(), [](const std::string& out, int R) { return replica_config(out, R); }, cpu(),
      {2, 3, 4});
}

TEST_CASE("replicas: with BatchNorm, R replicas equal one replica with the batch in R parts, "
          "running statistics included") {
  // BatchNorm normalises each replica's shard with its own statistics, as one replica does
  // each micro-batch with --accum R: shard r is micro-batch r. In double, to show the two are
  // the same computation: in fp32 they differ by 1e-5 (relative) in conv1.w, whose gradient
  // sums 9,408 products per element that BatchNorm makes cancel (it removes their mean), so
  // the different order of the sums shows ~170x larger than fp32's 6e-8 (measured; in double
  // the difference is 3e-14, which is what this test bounds).
  // The running statistics: one update per optimizer step from the mean of the step's R batch
  // statistics, both ways (nn/ops.h, BatchNormState::step_sums); before that definition the
  // two differed by 0.42 (relative) in a running variance after 3 steps.
  TempDir dir;
  for (const int R : {2, 3}) {
    INFO(R << " replicas");
    TrainConfig c1 = replica_config(dir / ("one" + std::to_string(R)), 1, kTinyModel);
    c1.accum = R;
    Trainer one(c1, cpu(DType::f64)),
        many(replica_config(dir / ("many" + std::to_string(R)), R, kTinyModel), cpu(DType::f64));
    std::vector<double> g1, g2;
    one.after_backward = [&](Trainer& t) { g1 = gradients(t); };
    many.after_backward = [&](Trainer& t) { g2 = gradients(t, 1); };
    for (int s = 0; s < 5; s++) {
      const StepResult a = one.step(), b = many.step();
      INFO("step " << s);
      REQUIRE(relative(g2, g1) < 1e-12);
      REQUIRE(std::abs(a.loss - b.loss) < 1e-12);
      REQUIRE(relative(weights(many), weights(one)) < 1e-12);
      const auto& s1 = one.model().batchnorm_states();
      REQUIRE(!s1.empty());
      for (int r = 0; r < R; r++) {
        const auto& sr = many.model(r).batchnorm_states();
        for (size_t i = 0; i < s1.size(); i++) {
          INFO(sr[i].first << ", replica " << r);
          // every replica alike, bit for bit: each makes the same update
          REQUIRE(sr[i].second->running_mean.to_doubles() ==
                  many.model(0).batchnorm_states()[i].second->running_mean.to_doubles());
          REQUIRE(sr[i].second->running_var.to_doubles() ==
                  many.model(0).batchnorm_states()[i].second->running_var.to_doubles());
          REQUIRE(relative(sr[i].second->running_mean.to_doubles(),
                           s1[i].second->running_mean.to_doubles()) < 1e-12);
          REQUIRE(relative(sr[i].second->running_var.to_doubles(),
                           s1[i].second->running_var.to_doubles()) < 1e-12);
        }
      }
    }
  }
}

TEST_CASE("replicas: --sync-bn, R replicas with B/R images each equal one replica with B, "
          "running statistics included") {
  // In double the two are the same computation to rounding (the sums over the batch run in
  // another order: shard by shard, then the ring); in fp32 that order shows as ~1e-6. On the
  // reference kernels: their long sums are blocked pairwise (kernels/blocked_sum.h). oneDNN's
  // filter gradients sum a batch of B and of B/R in fp32 in orders of their own, and through
  // BatchNorm's cancellation that shows as ~1e-3 in conv1's gradient (measured), which would
  // hide what this test looks at. The
  // model has BatchNorm on the input (no dx wanted: the backward's sums still meet), after a
  // convolution (N,H,W,C) and after a linear layer (N,C). (Shards of unequal sizes: the next
  // test's bad files.)
  TempDir dir;
  auto config = [](const std::string& out, int R, bool sync_bn) {
    TrainConfig c = replica_config(out, R, kSyncBnModel);
    c.sync_bn = sync_bn;
    c.conv = c.linear = "direct";
    return c;
  };
  SUBCASE("double") { require_sync_bn_like_one(dir / "f64", config, cpu(DType::f64), {2, 3}, 1e-12); }
  SUBCASE("fp32") { require_sync_bn_like_one(dir / "f32", config, cpu(DType::f32), {2, 3}, 1e-5); }
}

TEST_CASE("replicas: --sync-bn, a step whose shards split into different numbers of "
          "micro-batches (bad files) uses each replica's own statistics, and says so") {
  // One batch of 24 a step, in 2 shards of 2 micro-batches of 6; 11 of the 24 files are not
  // images, so the 13 good ones split unevenly whatever the order: one shard keeps 7 or more
  // (2 micro-batches), the other 6 or fewer (1, or none).
  const FashionMnistFiles& fm = fashion_mnist_jpegs();
  TempDir dir;
  std::ifstream train(fm.train);
  std::string list;
  for (int i = 0; i < 24; i++) {
    if (i % 2 == 1 && i < 22) {
      const std::string bad = dir / ("bad" + std::to_string(i) + ".jpg");
      std::ofstream(bad) << "not an image";
      list += bad + "\t3\n";
      continue;
    }
    std::string line;
    REQUIRE(std::getline(train, line));
    list += fm.dir + "/" + line + "\n";
  }
  write_text(dir / "list.txt", list);
  TrainConfig c = replica_config(dir / "r2", 2, kTinyModel);
  c.train = dir / "list.txt", c.limit_train = 0, c.val = "";
  c.accum = 2, c.sync_bn = true;
  resolve_config(c);
  Trainer t(c, cpu());
  std::vector<std::string> notices;
  t.notice = [&](const std::string& line) { notices.push_back(line); };
  for (int s = 0; s < 2; s++) {
    INFO("step " << s);
    REQUIRE(t.step().images == 13);
    REQUIRE(notices.size() == size_t(s + 1));
    const std::string& n = notices.back();
    REQUIRE(n.rfind("--sync-bn: step " + std::to_string(s + 1) + "'s shards (", 0) == 0);
    REQUIRE(n.find(" images) do not split into the same number of micro-batches of 6, so in "
                   "this step each replica's BatchNorm uses the statistics of its own "
                   "shard") != std::string::npos);
    REQUIRE(t.replicas_difference() == "");  // still alike: the step's one update is averaged
  }
}

TEST_CASE("replicas: every sample exactly once per epoch across the replicas, in the order of one") {
  TempDir dir;
  require_each_sample_once(
      dir.str(), [](const std::string& out, int R) { return replica_config(out, R); }, cpu(),
      {3});
}

TEST_CASE("replicas: an inf on one replica skips the step on all of them") {
  TempDir dir;
  const int R = 3, k = 3;
  const TrainConfig cfg = replica_config(dir / "r3", R, kTinyModel);
  // Run A is clean: step k overflows nowhere by itself (fp16 runs overflow now and then while
  // the scaler searches its scale), so what run B sees comes from the injection alone.
  Trainer a(cfg, cpu(DType::f16)), t(cfg, cpu(DType::f16));
  for (int s = 0; s < k; s++) a.step(), t.step();
  REQUIRE(a.step().taken);
  // After the all-reduce, so only replica 1 holds the inf: the check must be combined.
  t.after_backward = [](Trainer& tr) {
    set_gradient(tr, 1, "conv2.w", 3, std::numeric_limits<float>::infinity());
  };
  const std::vector<double> before = weights(t, 0);
  const double scale = t.step_state().scaler.scale;
  const int64_t taken = t.step_state(0).steps_taken;
  const StepResult r = t.step();
  REQUIRE(!r.taken);
  REQUIRE(r.overflow == "replica 1: conv2.w");
  REQUIRE(t.step_state().scaler.scale == scale / 2);
  for (int i = 0; i < R; i++) {
    REQUIRE(weights(t, i) == before);
    REQUIRE(t.step_state(i).steps_taken == taken);
  }
  REQUIRE(t.replicas_difference() == "");
  t.after_backward = nullptr;
  REQUIRE(t.step().taken);
  REQUIRE(t.replicas_difference() == "");
}

TEST_CASE("replicas: a checkpoint resumes exactly on as many replicas, closely on any other") {
  TempDir dir;
  const int k = 7, N = 14;
  Trainer a(replica_config(dir / "a", 2, kNoBnModel), cpu());
  std::vector<double> losses;
  Checkpoint ck;
  for (int s = 0; s < N; s++) {
    if (s == k) ck = a.snapshot();
    losses.push_back(a.step().loss);
  }
  for (int R : {2, 1, 4}) {
    INFO("resumed on " << R);
    Trainer b(replica_config(dir / ("b" + std::to_string(R)), R, kNoBnModel), cpu());
    b.restore(ck);
    for (int s = k; s < N; s++) {
      const double loss = b.step().loss;
      if (R == 2)
        REQUIRE(loss == losses[size_t(s)]);  // the same sums in the same order: exact
      else
        REQUIRE(std::abs(loss - losses[size_t(s)]) < 1e-5);  // only the order of sums differs
    }
    REQUIRE(relative(weights(b), weights(a)) < 1e-5);
  }
}

TEST_CASE("--check-replicas stops at the first step whose replicas differ, naming it") {
  TempDir dir;
  TrainConfig c = replica_config(dir / "r2", 2);
  c.check_replicas = 1;
  Trainer t(c, cpu());
  t.step();
  t.after_backward = [](Trainer& tr) { tr.model(1).parameters()[0]->value.data<float>()[0] += 1; };
  REQUIRE_ERROR(t.step(), "--check-replicas: after step 1, replica 1 differs from replica 0 "
                          "in 'conv1.w'");
}

TEST_CASE("--devices: replica counts, and what is refused with a reason") {
  TempDir dir;
  TrainConfig c = replica_config(dir / "x", 1);
  REQUIRE(replica_count(c) == 1);
  c.devices = "cpu,cpu,cpu";
  REQUIRE(replica_count(c) == 3);
  validate_config(c);
  c.batch = 25;
  REQUIRE_ERROR(validate_config(c), "--batch 25 is not divisible by the 3 replicas");
  c.batch = 24;
  c.devices = "0,0";  // two replicas on GPU 0 (whether it exists is the Trainer's question)
  validate_config(c);
  c.device = "cpu";
  REQUIRE_ERROR(validate_config(c), "(GPU replicas) contradicts --device cpu");
  c.device = "auto";
  c.devices = "cpu,1";
  REQUIRE_ERROR(validate_config(c), "mixes cpu and GPUs");
  c.devices = "cpu,gpu";
  REQUIRE_ERROR(validate_config(c), "'gpu' is neither cpu nor a GPU ordinal");
  c.devices = "cpu,cpu";
  c.device = "cuda";
  REQUIRE_ERROR(validate_config(c), "contradicts --device cuda");
  // Saved with the configuration, and changeable on resume (any number of replicas).
  c.device = "auto";
  c.check_replicas = 5;
  const TrainConfig back = config_from_json_text(config_to_json_text(c), "test");
  REQUIRE(back.devices == "cpu,cpu");
  REQUIRE(back.check_replicas == 5);
  REQUIRE(may_change_on_resume("devices"));
}

TEST_CASE("replicas: a skipped step names the replica only when not every replica overflowed") {
  auto param = [](int r) { return "conv" + std::to_string(r + 1) + ".w"; };
  REQUIRE(overflow_name({0, 1, 0}, param) == "replica 1: conv2.w");  // after the all-reduce
  REQUIRE(overflow_name({0, 1, 1}, param) == "replica 1: conv2.w");  // the first of them
  // An inf in one replica's backward is averaged into all: the source is not known.
  REQUIRE(overflow_name({1, 1, 1}, param) == "conv1.w");
  REQUIRE(overflow_name({0, 0, 0}, param) == "");
}
