// The bound of a run, named in its own records (data/metrics.h has the rule, tested on numbers
// in tests/data/metrics_test.cpp; here, that the device's clock feeds it the right times): a
// run whose loader is far slower than its model (one decode thread on 960x720 JPEGs, a
// one-layer model on 8x8 inputs) is loader-bound; a heavy model fed by a fast loader (the
// default CNN on Fashion-MNIST's 28 px JPEGs) is compute-bound. The two sides of each run are
// orders of magnitude apart (about 1,000x and 100x), so the verdict does not hang on a busy
// machine's timing; two things do, and the second verdict is not asserted on them: the host's
// idle share (the main thread descheduled between steps) and the run's very first batch (the
// first step waits for it as long as the machine takes to run the decoding thread). On the
// CPU the device's clock is the host's around the same points of a step, and no slot is ever
// held by a device after its release.
#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/image.h"
#include "data/image_list.h"
#include "tests/data/temp_dir.h"
#include "tests/data/test_images.h"
#include "tests/test_util.h"
#include "tests/train/train_fixture.h"
#include "train/run/run.h"
#include "train/setup/resolve.h"

using namespace cutrain;
using namespace cutrain_test;
using nlohmann::json;

namespace {

std::vector<json> step_records(const std::string& metrics) {
  std::vector<json> steps;
  std::ifstream f(metrics);
  for (std::string line; std::getline(f, line);) {
    const json j = json::parse(line);
    if (j.at("kind") == "step") steps.push_back(j);
  }
  return steps;
}

// Every step record knows the device's clock, its three shares add up to the whole, and no
// slot was held (the CPU releases a slot when it is done with it).
void require_device_clock(const std::vector<json>& steps) {
  for (const json& s : steps) {
    INFO("step record " << s.dump());
    REQUIRE(s.at("bound").is_string());
    const double sum = s.at("busy_pct").get<double>() + s.at("device_wait_pct").get<double>() +
                       s.at("idle_pct").get<double>();
    REQUIRE(std::fabs(sum - 100) < 1e-9);
    REQUIRE(s.at("data_wait_held_pct").get<double>() == 0);
    REQUIRE(s.at("pipeline_ratio").get<double>() > 0);
  }
}

const char* kOneConv = R"(# one conv: almost nothing to compute
conv 4 3x3 pad=1
relu
flatten
linear classes
)";

}  // namespace

TEST_CASE("bound: one decode thread on large JPEGs and a tiny model: every record says loader") {
  TempDir dir;
  // One 960x720 photo-like JPEG, listed 144 times: each entry is decoded afresh, at full scale
  // (--resize 720: no DCT-domain shortcut), milliseconds each; a step of the model on four 8x8
  // crops takes microseconds. The ring's four batches decoded before the first step and the
  // first step's set-up are the first record's only time not spent waiting.
  const Image photo = pattern_image(720, 960, 3);
  write_bytes(dir / "photo.jpg", encode_jpeg(photo.pixels.data(), 720, 960, 3, 90));
  ImageList list;
  for (int i = 0; i < 144; i++) list.samples.push_back({dir / "photo.jpg", i % 2});
  write_image_list(list, dir / "train.txt");
  TrainConfig c;
  c.train = dir / "train.txt";
  c.model = "one conv", c.model_text = kOneConv;
  c.resize = 720, c.size = 8, c.channels = 3;
  c.batch = 4, c.epochs = 1, c.lr = 0.01, c.seed = 3, c.log_every = 12;
  c.threads = 1, c.compute_threads = 1;  // one decode thread
  c.out = dir / "run";
  RunLog log(dir / "log");
  REQUIRE(run_training(c, {}, log.f).steps == 36);
  const std::vector<json> steps = step_records(dir / "run/metrics.jsonl");
  REQUIRE(steps.size() == 3);
  require_device_clock(steps);
  for (const json& s : steps) {
    REQUIRE(s.at("bound") == "loader");
    REQUIRE(s.at("loader_pct").get<double>() > 50);  // the loader alone takes most of the time
  }
}

TEST_CASE("bound: the default model fed by a fast loader: no record says loader") {
  TempDir dir;
  TrainConfig c = tiny_run_config(dir / "run", 256, 1);
  c.model = "default", c.model_text.clear();
  c.val.clear(), c.limit_val = 0;
  c.batch = 32, c.accum = 1, c.log_every = 2;
  c.threads = 1, c.compute_threads = 1;  // the loader is still about 100x the model's pace
  resolve_config(c);
  RunLog log(dir / "log");
  REQUIRE(run_training(c, {}, log.f).steps == 8);
  const std::vector<json> steps = step_records(dir / "run/metrics.jsonl");
  REQUIRE(steps.size() == 4);
  require_device_clock(steps);
  // The verdict once the loader has had one step to get ahead: the first record's first step
  // may wait for the first batch, as long as the machine takes to give the decoding thread a
  // core (milliseconds on a busy one, against steps of tens: a verdict of the machine's load,
  // not of the pipeline). From the second record on, the loader is a ring of batches ahead.
  for (size_t i = 1; i < steps.size(); i++) {
    const json& s = steps[i];
    INFO("record " << i << ": " << s.dump());
    REQUIRE(s.at("bound") != "loader");
    REQUIRE(s.at("device_wait_pct").get<double>() < kBoundPct);
    REQUIRE(s.at("loader_pct").get<double>() < 50);  // ... and here a small part of it
    // Compute-bound, unless the host idled between steps: on the CPU that is the main thread
    // descheduled by other work on a busy machine (a preempted millisecond is 5% of a step
    // here), which is what "host" means and what this test does not control.
    if (s.at("idle_pct").get<double>() <= kBoundPct) REQUIRE(s.at("bound") == "compute");
  }
}
