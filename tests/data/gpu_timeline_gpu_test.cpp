// GpuTimeline on a real stream, and the loader's copy stream row. The stream is kept busy for
// a known time by a host function that sleeps (cudaLaunchHostFunc: the stream waits for it
// like for a kernel), so the spans' lengths and places are known in advance:
//  - spans come out in order, one after the other, at least as long as the work they cover;
//    and on the host's clock (the calibration), between the host times of their queueing and
//    flush (bounds in time: on a GPU only, whose host runs this group alone);
//  - collect() never waits (the stream held at a gate, not by a sleep); flush() collects
//    everything;
//  - a stream far behind makes the timeline drop its newest marks, counted, never grow.
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <string>

#include "data/gpu_timeline.h"
#include "data/loader.h"
#include "kernels/check.h"
#include "tests/data/temp_dir.h"
#include "tests/data/trace_json.h"
#include "tests/kernels/gpu_compare.h"
#include "tests/test_util.h"

using namespace cutrain;
using namespace cutrain_test;
using nlohmann::json;
using Clock = Tracer::Clock;

namespace {

// ns since the tracer's origin, as the trace writes them
int64_t trace_ns(const Tracer& t, Clock::time_point p) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(p - t.origin()).count();
}

constexpr int64_t kMs = 1000000;  // ns

}  // namespace

namespace {
// Two spans on an idle stream, "first" (a 20 ms host function) and "second" (10 ms), written
// to a trace and read back; `queued` and `flushed`: the host's times around them.
struct TwoSpans {
  json first, second;
  std::map<int, std::string> names;
  Clock::time_point queued, flushed;
  int64_t queued_ns = 0, flushed_ns = 0;
};
TwoSpans two_spans(const TempDir& dir) {
  set_device(0);
  Tracer tracer;
  Stream stream(0);
  static const int k20 = 20, k10 = 10;
  GpuTimeline tl(&tracer, "compute stream (cuda:0)", stream.get());
  REQUIRE(tl.active());
  TwoSpans t;
  t.queued = Clock::now();
  tl.begin("first", {"step", 1});
  sleep_on(stream.get(), k20);
  tl.begin("second");
  sleep_on(stream.get(), k10);
  tl.end();
  tl.flush();
  t.flushed = Clock::now();
  REQUIRE(tracer.events() == 2);
  REQUIRE(tl.dropped() == 0);
  REQUIRE(tracer.write(dir.file("t.json")));
  const json trace = read_json(dir.file("t.json"));
  REQUIRE(span_problems(trace) == "");
  t.names = row_names(trace);
  t.first = spans_named(trace, "first").at(0);
  t.second = spans_named(trace, "second").at(0);
  t.queued_ns = trace_ns(tracer, t.queued);
  t.flushed_ns = trace_ns(tracer, t.flushed);
  return t;
}
}  // namespace

TEST_CASE("gpu timeline [gpu]: spans in order, as long as the work") {
  REQUIRE_GPU();
  TempDir dir;
  const TwoSpans t = two_spans(dir);
  REQUIRE(t.names.at(t.first.at("tid").get<int>()) == "compute stream (cuda:0)");
  REQUIRE(t.second.at("tid") == t.first.at("tid"));
  REQUIRE(t.first.at("cat") == "gpu");
  REQUIRE(t.first.at("args").at("step") == 1);
  // Lengths: at least the sleep (the timer's resolution is 0.5 us; sleep_for never returns
  // early).
  REQUIRE(ns(t.first.at("dur")) >= 20 * kMs - 10000);
  REQUIRE(ns(t.second.at("dur")) >= 10 * kMs - 10000);
  // One event ends the first and begins the second: the same time, up to the us rounding.
  REQUIRE(std::llabs(ns(t.second.at("ts")) - ns(t.first.at("ts")) - ns(t.first.at("dur"))) <= 2);
}

TEST_CASE("gpu timeline [gpu]: the spans on the host's clock, between their queueing and flush") {
  REQUIRE_GPU();
  // The calibration's error is the host's own scheduling (a thread's wake-up) and a GPU's
  // launch latency: bounds in time, for a GPU host where this group runs alone (run.sh). Under
  // the simulator the device's clock is the host's, and a busy host's wake-ups are all the
  // error there is.
  if (kSimulated) return skip("the GPU clock's calibration against the host's: timing is not "
                              "simulated");
  TempDir dir;
  const TwoSpans t = two_spans(dir);
  // At most the sleep plus generous scheduling slack.
  REQUIRE(ns(t.first.at("dur")) < 200 * kMs);
  // The idle stream reached the first mark right after it was queued (launch latency,
  // microseconds), and the last one before flush() returned. The slack is the calibration's
  // error (half a record + wait; the events sleep while waited for, so the thread's wake-up,
  // up to hundreds of us on a busy host) and the launch latency.
  const int64_t begin_ns = ns(t.first.at("ts"));
  const int64_t end_ns = ns(t.second.at("ts")) + ns(t.second.at("dur"));
  REQUIRE(begin_ns >= t.queued_ns - 200000);
  REQUIRE(begin_ns <= t.queued_ns + 2 * kMs);
  REQUIRE(end_ns <= t.flushed_ns + kMs);
}

TEST_CASE("gpu timeline [gpu]: collect() never waits for the stream; flush() collects all") {
  REQUIRE_GPU();
  set_device(0);
  Tracer tracer;
  Stream stream(0);
  GpuTimeline tl(&tracer, "compute stream (cuda:0)", stream.get());
  {
    // The stream held at a gate until the test lets it go: a collect() that waited for the
    // stream would wait until the gate gives up (30 s), and timed_out() would say so.
    StreamGate gate(stream.get());
    tl.begin("late");
    tl.end();
    tl.collect();  // the stream is held: nothing is done, nothing waits
    REQUIRE(tracer.events() == 0);
    gate.release();
    REQUIRE(!gate.timed_out());
  }
  tl.flush();
  REQUIRE(tracer.events() == 1);
  tl.flush();  // nothing left: harmless
  REQUIRE(tracer.events() == 1);
}

TEST_CASE("gpu timeline [gpu]: without collect(), marks stay bounded; a stalled stream drops") {
  REQUIRE_GPU();
  set_device(0);
  TempDir dir;
  Stream stream(0);
  const int n = int(GpuTimeline::kMaxPending) * 3;
  SUBCASE("an idle stream: the bound collects what is done, nothing piles up") {
    Tracer tracer;
    GpuTimeline tl(&tracer, "compute stream (cuda:0)", stream.get());
    for (int i = 0; i < n; i++) tl.begin("mark", {"i", i});
    tl.flush();
    REQUIRE(int64_t(tracer.events()) + tl.dropped() == n);
  }
  SUBCASE("a stream stalled at a gate: the newest marks are dropped and counted") {
    Tracer tracer;
    // A small bound, below what a gated stream accepts: on an H200 (driver 580, the device
    // tool's sandbox) the 57th event record behind the gate's host function blocked the host
    // until the gate opened (with a bound of 64, in every drop policy tried). Nothing in
    // cutrain holds a stream with a host function; a stream behind on kernels takes the
    // default bound (4,096) the same way.
    const size_t max_pending = 16;
    GpuTimeline tl(&tracer, "compute stream (cuda:0)", stream.get(), max_pending);
    // The stream waits at the gate until every mark is queued, however long queueing takes: no
    // sleep is "long enough". Were a mark's CUDA calls to block on the stalled stream, the
    // host would wait here and the gate time out (seen on an H200 with the older policies of
    // dropping the oldest mark): the slowest begin() says which mark it was.
    StreamGate gate(stream.get());
    const int m = int(max_pending) + 100;
    double slowest_s = 0;
    int slowest = -1;
    for (int i = 0; i < m; i++) {
      const auto t0 = std::chrono::steady_clock::now();
      tl.begin("mark", {"i", i});
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (s > slowest_s) slowest_s = s, slowest = i;
    }
    gate.release();
    INFO("the slowest begin(): mark " << slowest << ", " << slowest_s << " s");
    REQUIRE(!gate.timed_out());
    tl.flush();
    REQUIRE(tl.dropped() >= 100);
    REQUIRE(int64_t(tracer.events()) + tl.dropped() == m);
    REQUIRE(tracer.write(dir.file("t.json")));
    const json trace = read_json(dir.file("t.json"));
    REQUIRE(span_problems(trace) == "");
    // The oldest survive: spans 0 .. max_pending - 2 (the last recorded mark's span ends at a
    // dropped one).
    const auto spans = spans_named(trace, "mark");
    REQUIRE(int64_t(spans.size()) == int64_t(max_pending) - 1);
    for (const json& s : spans) REQUIRE(s.at("args").at("i").get<int64_t>() < int64_t(max_pending) - 1);
  }
}

namespace {
// Sample i: 16x16x3 bytes of value i % 251.
class FlatSource : public SampleSource {
 public:
  explicit FlatSource(int64_t n) : n_(n) {
    spec_.size = 16;
    spec_.channels = 3;
  }
  int64_t size() const override { return n_; }
  int32_t label(int64_t i) const override { return int32_t(i % 10); }
  std::string name(int64_t i) const override { return "flat[" + std::to_string(i) + "]"; }
  const ImageSpec& spec() const override { return spec_; }
  DecodeResult load(int64_t i, uint64_t, uint8_t* out, InputCrop&, StageTimes&) const override {
    std::memset(out, int(i % 251), sample_bytes());
    return DecodeResult();
  }

 private:
  int64_t n_;
  ImageSpec spec_;
};
}  // namespace

TEST_CASE("loader [gpu]: with a tracer, each batch's copy is a span on the copy stream's row") {
  REQUIRE_GPU();
  set_device(0);
  TempDir dir;
  Tracer tracer;
  SamplerConfig sc;
  sc.num_samples = 500;
  sc.batch_size = 32;
  sc.seed = 3;
  LoaderConfig lc;
  lc.threads = 3;
  lc.ring = 3;
  lc.gpu = 0;
  lc.tracer = &tracer;
  Stream compute(0);
  int batches = 0;
  {
    Loader loader(std::make_shared<FlatSource>(500), sc, lc);
    for (; batches < 2 * loader.sampler().batches_per_epoch(); batches++) {
      Batch b = loader.next(compute.get());
      loader.release(b, compute.get());
    }
    compute.synchronize();
  }  // the destructor flushes the copy stream's row
  REQUIRE(tracer.write(dir.file("loader.json")));
  const json trace = read_json(dir.file("loader.json"));
  REQUIRE(span_problems(trace) == "");  // copies follow each other on their row
  const auto names = row_names(trace);
  const auto copies = spans_named(trace, "copy batch");
  std::set<int64_t> seqs;
  for (const json& c : copies) {
    REQUIRE(names.at(c.at("tid").get<int>()) == "copy stream (cuda:0)");
    REQUIRE(c.at("cat") == "gpu");
    seqs.insert(c.at("args").at("batch").get<int64_t>());
  }
  // every delivered batch, plus up to `ring` copied ahead; each once
  REQUIRE(seqs.size() == copies.size());
  REQUIRE(int(copies.size()) >= batches);
  REQUIRE(int(copies.size()) <= batches + lc.ring);
  for (int64_t s = 0; s < batches; s++) REQUIRE(seqs.count(s) == 1);
  // each copy was issued by a worker before the stream ran it
  REQUIRE(spans_named(trace, "copy issue").size() == copies.size());
}
