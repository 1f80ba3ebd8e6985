// The trace recorder: every file it writes parses as JSON (read back with nlohmann-json), spans
// on one row nest or follow each other, names are escaped, threads are named, the memory cap
// holds, a failed write says why without throwing, and a traced loader run shows the decode
// workers and the consumer's waits on their own rows.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <thread>

#include "data/loader.h"
#include "data/trace.h"
#include "tests/data/temp_dir.h"
#include "tests/data/trace_json.h"
#include "tests/test_util.h"

using namespace cutrain;
using cutrain_test::TempDir;
using cutrain_test::ns;
using cutrain_test::read_json;
using cutrain_test::row_names;
using cutrain_test::span_problems;
using cutrain_test::spans_named;
using nlohmann::json;

namespace {

void busy_us(int us) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::microseconds(us);
  while (std::chrono::steady_clock::now() < end) {
  }
}

}  // namespace

TEST_CASE("trace: the overlap checker itself catches a span that sticks out of its parent") {
  const json good = json::parse(R"({"traceEvents":[
    {"name":"a","ph":"X","ts":10,"dur":100,"pid":1,"tid":1},
    {"name":"b","ph":"X","ts":20,"dur":30,"pid":1,"tid":1},
    {"name":"c","ph":"X","ts":110,"dur":5,"pid":1,"tid":1},
    {"name":"d","ph":"X","ts":50,"dur":500,"pid":1,"tid":2}]})");
  REQUIRE(span_problems(good) == "");
  json bad = good;
  bad["traceEvents"][1]["dur"] = 95.5;  // b: 20 .. 115.5 sticks out of a: 10 .. 110
  REQUIRE(span_problems(bad).find("overlaps its parent") != std::string::npos);
  json negative = good;
  negative["traceEvents"][2]["dur"] = -1;
  REQUIRE(span_problems(negative).find("negative") != std::string::npos);
}

TEST_CASE("trace: nested spans, args, thread names and escaping survive a write and a parse") {
  TempDir dir;
  const std::string path = dir.str() + "/trace.json";
  Tracer tracer;
  tracer.name_thread("main \"quoted\" \\ tab\t");
  {
    TraceSpan step(&tracer, "step", "train");
    step.arg("step", 7);
    step.arg("images", 256);
    step.arg("ignored", 1);  // a third arg is dropped, not an error
    {
      TraceSpan fwd(&tracer, "forward", "train");
      busy_us(50);
    }
    TraceSpan bwd(&tracer, "backward", "train");
    busy_us(50);
  }
  const int stream = tracer.track("compute stream");
  REQUIRE(tracer.track("compute stream") == stream);
  const auto t0 = tracer.origin() + std::chrono::microseconds(1000);
  tracer.complete(stream, "kernel", "gpu", t0, t0 + std::chrono::nanoseconds(2500));
  REQUIRE(tracer.events() == 4);
  std::string why;
  REQUIRE(tracer.write(path, &why));
  REQUIRE(why == "");
  REQUIRE(!std::filesystem::exists(path + ".tmp"));

  const json trace = read_json(path);
  REQUIRE(span_problems(trace) == "");
  const auto names = row_names(trace);
  REQUIRE(names.size() == 2);
  const json step = spans_named(trace, "step").at(0);
  const json fwd = spans_named(trace, "forward").at(0);
  const json bwd = spans_named(trace, "backward").at(0);
  REQUIRE(names.at(step.at("tid").get<int>()) == "main \"quoted\" \\ tab\t");
  REQUIRE(step.at("cat") == "train");
  REQUIRE(step.at("args") == json({{"step", 7}, {"images", 256}}));
  REQUIRE(!fwd.contains("args"));
  REQUIRE(fwd.at("tid") == step.at("tid"));
  REQUIRE(ns(fwd.at("dur")) >= 50000);
  REQUIRE(ns(fwd.at("ts")) >= ns(step.at("ts")));                  // forward inside step,
  REQUIRE(ns(bwd.at("ts")) >= ns(fwd.at("ts")) + ns(fwd.at("dur")));  // backward after it
  const json kernel = spans_named(trace, "kernel").at(0);
  REQUIRE(names.at(kernel.at("tid").get<int>()) == "compute stream");
  REQUIRE(ns(kernel.at("ts")) == 1000000);  // exact: integer ns written as "1000.000"
  REQUIRE(ns(kernel.at("dur")) == 2500);
  REQUIRE(trace.at("otherData").at("dropped_events") == 0);
}

TEST_CASE("trace: a thread that takes another name starts a new row; its old spans stay") {
  TempDir dir;
  Tracer tracer;
  tracer.name_thread("training loader worker");
  { TraceSpan s(&tracer, "first", "test"); }
  tracer.name_thread("training loader worker");  // the same name: the same row
  { TraceSpan s(&tracer, "second", "test"); }
  tracer.name_thread("evaluation loader worker");
  { TraceSpan s(&tracer, "third", "test"); }
  REQUIRE(tracer.write(dir.file("t.json")));
  const json trace = read_json(dir.file("t.json"));
  const auto names = row_names(trace);
  REQUIRE(names.size() == 2);
  auto row_of = [&](const char* span) {
    return names.at(spans_named(trace, span).at(0).at("tid").get<int>());
  };
  REQUIRE(row_of("first") == "training loader worker");
  REQUIRE(row_of("second") == "training loader worker");
  REQUIRE(row_of("third") == "evaluation loader worker");
}

TEST_CASE("trace: a disabled or null tracer records nothing") {
  Tracer tracer;
  tracer.set_enabled(false);
  { TraceSpan s(&tracer, "off", "test"); }
  { TraceSpan s(nullptr, "null", "test"); }
  tracer.complete("off", "test", tracer.origin(), tracer.origin());
  REQUIRE(tracer.events() == 0);
  tracer.set_enabled(true);
  { TraceSpan s(&tracer, "on", "test"); }
  REQUIRE(tracer.events() == 1);
}

TEST_CASE("trace: past max_events spans are counted as dropped, and the file says so") {
  TempDir dir;
  Tracer tracer(10);
  for (int i = 0; i < 25; i++) TraceSpan s(&tracer, "x", "test");
  REQUIRE(tracer.events() == 10);
  REQUIRE(tracer.dropped() == 15);
  REQUIRE(tracer.write(dir.str() + "/t.json"));
  const json trace = read_json(dir.str() + "/t.json");
  REQUIRE(spans_named(trace, "x").size() == 10);
  REQUIRE(trace.at("otherData").at("dropped_events") == 15);
}

TEST_CASE("trace: a write that cannot happen returns false and names the file, never throws") {
  Tracer tracer;
  { TraceSpan s(&tracer, "x", "test"); }
  std::string why;
  REQUIRE(!tracer.write("/nonexistent-dir/sub/trace.json", &why));
  REQUIRE(why.find("/nonexistent-dir/sub/trace.json.tmp") != std::string::npos);
  REQUIRE(!tracer.write("/nonexistent-dir/sub/trace.json"));  // no `why`: fine too
}

TEST_CASE("trace: many threads recording while the file is written several times") {
  TempDir dir;
  Tracer tracer;
  constexpr int kThreads = 6, kSpans = 3000;  // 18,000 outer + inner spans: several chunks
  std::atomic<int> started{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; t++)
    threads.emplace_back([&, t] {
      tracer.name_thread("recorder " + std::to_string(t));
      started++;
      for (int i = 0; i < kSpans; i++) {
        TraceSpan outer(&tracer, "outer", "test");
        outer.arg("i", i);
        TraceSpan inner(&tracer, "inner", "test");
      }
    });
  while (started < kThreads) std::this_thread::yield();
  std::vector<std::string> during;  // checked after the join: a failed REQUIRE must not
  for (int w = 0; w < 5; w++) {     // leave joinable threads behind
    const std::string path = dir.str() + "/during" + std::to_string(w) + ".json";
    during.push_back(tracer.write(path) ? "" : "write failed");
  }
  for (auto& t : threads) t.join();
  for (int w = 0; w < 5; w++) {  // each intermediate file is complete JSON
    REQUIRE(during[size_t(w)] == "");
    REQUIRE(span_problems(read_json(dir.str() + "/during" + std::to_string(w) + ".json")) == "");
  }
  REQUIRE(tracer.write(dir.str() + "/after.json"));
  const json trace = read_json(dir.str() + "/after.json");
  REQUIRE(span_problems(trace) == "");
  REQUIRE(spans_named(trace, "outer").size() == kThreads * kSpans);
  REQUIRE(spans_named(trace, "inner").size() == kThreads * kSpans);
  std::set<int> tids;
  for (const json& e : spans_named(trace, "outer")) tids.insert(e.at("tid").get<int>());
  REQUIRE(tids.size() == kThreads);
  const auto names = row_names(trace);
  for (int tid : tids) REQUIRE(names.at(tid).rfind("recorder ", 0) == 0);
}

namespace {
// Sample i: bytes of value i % 251 after `work_us` of busy work (a decode that takes time).
class SlowSource : public SampleSource {
 public:
  SlowSource(int64_t n, int work_us) : n_(n), work_us_(work_us) {
    spec_.size = 4;
    spec_.channels = 1;
  }
  int64_t size() const override { return n_; }
  int32_t label(int64_t i) const override { return int32_t(i % 10); }
  std::string name(int64_t i) const override { return "slow[" + std::to_string(i) + "]"; }
  const ImageSpec& spec() const override { return spec_; }
  DecodeResult load(int64_t i, uint64_t, uint8_t* out, InputCrop&, StageTimes&) const override {
    busy_us(work_us_);
    std::fill(out, out + sample_bytes(), uint8_t(i % 251));
    return DecodeResult();
  }

 private:
  int64_t n_;
  int work_us_;
  ImageSpec spec_;
};
}  // namespace

TEST_CASE("trace: a traced loader run shows every worker decoding and the consumer waiting") {
  TempDir dir;
  Tracer tracer;
  tracer.name_thread("main");
  SamplerConfig sc;
  sc.num_samples = 600;
  sc.batch_size = 32;
  sc.seed = 1;
  LoaderConfig lc;
  lc.threads = 3;
  lc.ring = 3;
  lc.tracer = &tracer;
  int batches = 0;
  {
    Loader loader(std::make_shared<SlowSource>(600, 40), sc, lc);
    for (; batches < 2 * loader.sampler().batches_per_epoch(); batches++) {
      TraceSpan step(&tracer, "step", "train");  // the consumer's own work, around next()
      Batch b = loader.next();
      busy_us(200);
      loader.release(b);
    }
  }  // workers joined: every span is recorded
  REQUIRE(tracer.write(dir.str() + "/loader.json"));
  const json trace = read_json(dir.str() + "/loader.json");
  REQUIRE(span_problems(trace) == "");
  const auto names = row_names(trace);

  // The consumer: one "wait for batch" per batch, on the main row, inside its step.
  const auto waits = spans_named(trace, "wait for batch");
  REQUIRE(int(waits.size()) == batches);
  std::set<int64_t> waited;
  for (const json& w : waits) {
    REQUIRE(names.at(w.at("tid").get<int>()) == "main");
    waited.insert(w.at("args").at("batch").get<int64_t>());
  }
  REQUIRE(int(waited.size()) == batches);
  REQUIRE(*waited.rbegin() == batches - 1);
  const auto steps = spans_named(trace, "step");
  for (const json& w : waits) {
    const bool inside = std::any_of(steps.begin(), steps.end(), [&](const json& s) {
      return ns(s.at("ts")) <= ns(w.at("ts")) &&
             ns(w.at("ts")) + ns(w.at("dur")) <= ns(s.at("ts")) + ns(s.at("dur"));
    });
    REQUIRE(inside);
  }

  // The workers: decode spans on three "loader worker i" rows that cover every sample.
  std::set<std::string> worker_rows;
  int64_t samples = 0;
  for (const json& d : spans_named(trace, "decode")) {
    const std::string row = names.at(d.at("tid").get<int>());
    REQUIRE(row.rfind("loader worker ", 0) == 0);
    worker_rows.insert(row);
    samples += d.at("args").at("samples").get<int64_t>();
    REQUIRE(d.at("cat") == "loader");
  }
  REQUIRE(worker_rows == std::set<std::string>{"loader worker 0", "loader worker 1",
                                               "loader worker 2"});
  // every sample of the delivered batches, plus those of up to `ring` batches decoded ahead
  REQUIRE(samples >= int64_t(batches) * 32);
  REQUIRE(samples <= int64_t(batches + lc.ring) * 32);
  REQUIRE(spans_named(trace, "copy issue").empty());  // host-only run: no copies
}
