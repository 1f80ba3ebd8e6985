// Classes matched by name: a validation list, `cutrain eval --data` and `cutrain predict
// --list` whose classes.txt names the model's classes in another order are read by name; a
// name the model lacks, or another set of names, is refused with both lists; data without
// names are read as indices, checked against the model's class count.
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "tests/data/temp_dir.h"
#include "tests/test_util.h"
#include "tests/train/cli_fixture.h"
#include "tests/train/train_fixture.h"
#include "train/run/run.h"
#include "train/setup/classes.h"
#include "train/setup/resolve.h"

using namespace cutrain;
using namespace cutrain_test;

namespace {

// Real Fashion-MNIST JPEGs of one label, the first n of the training list.
std::vector<std::string> images_of(int32_t label, int n) {
  std::vector<std::string> out;
  for (const Sample& s : read_images(fashion_mnist_jpegs().train).samples)
    if (s.label == label && int(out.size()) < n) out.push_back(s.path);
  return out;
}

void write_lines(const std::string& path, const std::vector<std::string>& lines) {
  std::ofstream f(path);
  for (const std::string& l : lines) f << l << "\n";
}

struct Data {
  std::string train_dir, val_list, val_classes;
};

// Training: a folder per class, bag/ coat/ shoe/ (so classes 0, 1, 2 in that order), 32 images
// each. Validation: a list whose classes.txt says shoe, bag, coat (so its label 0 is "shoe"):
// 3 shoes, 5 bags and 2 coats.
Data make_data(const TempDir& dir) {
  namespace fs = std::filesystem;
  Data d;
  d.train_dir = dir / "train";
  const std::vector<std::pair<std::string, int32_t>> classes = {{"bag", 8}, {"coat", 4}, {"shoe", 7}};
  for (const auto& [name, label] : classes) {
    fs::create_directories(d.train_dir + "/" + name);
    int i = 0;
    for (const std::string& src : images_of(label, 32))
      fs::copy_file(src, d.train_dir + "/" + name + "/" + std::to_string(i++) + ".jpg");
  }
  fs::create_directories(dir / "val");
  d.val_list = dir / "val/val.txt";
  d.val_classes = dir / "val/classes.txt";
  write_lines(d.val_classes, {"shoe", "bag", "coat"});
  // Images 40 on of each label: not among the 32 training images.
  std::vector<std::string> kept;
  const std::vector<std::pair<int32_t, int>> val = {{7, 3}, {8, 5}, {4, 2}};  // shoe, bag, coat
  for (size_t k = 0; k < val.size(); k++) {
    const std::vector<std::string> imgs = images_of(val[k].first, 40 + val[k].second);
    for (size_t j = 40; j < imgs.size(); j++) kept.push_back(imgs[j] + "\t" + std::to_string(k));
  }
  write_lines(d.val_list, kept);
  return d;
}

TrainConfig config_for(const Data& d, const std::string& out) {
  TrainConfig c;
  c.train = d.train_dir, c.val = d.val_list;
  c.model = "tiny", c.model_text = kTinyModel;
  c.batch = 32, c.epochs = 1, c.lr = 0.05, c.warmup = 0.4, c.seed = 7, c.threads = 2;
  c.log_every = 1000, c.out = out;
  resolve_config(c);
  return c;
}

}  // namespace

TEST_CASE("class names: a validation list named in another order is scored by name") {
  TempDir dir;
  const Data d = make_data(dir);
  const TrainConfig c = config_for(d, dir / "run");
  REQUIRE(c.class_names == std::vector<std::string>{"bag", "coat", "shoe"});
  RunLog log(dir / "log");
  const RunSummary s = run_training(c, {}, log.f);
  // Per model class (bag, coat, shoe): 5, 2 and 3 images. By index they would be 3, 5, 2.
  REQUIRE(s.final_eval.class_images == std::vector<int64_t>{5, 2, 3});

  // eval --data on the same list: the same counts, under the right names.
  const Ran e = run_cutrain({"eval", "--checkpoint", s.last_checkpoint, "--data", d.val_list},
                            dir / "eval.log");
  INFO(e.output);
  REQUIRE(e.status == 0);
  REQUIRE(e.output.find("(10 images") != std::string::npos);
  for (const char* name : {"bag", "coat", "shoe"}) REQUIRE(e.output.find(name) != std::string::npos);
  char top1[64];
  std::snprintf(top1, sizeof top1, "top-1 %.2f%%", 100 * s.final_eval.top1_accuracy());
  REQUIRE(e.output.find(top1) != std::string::npos);

  // predict --list: each image's label shown by its name.
  const Ran p = run_cutrain({"predict", "--checkpoint", s.last_checkpoint, "--list", d.val_list},
                            dir / "predict.log");
  INFO(p.output);
  REQUIRE(p.status == 0);
  size_t shoes = 0, bags = 0, coats = 0;
  for (size_t at = 0; (at = p.output.find("[label ", at)) != std::string::npos; at++) {
    shoes += p.output.compare(at, 11, "[label shoe") == 0;
    bags += p.output.compare(at, 10, "[label bag") == 0;
    coats += p.output.compare(at, 11, "[label coat") == 0;
  }
  REQUIRE(shoes == 3);
  REQUIRE(bags == 5);
  REQUIRE(coats == 2);
}

TEST_CASE("class names: unknown names and other sets are refused with both lists; no names are indices") {
  TempDir dir;
  const Data d = make_data(dir);
  const std::vector<std::string> model = {"bag", "coat", "shoe"};
  REQUIRE(class_mapping({"shoe", "bag", "coat"}, model, "v", "m") == std::vector<int32_t>{2, 0, 1});
  REQUIRE(class_mapping({"bag", "coat", "shoe"}, model, "v", "m").empty());  // same order
  REQUIRE(class_mapping({}, model, "v", "m").empty());                      // no names: indices
  REQUIRE(class_mapping({"cat", "dog"}, {"0", "1", "2"}, "v", "m").empty()); // numbered model
  REQUIRE(class_mapping({"2", "0", "1"}, {"0", "1", "2"}, "v", "m") == std::vector<int32_t>{2, 0, 1});
  REQUIRE_USER_ERROR(class_mapping({"shoe", "bag", "sandal"}, model, "val.txt", "the model"),
                     "val.txt names other classes than the model: the model has no class "
                     "sandal; 3 in the data (shoe, bag, sandal), 3 in the model (bag, coat, shoe)");
  REQUIRE_USER_ERROR(class_mapping({"shoe", "bag"}, model, "val.txt", "the model"),
                     "2 in the data (shoe, bag), 3 in the model (bag, coat, shoe)");

  // Through the commands: a val list naming a class the training data lack.
  write_lines(d.val_classes, {"shoe", "bag", "sandal"});
  TrainConfig c;
  c.train = d.train_dir, c.val = d.val_list, c.model = "tiny", c.model_text = kTinyModel;
  c.batch = 32, c.epochs = 1, c.out = dir / "run";
  REQUIRE_USER_ERROR(resolve_config(c), "the model has no class sandal");

  // Without classes.txt the labels are indices, and must fit the model's classes.
  std::filesystem::remove(d.val_classes);
  TrainConfig plain = config_for(d, dir / "run2");
  RunLog log(dir / "log");
  const RunSummary s = run_training(plain, {}, log.f);
  REQUIRE(s.final_eval.class_images == std::vector<int64_t>{3, 5, 2});
  write_lines(dir / "far.txt", {d.train_dir + "/bag/0.jpg\t3"});
  const Ran e = run_cutrain({"eval", "--checkpoint", s.last_checkpoint, "--data", dir / "far.txt"},
                            dir / "eval.log");
  REQUIRE(e.status == 2);
  REQUIRE(e.output.find("labels go up to 3 but") != std::string::npos);
  REQUIRE(e.output.find("has 3 classes") != std::string::npos);
}
