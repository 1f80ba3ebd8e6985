// CheckpointWriter with a Tracer: the writes appear on a row "checkpoint writer", one span per
// checkpoint named after its file, holding the parts of the write; a failed write still shows.
#include <filesystem>
#include <set>

#include "data/trace.h"
#include "tests/data/trace_json.h"
#include "tests/train/checkpoint/checkpoint_fixture.h"

using namespace cutrain;
using namespace cutrain_test;
using nlohmann::json;

namespace {
bool inside(const json& inner, const json& outer) {
  return ns(outer.at("ts")) <= ns(inner.at("ts")) &&
         ns(inner.at("ts")) + ns(inner.at("dur")) <= ns(outer.at("ts")) + ns(outer.at("dur"));
}
}  // namespace

TEST_CASE("checkpoint writer: with a tracer, each write is a span on the writer's own row") {
  TempDir dir;
  const std::string ckpt = dir.file("ckpt");
  Tracer tracer;
  tracer.name_thread("main");
  {
    CheckpointWriter writer(ckpt, 2, &tracer);
    writer.submit(small_checkpoint(10), 10, /*is_best=*/true);
    writer.submit(small_checkpoint(20), 20, /*is_best=*/false);
    writer.wait();
    // A write that fails (a folder in the way of its file) is traced too, and reported.
    std::filesystem::create_directories(checkpoint_path(ckpt, 30));
    writer.submit(small_checkpoint(30), 30, false);
    REQUIRE_ERROR(writer.wait(), "is a folder");
  }
  require_identical(read_checkpoint(checkpoint_path(ckpt, 20)), small_checkpoint(20));  // real

  REQUIRE(tracer.write(dir.file("trace.json")));
  const json trace = read_json(dir.file("trace.json"));
  REQUIRE(span_problems(trace) == "");
  const auto names = row_names(trace);
  auto row_of = [&](const json& span) { return names.at(span.at("tid").get<int>()); };

  std::vector<json> writes;
  for (int64_t step : {10, 20, 30}) {
    const std::string name = "write step-000000" + std::to_string(step) + ".h5";
    const auto spans = spans_named(trace, name);
    REQUIRE(spans.size() == 1);
    REQUIRE(row_of(spans[0]) == "checkpoint writer");
    REQUIRE(spans[0].at("cat") == "checkpoint");
    REQUIRE(spans[0].at("args").at("step") == step);
    writes.push_back(spans[0]);
  }
  REQUIRE(ns(writes[0].at("ts")) + ns(writes[0].at("dur")) <= ns(writes[1].at("ts")));

  // The parts: hash, hdf5, write + fsync + rename and prune for both good writes, in that order, inside
  // their write; the best link for step 10 only; the failed write stops before any of them
  // (its file is refused before hashing).
  auto parts_in = [&](const json& write, const std::string& part) {
    std::vector<json> out;
    for (const json& s : spans_named(trace, part))
      if (inside(s, write)) out.push_back(s);
    return out;
  };
  for (int w = 0; w < 2; w++) {
    int64_t last_end = ns(writes[size_t(w)].at("ts"));
    for (const char* part : {"hash", "hdf5", "write + fsync + rename", "prune"}) {
      INFO("write " << w << ", part " << part);
      const auto got = parts_in(writes[size_t(w)], part);
      REQUIRE(got.size() == 1);
      REQUIRE(row_of(got[0]) == "checkpoint writer");
      REQUIRE(ns(got[0].at("ts")) >= last_end);
      last_end = ns(got[0].at("ts")) + ns(got[0].at("dur"));
    }
  }
  REQUIRE(parts_in(writes[0], "link best.h5").size() == 1);
  REQUIRE(parts_in(writes[1], "link best.h5").empty());
  REQUIRE(spans_named(trace, "hdf5").size() == 2);
  REQUIRE(spans_named(trace, "hash").size() == 2);
}
