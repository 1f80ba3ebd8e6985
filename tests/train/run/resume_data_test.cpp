// --resume after the training data changed: refused, saying what changed; with
// --allow-data-change the run goes on from the next epoch over the new data, saying so.
#include <cstdio>
#include <fstream>

#include "tests/data/temp_dir.h"
#include "tests/test_util.h"
#include "tests/train/train_fixture.h"
#include "train/checkpoint/checkpoint.h"
#include "train/run/run.h"

using namespace cutrain;
using namespace cutrain_test;

namespace {

// The first n samples of the Fashion-MNIST training list, as a list file of our own.
void write_subset(const std::string& path, int n, int relabel = -1) {
  ImageList all = read_images(fashion_mnist_jpegs().train);
  all.samples.resize(size_t(n));
  if (relabel >= 0) all.samples[size_t(relabel)].label = (all.samples[size_t(relabel)].label + 1) % 10;
  write_image_list(all, path);
}

TrainConfig resume_of(const std::string& run, int epochs) {
  TrainConfig c;
  c.resume = run;
  c.epochs = epochs;
  return c;
}

}  // namespace

TEST_CASE("resume: changed training data are refused, naming the change; or taken at an epoch") {
  TempDir dir;
  const std::string list = dir / "train.txt", run = dir / "run";
  write_subset(list, 96);
  TrainConfig c = tiny_run_config(run, 96, 1);  // 3 steps of 32: a checkpoint at step 3
  c.train = list, c.limit_train = 0, c.val.clear(), c.limit_val = 0, c.log_every = 1000;
  RunLog log(dir / "log");
  REQUIRE(run_training(c, {}, log.f).steps == 3);
  const std::vector<std::string> given = {"resume", "epochs"};

  // The same count, one label changed.
  write_subset(list, 96, 40);
  REQUIRE_USER_ERROR(run_training(resume_of(run, 3), given, log.f),
                     "the training data changed since the checkpoint of step 3 (the first "
                     "difference is in sample 40). A resumed run continues the same computation");
  // More samples (the old main went on silently), fewer samples: refused too.
  write_subset(list, 128);
  REQUIRE_USER_ERROR(run_training(resume_of(run, 3), given, log.f),
                     "(96 samples then, 128 now; the first difference is in sample 96)");
  write_subset(list, 64);
  REQUIRE_USER_ERROR(run_training(resume_of(run, 3), given, log.f), "96 samples then, 64 now");

  // Taken on purpose: from the next epoch (2 of 3) at its step, over the new data. 64 samples
  // make 2 steps an epoch: step 2, below the checkpoint's 3, so not into the same folder.
  REQUIRE_USER_ERROR(run_training(resume_of(run, 3), given, log.f, true),
                     "continue into another folder with --out");
  TrainConfig elsewhere = resume_of(run, 3);
  elsewhere.out = dir / "run2";
  const RunSummary s = run_training(elsewhere, {"resume", "epochs", "out"}, log.f, true);
  REQUIRE(s.first_step == 2);
  REQUIRE(s.steps == 6);
  REQUIRE(log.text().find("--allow-data-change: the training data changed (96 samples then, 64 "
                          "now; the first difference is in sample 64); the run goes on "
                          "from epoch 2 of 3 (step 2, 2 steps an epoch) in a fresh order") !=
          std::string::npos);
  // The new run's checkpoints keep the new data's fingerprint: it resumes plainly.
  TrainConfig more = resume_of(dir / "run2", 4);
  REQUIRE(run_training(more, {"resume", "epochs"}, log.f).steps == 8);

  // The same count, a label fixed: the next epoch starts at the checkpoint's own step 3, so
  // the same folder is fine.
  write_subset(list, 96, 40);
  const RunSummary same = run_training(resume_of(run, 3), given, log.f, true);
  REQUIRE(same.first_step == 3);
  REQUIRE(same.steps == 9);
  // Unchanged data with the option: an exact resume, said so.
  const RunSummary exact = run_training(resume_of(run, 4), given, log.f, true);
  REQUIRE(exact.first_step == 9);
  REQUIRE(exact.steps == 12);
  REQUIRE(log.text().find("--allow-data-change: the training data are the checkpoint's: the "
                          "run goes on exactly") != std::string::npos);
}
