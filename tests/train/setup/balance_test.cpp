// --balance sampler|loss (train/setup/balance.h) on an imbalanced subset of Fashion-MNIST made
// here: the weights and the run's lines; a sampler epoch's exact class counts as the trainer draws
// them; weighted losses; resume of a balanced run bit for bit; the option checked, kept on resume,
// and named by check-data.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include <nlohmann/json.hpp>

#include "tests/data/temp_dir.h"
#include "tests/test_util.h"
#include "tests/train/cli_fixture.h"
#include "tests/train/train_fixture.h"
#include "train/checkpoint/checkpoint.h"
#include "train/engine/batch_input.h"
#include "train/engine/trainer.h"
#include "train/run/run.h"
#include "train/setup/balance.h"

using namespace cutrain;
using namespace cutrain_test;

namespace {

// Per class: 64, 32, 16, 16, 8, 8, 4, 4, 4, 4 of Fashion-MNIST's training images (160, in
// list order), written as a list with classes.txt beside it.
const std::vector<int> kCounts = {64, 32, 16, 16, 8, 8, 4, 4, 4, 4};

std::string imbalanced_list(const std::string& dir) {
  const FashionMnistFiles& fm = fashion_mnist_jpegs();
  ImageList all = read_images(fm.train);
  ImageList some = all;
  some.samples.clear();
  std::vector<int> left = kCounts;
  for (const Sample& s : all.samples)
    if (left[size_t(s.label)] > 0) some.samples.push_back(s), left[size_t(s.label)]--;
  const std::string list = dir + "/imbalanced.txt";
  write_image_list(some, list);
  write_class_names(read_class_names(fm.classes), dir + "/classes.txt");
  return list;
}

// tiny_run_config on the imbalanced list: 5 steps of 32 per epoch.
TrainConfig balanced_config(const std::string& list, const std::string& out, const char* mode,
                            int epochs) {
  TrainConfig c = tiny_run_config(out, 160, epochs);
  c.train = list, c.limit_train = 0, c.log_every = 1000;
  c.balance = mode;
  validate_config(c);
  return c;
}

RunDevice cpu() { return RunDevice{}; }

}  // namespace

TEST_CASE("balance: inverse-frequency weights have mean 1 over the samples; the run's lines") {
  // N = 150 over K = 3 classes with samples: w = 150 / (3 n).
  const std::vector<double> w = inverse_frequency_weights({100, 10, 0, 40});
  REQUIRE(w == std::vector<double>{0.5, 5.0, 0.0, 1.25});
  REQUIRE(100 * w[0] + 10 * w[1] + 40 * w[3] == 150);

  ClassBalance s;
  s.mode = "sampler", s.counts = {100, 10, 0, 40};
  REQUIRE(balance_description(s, {"cat", "dog", "eel", "fox"}) ==
          "--balance sampler: each epoch draws 150 samples, 50 per class of 3 (classes under 50 "
          "repeat samples, larger ones are subsampled); never drawn, having no training "
          "samples: eel");
  s.counts = {100, 11, 40};
  REQUIRE(balance_description(s, {}) ==
          "--balance sampler: each epoch draws 151 samples, 50 per class of 3 (1 of them one "
          "more, in turn) (classes under 50 repeat samples, larger ones are subsampled)");
  ClassBalance l;
  l.mode = "loss", l.counts = {100, 10, 0, 40}, l.weights = w;
  REQUIRE(balance_description(l, {"cat", "dog", "eel", "fox"}) ==
          "--balance loss: class weights N / (3 n_k), mean 1 over the training samples, in the "
          "training loss only (evaluation is unweighted): cat 0.5, dog 5, eel 0, fox 1.25; "
          "weight 0, having no training samples: eel");
  // Many classes: the range. N = 18 * 10 + 40 + 5 = 225, K = 20: 225 / 800 and 225 / 100.
  l.counts.assign(20, 10), l.counts[3] = 40, l.counts[7] = 5;
  l.weights = inverse_frequency_weights(l.counts);
  REQUIRE(balance_description(l, {}).find("from 0.281 (class 3) to 2.25 (class 7)") !=
          std::string::npos);
  REQUIRE(balance_description(ClassBalance{}, {}).empty());
}

TEST_CASE("balance: --balance checked, kept in config.json, not changed on resume") {
  TrainConfig c;
  c.train = "x", c.balance = "oversample";
  REQUIRE_USER_ERROR(validate_config(c), "--balance oversample: expected none, sampler or loss");
  c.balance = "loss";
  const TrainConfig back = config_from_json_text(config_to_json_text(c), "config.json");
  REQUIRE(back.balance == "loss");
  nlohmann::json old = c;  // a checkpoint from before the option: none
  old.erase("balance");
  REQUIRE(config_from_json_text(old.dump(), "old.json").balance == "none");
  TrainConfig cli = c;
  cli.balance = "sampler";
  REQUIRE_USER_ERROR(resume_config(c, cli, {"balance"}),
                     "--balance \"sampler\" differs from the checkpoint's \"loss\"");
}

TEST_CASE("balance sampler: every epoch the trainer draws 16 of each class; resume is exact") {
  TempDir dir;
  const std::string list = imbalanced_list(dir.path());
  const TrainConfig cfg = balanced_config(list, dir / "run", "sampler", 4);  // 20 steps
  Trainer a(cfg, cpu());
  REQUIRE(a.steps_per_epoch() == 5);
  REQUIRE(a.balance().counts == std::vector<int64_t>(kCounts.begin(), kCounts.end()));
  std::map<int64_t, std::vector<int>> per_class;    // epoch -> draws per class
  std::map<int64_t, std::map<int64_t, int>> times;  // epoch -> sample -> its draws
  std::map<int64_t, int32_t> label;                 // sample -> class
  a.on_shard = [&](int, const Batch& b) {
    std::vector<int>& n = per_class[b.where.epoch];
    n.resize(10);
    for (int k = 0; k < b.n; k++) {
      n[size_t(b.labels[k])]++;
      times[b.where.epoch][b.indices[k]]++;
      label[b.indices[k]] = b.labels[k];
    }
  };
  const int k = 8, N = 20;  // the checkpoint mid-epoch: epoch 1, batch 3
  std::vector<double> losses;
  for (int s = 0; s < N; s++) {
    if (s == k) write_checkpoint(a.snapshot(), dir / "k.h5");
    losses.push_back(a.step().loss);
  }
  REQUIRE(per_class.size() == 4);
  for (const auto& [epoch, n] : per_class) {
    INFO("epoch " << epoch);
    REQUIRE(n == std::vector<int>(10, 16));  // 160 draws, 16 per class, every epoch
    // 16 draws of a class of n samples: each drawn 16 / n times (classes 2..9), or a subset
    // of 16 drawn once (classes 0 and 1, 64 and 32 samples).
    for (const auto& [i, t] : times[epoch]) {
      const int n_k = kCounts[size_t(label[i])];
      INFO("sample " << i << " of class " << label[i]);
      REQUIRE(t == (n_k >= 16 ? 1 : 16 / n_k));
    }
  }
  const Checkpoint ck = read_checkpoint(dir / "k.h5");
  REQUIRE(ck.cursor == SamplerCursor{1, 3});
  Trainer b(config_from_json_text(ck.config_json, "k.h5"), cpu());
  REQUIRE(b.config().balance == "sampler");
  b.restore(ck);
  for (int s = k; s < N; s++) {
    INFO("step " << s);
    REQUIRE(b.step().loss == losses[size_t(s)]);  // exactly: the same balanced batches
  }
  require_same_state(a.snapshot(), b.snapshot());

  // The unbalanced run of the same data trains on other batches.
  Trainer plain(balanced_config(list, dir / "plain", "none", 4), cpu());
  REQUIRE(plain.step().loss != losses[0]);
}

TEST_CASE("balance loss: weights 160 / (10 n_k) in the loss; resume is exact") {
  TempDir dir;
  const std::string list = imbalanced_list(dir.path());
  const TrainConfig cfg = balanced_config(list, dir / "run", "loss", 4);
  Trainer a(cfg, cpu());
  const std::vector<double> w = a.balance().weights;
  REQUIRE(w.size() == 10);
  REQUIRE(w[0] == 0.25);  // 160 / (10 * 64)
  REQUIRE(w[9] == 4.0);   // 160 / (10 * 4)
  // The first step's loss against its definition, (1/B) sum_i w_{y_i} l_i, with l_i the
  // smoothed cross-entropy of sample i computed here in double from the logits of a twin of
  // the initial model (the same seed) on the same micro-batches of 16 (BatchNorm sees each on
  // its own). The same sum without weights must give the unweighted run's first loss.
  Trainer twin(cfg, cpu());
  const TrainConfig& c = twin.config();
  double want = 0, want_plain = 0;
  const InputNorm norm(Normalization{c.mean, c.std});
  a.on_shard = [&](int, const Batch& b) {
    for (int begin = 0; begin < b.n; begin += 16) {
      const int n = std::min(16, b.n - begin);
      Tape tape;
      const Tensor x = model_input(b, begin, n, norm, DType::f32, Context::cpu()).x;
      const std::vector<double> z =
          twin.model().forward(tape, make_var(x), true)->value.to_doubles();  // (n,10)
      for (int i = 0; i < n; i++) {
        const double* row = z.data() + size_t(i) * 10;
        const int y = b.labels[begin + i];
        double m = row[0], sum = 0, l = 0;
        for (int k = 1; k < 10; k++) m = std::max(m, row[k]);
        for (int k = 0; k < 10; k++) sum += std::exp(row[k] - m);
        for (int k = 0; k < 10; k++) {
          const double q = (1 - c.label_smoothing) * (k == y) + c.label_smoothing / 10;
          l -= q * (row[k] - m - std::log(sum));
        }
        want += w[size_t(y)] * l / b.n;
        want_plain += l / b.n;
      }
    }
  };
  Trainer plain(balanced_config(list, dir / "plain", "none", 4), cpu());
  std::vector<double> losses = {a.step().loss};
  a.on_shard = nullptr;
  REQUIRE(std::fabs(losses[0] - want) <= 1e-5 * want);
  const double plain_loss = plain.step().loss;  // the same batch, unweighted
  REQUIRE(std::fabs(plain_loss - want_plain) <= 1e-5 * want_plain);
  REQUIRE(std::fabs(want - want_plain) > 0.01);  // the weights do change the loss
  const int k = 12, N = 20;
  for (int s = 1; s < N; s++) {
    if (s == k) write_checkpoint(a.snapshot(), dir / "k.h5");
    losses.push_back(a.step().loss);
  }
  const Checkpoint ck = read_checkpoint(dir / "k.h5");
  Trainer b(config_from_json_text(ck.config_json, "k.h5"), cpu());
  b.restore(ck);
  for (int s = k; s < N; s++) {
    INFO("step " << s);
    REQUIRE(b.step().loss == losses[size_t(s)]);
  }
  require_same_state(a.snapshot(), b.snapshot());
}

TEST_CASE("balance: a run says what it balances; check-data names the options") {
  TempDir dir;
  const std::string list = imbalanced_list(dir.path());
  RunLog log(dir / "log");
  const RunSummary s = run_training(balanced_config(list, dir / "s", "sampler", 1), {}, log.f);
  REQUIRE(s.steps == 5);
  REQUIRE(log.text().find("--balance sampler: each epoch draws 160 samples, 16 per class of 10 "
                          "(classes under 16 repeat samples, larger ones are subsampled)\n") !=
          std::string::npos);
  run_training(balanced_config(list, dir / "l", "loss", 1), {}, log.f);
  REQUIRE(log.text().find("--balance loss: class weights N / (10 n_k), mean 1 over the training "
                          "samples, in the training loss only (evaluation is unweighted): "
                          "T-shirt/top 0.25, Trouser 0.5, Pullover 1, Dress 1, Coat 2, Sandal 2, "
                          "Shirt 4, Sneaker 4, Bag 4, Ankle boot 4\n") != std::string::npos);
  // A resumed run keeps it, and refuses another.
  TrainConfig more;
  more.resume = dir / "s", more.epochs = 2;
  REQUIRE(run_training(more, {"resume", "epochs"}, log.f).steps == 10);
  more.balance = "loss";
  REQUIRE_USER_ERROR(run_training(more, {"resume", "epochs", "balance"}, log.f),
                     "--balance \"loss\" differs from the checkpoint's \"sampler\"");

  const Ran bad = run_cutrain({"train", "--train", list, "--balance", "classes"}, dir / "bad.log");
  REQUIRE(bad.status == 2);
  REQUIRE(bad.output.find("--balance classes: expected none, sampler or loss") !=
          std::string::npos);
  const Ran check = run_cutrain({"check-data", list, "--threads", "2"}, dir / "check.log");
  INFO(check.output);
  REQUIRE(check.status == 0);
  REQUIRE(check.output.find("imbalance (largest / smallest class): 16.00  <- consider cutrain "
                            "train --balance sampler (re-sampling) or --balance loss "
                            "(re-weighting)") != std::string::npos);
}
