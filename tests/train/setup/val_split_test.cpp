// --val-split: validation data held out of --train, stratified by class and fixed by the seed;
// the run, its resume and `cutrain eval` without --data all see the same split.
#include <algorithm>
#include <cstdio>
#include <set>

#include "tests/data/temp_dir.h"
#include "tests/test_util.h"
#include "tests/train/cli_fixture.h"
#include "tests/train/train_fixture.h"
#include "train/run/run.h"
#include "train/setup/resolve.h"
#include "train/setup/sources.h"
#include "train/setup/val_split.h"

using namespace cutrain;
using namespace cutrain_test;

namespace {

// Labels only: held_out_split never decodes.
class Labels : public SampleSource {
 public:
  explicit Labels(std::vector<int32_t> labels) : labels_(std::move(labels)) {}
  int64_t size() const override { return int64_t(labels_.size()); }
  int32_t label(int64_t i) const override { return labels_[size_t(i)]; }
  std::string name(int64_t i) const override { return "s" + std::to_string(i); }
  const ImageSpec& spec() const override { return spec_; }
  DecodeResult load(int64_t, uint64_t, uint8_t*, InputCrop&, StageTimes&) const override {
    return DecodeResult();
  }

 private:
  std::vector<int32_t> labels_;
  ImageSpec spec_;
};

// Class k has counts[k] samples, interleaved (as a shuffled list would be).
Labels make_labels(const std::vector<int>& counts) { return Labels(interleaved_labels(counts)); }

std::vector<int> per_class(const SampleSource& s, const std::vector<int64_t>& idx, size_t K) {
  std::vector<int> n(K, 0);
  for (int64_t i : idx) n[size_t(s.label(i))]++;
  return n;
}

// The ranks within class k (0 = its first sample in source order) of the members of idx.
std::vector<int64_t> ranks(const SampleSource& s, const std::vector<int64_t>& idx, int32_t k) {
  std::vector<int64_t> rank(size_t(s.size()), -1), out;
  for (int64_t i = 0, r = 0; i < s.size(); i++)
    if (s.label(i) == k) rank[size_t(i)] = r++;
  for (int64_t i : idx)
    if (s.label(i) == k) out.push_back(rank[size_t(i)]);
  return out;
}

}  // namespace

TEST_CASE("val split: stratified round(f * n) per class, every class keeps a sample, pure") {
  // Classes of 100, 10, 5, 2 and 1 samples.
  const Labels s = make_labels({100, 10, 5, 2, 1});
  const HeldOutSplit a = held_out_split(s, 0.2, 7);
  // round(0.2 n), at most n - 1, none from a class of one: 20, 2, 1, 0 (round(0.4)), 0.
  REQUIRE(per_class(s, a.val, 5) == std::vector<int>{20, 2, 1, 0, 0});
  REQUIRE(per_class(s, a.train, 5) == std::vector<int>{80, 8, 4, 2, 1});
  // Disjoint, complete, each in source order.
  std::vector<int64_t> all = a.train;
  all.insert(all.end(), a.val.begin(), a.val.end());
  std::sort(all.begin(), all.end());
  for (size_t i = 0; i < all.size(); i++) REQUIRE(all[i] == int64_t(i));
  REQUIRE(std::is_sorted(a.train.begin(), a.train.end()));
  REQUIRE(std::is_sorted(a.val.begin(), a.val.end()));
  // A pure function of (labels, fraction, seed); another seed holds out other samples.
  REQUIRE(held_out_split(s, 0.2, 7).val == a.val);
  const HeldOutSplit b = held_out_split(s, 0.2, 8);
  REQUIRE(per_class(s, b.val, 5) == per_class(s, a.val, 5));
  REQUIRE(b.val != a.val);
  // Not simply the first samples of each class.
  std::vector<int64_t> first;
  for (int64_t i = 0, taken = 0; i < s.size() && taken < 20; i++)
    if (s.label(i) == 0) first.push_back(i), taken++;
  std::vector<int64_t> val0;
  for (int64_t i : a.val)
    if (s.label(i) == 0) val0.push_back(i);
  REQUIRE(val0 != first);
  // A large fraction still leaves every class one training sample.
  REQUIRE(per_class(s, held_out_split(s, 0.9, 7).train, 5) == std::vector<int>{10, 1, 1, 1, 1});
  // A class that grows by one sample changes its own split only: each class has its own
  // permutation, so the others hold out the same members (by their rank within the class).
  const Labels grown = make_labels({100, 11, 5, 2, 1});
  const HeldOutSplit g = held_out_split(grown, 0.2, 7);
  REQUIRE(per_class(grown, g.val, 5) == std::vector<int>{20, 2, 1, 0, 0});
  for (int32_t k : {0, 2}) REQUIRE(ranks(grown, g.val, k) == ranks(s, a.val, k));
}

TEST_CASE("val split: options checked; the run, its resume and eval use the same held-out part") {
  TempDir dir;
  const std::string run = dir / "run";
  TrainConfig c = tiny_run_config(run, 160, 1);
  c.val.clear(), c.limit_val = 0, c.log_every = 1000;

  TrainConfig both = c;
  both.val = fashion_mnist_jpegs().test, both.val_split = 0.2;
  REQUIRE_USER_ERROR(validate_config(both), "--val-split holds validation data out of --train");
  TrainConfig big = c;
  big.val_split = 0.95;
  REQUIRE_USER_ERROR(validate_config(big), "--val-split must be a finite number in [0, 0.9]");

  // 160 Fashion-MNIST images: the held-out part is about 20% of each class.
  c.val_split = 0.2;
  const HeldOutSplit split =
      held_out_split(*open_source(c.train, eval_image_spec(c), 160), 0.2, c.seed);
  REQUIRE(split.val.size() >= 28);
  REQUIRE(split.val.size() <= 36);
  REQUIRE(open_train_source(c, train_image_spec(c))->size() == int64_t(split.train.size()));
  RunLog log(dir / "log");
  const RunSummary one = run_training(c, {}, log.f);
  REQUIRE(one.final_eval.images == int64_t(split.val.size()));
  REQUIRE(log.text().find("validation: " + std::to_string(split.val.size()) +
                          " images, 20% of " + c.train +
                          " held out (--val-split 0.2, stratified, seed 7)") != std::string::npos);

  // Resumed for a second epoch: the same split, since the checkpoint's configuration holds
  // --val-split and --seed.
  TrainConfig more;
  more.resume = run, more.epochs = 2;
  const RunSummary resumed = run_training(more, {"resume", "epochs"}, log.f);
  REQUIRE(resumed.steps == 2 * one.steps);
  REQUIRE(resumed.final_eval.images == int64_t(split.val.size()));

  // `cutrain eval` without --data: the run's held-out part, the run's own numbers.
  const Ran e = run_cutrain({"eval", "--checkpoint", resumed.last_checkpoint, "--threads", "2"},
                            dir / "eval.log");
  INFO(e.output);
  REQUIRE(e.status == 0);
  REQUIRE(e.output.find("eval: 20% of " + c.train + " held out (--val-split 0.2, stratified, "
                        "seed 7) (" + std::to_string(split.val.size()) + " images)") !=
          std::string::npos);
  char top1[64];
  std::snprintf(top1, sizeof top1, "top-1 %.2f%%", 100 * resumed.final_eval.top1_accuracy());
  REQUIRE(e.output.find(top1) != std::string::npos);
}

TEST_CASE("val split: eval without --data refuses a changed training list, or a run without validation") {
  TempDir dir;
  // A list of our own, so that it can change.
  ImageList all = read_images(fashion_mnist_jpegs().train);
  all.samples.resize(96);
  const std::string list = dir / "train.txt";
  write_image_list(all, list);
  TrainConfig c = tiny_run_config(dir / "run", 96, 1);
  c.train = list, c.limit_train = 0, c.val.clear(), c.limit_val = 0, c.log_every = 1000;
  c.val_split = 0.25;
  RunLog log(dir / "log");
  run_training(c, {}, log.f);
  all.samples.resize(95);
  write_image_list(all, list);
  const Ran e = run_cutrain({"eval", "--checkpoint", dir / "run"}, dir / "eval.log");
  REQUIRE(e.status == 2);
  REQUIRE(e.output.find(list + " changed since") != std::string::npos);
  REQUIRE(e.output.find("so the part --val-split held out is not the same: give --data") !=
          std::string::npos);

  TrainConfig none = tiny_run_config(dir / "plain", 64, 1);
  none.val.clear(), none.limit_val = 0, none.log_every = 1000;
  run_training(none, {}, log.f);
  const Ran n = run_cutrain({"eval", "--checkpoint", dir / "plain"}, dir / "eval2.log");
  REQUIRE(n.status == 2);
  REQUIRE(n.output.find("its run had no validation data (neither --val nor --val-split): give "
                        "--data") != std::string::npos);
}
