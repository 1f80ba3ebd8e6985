// The one-file trainer (train/minimal/train_minimal.cpp, bin/cutrain_minimal) trains exactly as
// `cutrain train` with one replica and the same flags: every step's loss and every tensor of
// its checkpoints equal bit for bit, on real Fashion-MNIST JPEGs, both programs run as real
// processes with fixed thread counts (one decode thread, one compute thread); its checkpoint
// is one `cutrain eval` and `cutrain predict` accept; a changed flag shows in the losses (the
// comparison can fail); flags it does not take are refused, never ignored.
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "tests/test_util.h"
#include "tests/train/cli_fixture.h"
#include "tests/train/fashion_mnist_data.h"
#include "tests/train/replicas/mpi_fixture.h"  // step_losses
#include "tests/train/train_fixture.h"         // tiny_model
#include "train/checkpoint/checkpoint.h"

using namespace cutrain;
using namespace cutrain_test;

namespace {

std::string minimal_exe() { return (bin_dir() / "cutrain_minimal").string(); }

Ran run_minimal(const std::vector<std::string>& args, const std::string& log) {
  std::vector<std::string> all = {minimal_exe()};
  all.insert(all.end(), args.begin(), args.end());
  return run_process(all, log);
}

std::vector<std::string> with(std::vector<std::string> args, const std::vector<std::string>& more) {
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

// The losses cutrain_minimal printed, one a step ("step 3/12  loss 2.13083673  lr ..."): the
// float the step computed, in 9 significant digits (enough to read back the same float).
std::vector<float> printed_losses(const std::string& output) {
  std::vector<float> out;
  for (size_t at = output.find("\nstep "); at != std::string::npos;
       at = output.find("\nstep ", at + 1))
    out.push_back(std::strtof(output.c_str() + output.find("loss ", at) + 5, nullptr));
  return out;
}

// cutrain train's losses (its metrics file: doubles holding the step's float loss) against
// cutrain_minimal's, bit for bit.
void require_same_losses(const std::string& metrics, const std::string& output, size_t steps) {
  const std::vector<std::string> want = step_losses(metrics);
  const std::vector<float> got = printed_losses(output);
  REQUIRE(want.size() == steps);
  REQUIRE(got.size() == steps);
  for (size_t i = 0; i < steps; i++) {
    INFO("step " << i + 1 << ": cutrain train " << want[i] << ", cutrain_minimal " << got[i]);
    const double w = std::strtod(want[i].c_str(), nullptr);
    REQUIRE(double(float(w)) == w);  // a float's value, as the step computed it
    const float wf = float(w);
    REQUIRE(std::memcmp(&wf, &got[i], sizeof(float)) == 0);
  }
}

// Every tensor of cutrain_minimal's checkpoint is in cutrain train's of the same step, with
// the same name, in the same order, of the same dtype, shape and bytes (cutrain train's has
// nothing more: the same list); the step, epoch, cursor and seed, and the loss scaler's
// scalars, equal.
void require_same_checkpoint(const std::string& minimal, const std::string& train) {
  INFO(minimal << " against " << train);
  const Checkpoint a = read_checkpoint(minimal), b = read_checkpoint(train);
  REQUIRE(a.tensors.size() == b.tensors.size());
  for (size_t i = 0; i < a.tensors.size(); i++) {
    INFO("tensor " << a.tensors[i].first);
    REQUIRE(a.tensors[i].first == b.tensors[i].first);
    const Tensor &x = a.tensors[i].second, &y = b.tensors[i].second;
    REQUIRE(x.shape() == y.shape());
    REQUIRE(x.dtype() == y.dtype());
    REQUIRE(std::memcmp(x.raw(), y.raw(), x.bytes()) == 0);
  }
  REQUIRE(a.step == b.step);
  REQUIRE(a.epoch == b.epoch);
  REQUIRE(a.cursor == b.cursor);
  REQUIRE(a.seed == b.seed);
  REQUIRE(a.scalars.size() == 5);
  for (const auto& [name, value] : a.scalars) {
    INFO("scalar " << name);
    REQUIRE(b.scalars.count(name) == 1);
    REQUIRE(b.scalars.at(name) == value);
  }
}

}  // namespace

TEST_CASE("cutrain_minimal: the default model and recipe in fp32, step by step and checkpoint "
          "by checkpoint bit for bit as cutrain train; eval and predict take its checkpoint") {
  const FashionMnistFiles& fm = fashion_mnist_jpegs();
  TempDir dir;
  // 2 epochs of 6 steps of 32 images: the warm-up (one epoch) and the cosine decay, label
  // smoothing, SGD with momentum and weight decay, BatchNorm's statistics, the validation set.
  const std::vector<std::string> flags = {
      "--train", fm.train, "--limit-train", "192", "--val", fm.test, "--limit-val", "100",
      "--batch", "32", "--epochs", "2", "--seed", "3", "--device", "cpu",
      "--threads", "1", "--compute-threads", "1"};
  const std::string mine = dir / "minimal", theirs = dir / "train";
  const Ran m = run_minimal(with(flags, {"--out", mine}), dir / "minimal.log");
  INFO(m.output);
  REQUIRE(m.status == 0);
  const Ran t = run_cutrain(with(with({"train"}, flags), {"--out", theirs, "--log-every", "1"}),
                            dir / "train.log");
  INFO(t.output);
  REQUIRE(t.status == 0);
  require_same_losses(theirs + "/metrics.jsonl", m.output, 12);
  for (const char* file : {"/step-00000006.h5", "/step-00000012.h5"})
    require_same_checkpoint(mine + file, theirs + file);

  // Each epoch's validation top-1 is the one cutrain train printed; cutrain eval on the run
  // folder (its newest checkpoint, step 12) repeats the last.
  auto top1_after = [](const std::string& out, const std::string& mark) {
    const size_t at = out.find("top-1 ", out.find(mark));
    return at == std::string::npos ? "none" : out.substr(at + 6, out.find('%', at) - at - 6);
  };
  REQUIRE(top1_after(m.output, "epoch 1: validation") == top1_after(t.output, "epoch 1/2  train"));
  REQUIRE(top1_after(m.output, "epoch 2: validation") == top1_after(t.output, "epoch 2/2  train"));
  const Ran e = run_cutrain({"eval", "--checkpoint", mine, "--data", fm.test, "--limit", "100",
                             "--threads", "1"}, dir / "eval.log");
  INFO(e.output);
  REQUIRE(e.status == 0);
  REQUIRE(e.output.find("step-00000012.h5: step 12, epoch 2, default") != std::string::npos);
  REQUIRE(top1_after(e.output, "eval: ") == top1_after(m.output, "epoch 2: validation"));
  std::ifstream list(fm.test);
  std::string first;
  std::getline(list, first);  // "test/9/00000.jpg<TAB>9"
  const std::string image = (std::filesystem::path(fm.test).parent_path() /
                             first.substr(0, first.find('\t'))).string();
  const Ran p = run_cutrain({"predict", "--checkpoint", mine, image, "--top", "3"},
                            dir / "predict.log");
  INFO(p.output);
  REQUIRE(p.status == 0);
  REQUIRE(p.output.find("  3. ") != std::string::npos);  // three classes with probabilities
}

TEST_CASE("cutrain_minimal: fp16 with its loss scale, augmented, every recipe flag given: bit "
          "for bit as cutrain train; a changed learning rate shows from the second step") {
  const FashionMnistFiles& fm = fashion_mnist_jpegs();
  TempDir dir;
  // The tiny model, its activations, gradients and working weights in fp16 on the CPU (IEEE
  // half, emulated): the fp32 masters, the loss scale of 2^16 and the unscaling.
  const std::vector<std::string> flags = {
      "--train", fm.train, "--limit-train", "160", "--model", tiny_model(dir), "--batch", "32",
      "--epochs", "2", "--precision", "fp16", "--augment", "--lr", "0.2", "--momentum", "0.8",
      "--wd", "0.001", "--warmup", "0.5", "--label-smoothing", "0.05", "--seed", "4",
      "--device", "cpu", "--threads", "1", "--compute-threads", "1"};
  const std::string mine = dir / "minimal", theirs = dir / "train";
  const Ran m = run_minimal(with(flags, {"--out", mine}), dir / "minimal.log");
  INFO(m.output);
  REQUIRE(m.status == 0);
  REQUIRE(m.output.find("scale 65536") != std::string::npos);
  const Ran t = run_cutrain(with(with({"train"}, flags), {"--out", theirs, "--log-every", "1"}),
                            dir / "train.log");
  INFO(t.output);
  REQUIRE(t.status == 0);
  require_same_losses(theirs + "/metrics.jsonl", m.output, 10);
  require_same_checkpoint(mine + "/step-00000010.h5", theirs + "/step-00000010.h5");

  // The comparison can fail: --lr 0.21 takes the same first step's loss (the same weights and
  // batch) and another from the second step on.
  const Ran other = run_minimal(with(flags, {"--out", dir / "other", "--lr", "0.21"}),
                                dir / "other.log");
  REQUIRE(other.status == 0);
  const std::vector<float> a = printed_losses(m.output), b = printed_losses(other.output);
  REQUIRE(a.size() == 10);
  REQUIRE(b.size() == 10);
  REQUIRE(a[0] == b[0]);
  for (size_t i = 1; i < a.size(); i++) REQUIRE(a[i] != b[i]);
}

TEST_CASE("cutrain_minimal: a flag it does not take, or a bad value, is refused with exit "
          "status 2 and a plain message") {
  TempDir dir;
  const std::string list = fashion_mnist_jpegs().train;
  struct Case {
    std::vector<std::string> args;
    std::string says;
  };
  const std::vector<Case> cases = {
      {{"--train", list, "--ema", "0.99"},
       "cutrain_minimal: unknown option '--ema': this one-file trainer takes --augment --batch"},
      {{"--train", list, "--batch", "3.5"},
       "cutrain_minimal: --batch takes a whole number, not '3.5'"},
      {{"--train", list, "--lr", "fast"}, "cutrain_minimal: --lr takes a number, not 'fast'"},
      {{"--train", list, "--epochs"}, "cutrain_minimal: --epochs needs a value"},
      {{"--train", "--epochs", "1"}, "cutrain_minimal: --train needs a value"},
      {{"--limit-train", "10"}, "--train is required"},
      {{"--train", list, "--limit-train", "64", "--batch", "128"},
       "cutrain_minimal: --batch 128 is larger than the 64 training images"}};
  for (const Case& c : cases) {
    const Ran r = run_minimal(with({"--out", dir / "out"}, c.args), dir / "refused.log");
    INFO(r.output);
    REQUIRE(r.status == 2);
    REQUIRE(r.output.find(c.says) != std::string::npos);
    REQUIRE(r.output.find("internal error") == std::string::npos);
  }
}
