// Metrics as JSON lines: every line parses back (nlohmann-json) to the values written, in a
// fixed field order; lines reach the file as they are written (a killed process keeps all
// of them); NaN becomes null; threads never interleave lines; bad paths and records are
// refused by name. RateMeter: exact rates and ETA from running totals at given times.
#include <nlohmann/json.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "data/metrics.h"
#include "tests/data/temp_dir.h"
#include "tests/test_util.h"

using namespace cutrain;
using cutrain_test::TempDir;
using nlohmann::json;

namespace {
std::vector<std::string> lines_of(const std::string& path) {
  std::ifstream f(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(f, line);) lines.push_back(line);
  return lines;
}

StepMetrics example(int64_t step) {
  StepMetrics m;
  m.step = step;
  m.epoch = 2;
  m.loss = 0.6128;
  m.accuracy = 0.78125;
  m.lr = 0.05;
  m.loss_scale = 65536;
  m.images_per_s = 11520.5;
  m.data_wait_pct = 1.25;
  m.time_s = 2.5;
  return m;
}
}  // namespace

TEST_CASE("metrics: step and other records read back exactly, one JSON object a line") {
  TempDir dir;
  const std::string path = dir.file("metrics.jsonl");
  {
    MetricsWriter w(path);
    StepMetrics known = example(100);  // the device's clock measured the window
    known.data_wait_held_pct = 1.0;
    known.busy_pct = 96.5;
    known.device_wait_pct = 0.5;
    known.idle_pct = 3.0;
    known.bound = Bound::compute;
    known.pipeline_ratio = 1.25;
    known.loader_pct = 12.5;
    w.write(known);
    w.write(example(200));  // it did not: nulls
    w.write("eval", {{"epoch", 2}, {"top1", 0.875}, {"per_class", {0.5, 1.0}}});
    REQUIRE(w.lines() == 3);
  }
  const auto lines = lines_of(path);
  REQUIRE(lines.size() == 3);
  REQUIRE(lines[0] ==
          R"({"kind":"step","step":100,"epoch":2,"loss":0.6128,"accuracy":0.78125,"lr":0.05,)"
          R"("loss_scale":65536.0,"images_per_s":11520.5,"data_wait_pct":1.25,)"
          R"("data_wait_held_pct":1.0,"busy_pct":96.5,"device_wait_pct":0.5,"idle_pct":3.0,)"
          R"("launch_pct":null,)"
          R"("bound":"compute","pipeline_ratio":1.25,"loader_pct":12.5,"time":2.5})");
  const json a = json::parse(lines[1]);
  REQUIRE(a.at("step") == 200);
  for (const char* key :
       {"busy_pct", "device_wait_pct", "idle_pct", "launch_pct", "bound", "pipeline_ratio",
        "loader_pct"})
    REQUIRE(a.at(key).is_null());
  REQUIRE(a.at("loss").get<double>() == 0.6128);  // the shortest digits that read back exactly
  REQUIRE(a.at("time").get<double>() == 2.5);
  const json e = json::parse(lines[2]);
  REQUIRE(e.at("kind") == "eval");
  REQUIRE(e.at("top1").get<double>() == 0.875);
  REQUIRE(e.at("per_class") == json({0.5, 1.0}));
  REQUIRE(lines[2].rfind(R"({"kind":"eval",)", 0) == 0);  // "kind" first on every line
}

TEST_CASE("metrics: append continues a file (resume), truncate starts it again") {
  TempDir dir;
  const std::string path = dir.file("m.jsonl");
  { MetricsWriter(path).write(example(1)); }
  { MetricsWriter(path).write(example(2)); }
  REQUIRE(lines_of(path).size() == 2);
  REQUIRE(json::parse(lines_of(path)[1]).at("step") == 2);
  { MetricsWriter(path, MetricsWriter::Mode::truncate).write(example(3)); }
  REQUIRE(lines_of(path).size() == 1);
  REQUIRE(json::parse(lines_of(path)[0]).at("step") == 3);
}

TEST_CASE("metrics: an overflowed loss is written as null, and the line is still JSON") {
  TempDir dir;
  MetricsWriter w(dir.file("m.jsonl"));
  StepMetrics m = example(5);
  m.loss = std::numeric_limits<double>::infinity();
  m.accuracy = std::nan("");
  w.write(m);
  const json j = json::parse(lines_of(w.path()).at(0));
  REQUIRE(j.at("loss").is_null());
  REQUIRE(j.at("accuracy").is_null());
  REQUIRE(j.at("lr").get<double>() == 0.05);
}

TEST_CASE("metrics: lines are on disk as written; a killed writer loses none of them") {
  TempDir dir;
  const std::string path = dir.file("m.jsonl");
  MetricsWriter w(path);
  w.write(example(1));
  REQUIRE(lines_of(path).size() == 1);  // visible before the writer is closed
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {  // the child writes 50 lines and dies without any clean-up
    for (int i = 0; i < 50; i++) w.write(example(100 + i));
    kill(getpid(), SIGKILL);
  }
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  REQUIRE(WIFSIGNALED(status));
  const auto lines = lines_of(path);
  REQUIRE(lines.size() == 51);
  for (size_t i = 1; i < lines.size(); i++)
    REQUIRE(json::parse(lines[i]).at("step") == int64_t(99 + i));
}

TEST_CASE("metrics: lines from many threads never interleave") {
  TempDir dir;
  MetricsWriter w(dir.file("m.jsonl"));
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; t++)
    threads.emplace_back([&w, t] {
      for (int i = 0; i < 500; i++) w.write("tick", {{"thread", t}, {"i", i}, {"pad", std::string(200, 'x')}});
    });
  for (auto& t : threads) t.join();
  const auto lines = lines_of(w.path());
  REQUIRE(lines.size() == 2000);
  std::vector<int> per_thread(4);
  for (const auto& line : lines) per_thread.at(json::parse(line).at("thread").get<size_t>())++;
  REQUIRE(per_thread == std::vector<int>{500, 500, 500, 500});
}

TEST_CASE("metrics: a file that cannot be written and a record that is not an object are refused") {
  REQUIRE_ERROR(MetricsWriter("/nonexistent-dir/m.jsonl"),
                "cannot write the metrics file /nonexistent-dir/m.jsonl");
  TempDir dir;
  MetricsWriter w(dir.file("m.jsonl"));
  REQUIRE_ERROR(w.write("eval", json::array({1, 2})), "metrics record 'eval'");
  REQUIRE(w.lines() == 0);
}

TEST_CASE("metrics: RateMeter gives images/s, data wait and sync-bn time over each window, ETA from the pace") {
  using namespace std::chrono;
  const auto t0 = RateMeter::Clock::time_point() + seconds(1000);
  RateMeter meter(0, 100, t0);
  RateMeter::Rates r = meter.update(10, 2560, 0.5, 1.0, t0 + seconds(2));
  REQUIRE(r.images_per_s == 1280);
  REQUIRE(r.data_wait_pct == 25);
  REQUIRE(r.sync_pct == 50);
  REQUIRE(r.elapsed_s == 2);
  REQUIRE(r.eta_s == 18);  // 90 steps left at 0.2 s a step
  r = meter.update(20, 5120, 0.5, 1.25, t0 + seconds(3));
  REQUIRE(r.images_per_s == 2560);  // this window only: 2560 images in 1 s
  REQUIRE(r.data_wait_pct == 0);
  REQUIRE(r.sync_pct == 25);
  REQUIRE(r.eta_s == 12);           // 80 steps left at 3 s / 20 steps
  r = meter.update(20, 5120, 0.5, 1.25, t0 + seconds(3));  // an empty window: no division by zero
  REQUIRE(r.images_per_s == 0);

  RateMeter resumed(50, 100, t0);  // a resumed run: its pace counts from step 50
  REQUIRE(std::isnan(resumed.update(50, 0, 0, 0, t0 + seconds(1)).eta_s));
  REQUIRE(resumed.update(60, 640, 0, 0, t0 + seconds(3)).eta_s == 40 * 3.0 / 10);
}

TEST_CASE("metrics: the bound of a run is read off the device's clock, by one rule") {
  DeviceTime t;
  REQUIRE(run_bound(t) == Bound::unknown);  // nothing measured
  REQUIRE(std::string(bound_name(Bound::unknown)).empty());
  t.compute_s = 90, t.wait_s = 5, t.idle_s = 5;  // at the threshold, not above: compute
  REQUIRE(t.wall_s() == 100);
  REQUIRE(run_bound(t) == Bound::compute);
  REQUIRE(std::string(bound_name(run_bound(t))) == "compute");
  t.wait_s = 5.5;  // the device waited for batches more than 5% of the time
  REQUIRE(run_bound(t) == Bound::loader);
  REQUIRE(std::string(bound_name(Bound::loader)) == "loader");
  t.idle_s = 8;  // waiting for batches is named first, even when the host is late too
  REQUIRE(run_bound(t) == Bound::loader);
  t.wait_s = 0;  // idle with every batch ready: the host did not launch fast enough
  REQUIRE(run_bound(t) == Bound::host);
  REQUIRE(std::string(bound_name(Bound::host)) == "host");
  // A GPU whose compute took hardly longer than the host's launches waited for them inside
  // its steps: host-bound too (on the CPU launch_s stays 0: its work is done as it is queued).
  t = DeviceTime();
  t.compute_s = 100, t.launch_s = 94;
  REQUIRE(run_bound(t) == Bound::compute);  // the host ran ahead
  t.launch_s = 95;
  REQUIRE(run_bound(t) == Bound::host);
  t.launch_s = 120;  // (the last kernel ends after its launch)
  REQUIRE(run_bound(t) == Bound::host);
  t.wait_s = 10;  // waiting for batches is still named first
  REQUIRE(run_bound(t) == Bound::loader);
  t = DeviceTime();
  t.compute_s = 90, t.wait_s = 5, t.idle_s = 8;
  DeviceTime sum;  // windows add up
  sum += t;
  sum += t;
  REQUIRE(sum.wall_s() == 2 * t.wall_s());
  REQUIRE(sum.idle_s == 16);
}

TEST_CASE("metrics: the pipeline ratio is the wall time over the longer of loading alone and computing") {
  REQUIRE(pipeline_ratio(10, 4, 8) == 1.25);   // compute is the longer
  REQUIRE(pipeline_ratio(10, 10, 2) == 1.0);   // the loader is, and the wall time equals it
  REQUIRE(pipeline_ratio(12, 10, 2) == 1.2);
  REQUIRE(std::isnan(pipeline_ratio(1, 0, 0)));  // neither measured
}
