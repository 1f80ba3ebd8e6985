// GpuTimeline where it cannot time anything: with a null tracer (any machine), and on a machine
// without a usable GPU (or in a CPU-only build), it is inactive, every call does nothing, and
// the tracer gets neither spans nor a row. The GPU side is in gpu_timeline_gpu_test.cpp.
#include "data/gpu_timeline.h"

#include "tests/data/temp_dir.h"
#include "tests/data/trace_json.h"
#include "tests/test_util.h"

using namespace cutrain;
using cutrain_test::TempDir;

namespace {
// Every call of the API, twice over, as a training loop would make them.
void use_it(GpuTimeline& tl) {
  for (int i = 0; i < 2; i++) {
    tl.begin("forward", {"step", i});
    tl.begin("backward");
    tl.end();
    tl.end();  // nothing open: nothing to end
    tl.collect();
    tl.flush();
  }
}
}  // namespace

TEST_CASE("gpu timeline: with a null tracer it is inactive and every call does nothing") {
  // A stream handle that is not a stream: an active timeline would fail on it at once.
  cudaStream_t bogus = reinterpret_cast<cudaStream_t>(uintptr_t(0x1234));
  GpuTimeline tl(nullptr, "compute stream (cuda:0)", bogus);
  REQUIRE(!tl.active());
  use_it(tl);
  REQUIRE(tl.dropped() == 0);
}

TEST_CASE("gpu timeline: without a usable GPU it is inactive, records nothing, adds no row") {
  if (gpu_usable()) {
    cutrain_test::skip("a GPU is usable here (gpu_timeline_gpu_test.cpp covers it)");
    return;
  }
  TempDir dir;
  Tracer tracer;
  {
    GpuTimeline tl(&tracer, "compute stream (cuda:0)", nullptr);
    REQUIRE(!tl.active());
    use_it(tl);
  }  // the destructor flushes: nothing either
  REQUIRE(tracer.events() == 0);
  REQUIRE(tracer.write(dir.file("t.json")));
  const nlohmann::json trace = cutrain_test::read_json(dir.file("t.json"));
  REQUIRE(cutrain_test::row_names(trace).empty());
}
