// The trace of a run with replicas: every replica's loader has rows of its own (two loaders'
// "loader worker 0" would otherwise share a row and their spans overlap), and on GPUs every
// replica's compute and comm streams have a row, with the all-reduce of every bucket of every
// step (and of the BatchNorm statistics' step sums) on the comm rows. On every row spans nest or follow each other.
#include <map>
#include <set>
#include <string>

#include "data/trace.h"
#include "tests/data/trace_json.h"
#include "tests/test_util.h"
#include "tests/train/train_fixture.h"
#include "train/engine/trainer.h"

using namespace cutrain;
using namespace cutrain_test;

namespace {

// Trains `steps` steps of `devices` replicas with a tracer, writes the trace and reads it back.
nlohmann::json traced_run(const TempDir& dir, const std::string& devices, const RunDevice& where,
                          int steps, std::string* description, bool sync_bn = false) {
  Tracer tracer;
  tracer.name_thread("main");
  {
    TrainConfig cfg = tiny_run_config(dir / "run", 320, 1);
    cfg.devices = devices;
    cfg.accum = 1;
    cfg.sync_bn = sync_bn;
    Trainer t(cfg, where);
    t.tracer = &tracer;
    for (int s = 0; s < steps; s++) t.launch();
    REQUIRE(t.results(true).size() == size_t(steps));
    *description = t.replicas_description();
  }  // the loaders' workers have stopped, every GPU row is flushed
  const std::string path = dir / "trace.json";
  REQUIRE(tracer.write(path));
  return read_json(path);
}

std::map<std::string, int> rows_by_name(const nlohmann::json& trace) {
  std::map<std::string, int> rows;
  for (const auto& [tid, name] : row_names(trace)) rows[name] = tid;
  return rows;
}

// The "X" spans named `name` on row `tid`.
int spans_on(const nlohmann::json& trace, int tid, const std::string& name) {
  int n = 0;
  for (const nlohmann::json& e : spans_named(trace, name)) n += e.at("tid").get<int>() == tid;
  return n;
}

}  // namespace

TEST_CASE("replicas: each replica's loader traces on rows of its own") {
  TempDir dir;
  std::string description;
  RunDevice cpu;
  const nlohmann::json trace = traced_run(dir, "cpu,cpu", cpu, 4, &description);
  const auto rows = rows_by_name(trace);
  for (const char* row : {"replica 0 loader worker 0", "replica 1 loader worker 0"}) {
    INFO(row);
    REQUIRE(rows.count(row));
    REQUIRE(spans_on(trace, rows.at(row), "decode") > 0);
  }
  REQUIRE(!rows.count("loader worker 0"));
  REQUIRE(span_problems(trace) == "");
}

TEST_CASE("replicas: with --sync-bn each replica's forward and backward trace on its own thread's "
          "row") {
  TempDir dir;
  std::string description;
  RunDevice cpu;
  const int steps = 3;
  const nlohmann::json trace = traced_run(dir, "cpu,cpu,cpu,cpu", cpu, steps, &description, true);
  const auto rows = rows_by_name(trace);
  REQUIRE(spans_on(trace, rows.at("main"), "forward") == steps);  // replica 0: the caller's
  for (const char* row :
       {"replica 1 (--sync-bn)", "replica 2 (--sync-bn)", "replica 3 (--sync-bn)"}) {
    INFO(row);
    REQUIRE(rows.count(row));
    REQUIRE(spans_on(trace, rows.at(row), "forward") == steps);
    REQUIRE(spans_on(trace, rows.at(row), "backward") == steps);
  }
  REQUIRE(span_problems(trace) == "");
}

TEST_CASE("replicas [gpu]: compute, comm and copy stream rows of every replica; one all-reduce "
          "per bucket per step") {
  REQUIRE_GPU();
  TempDir dir;
  std::string description;
  RunDevice gpu;
  gpu.device = Device::cuda;
  gpu.dtype = DType::f16;
  const int steps = 4;
  const nlohmann::json trace = traced_run(dir, "0,0", gpu, steps, &description);
  const auto rows = rows_by_name(trace);
  // "2 replicas (--devices 0,0), ..., ring all-reduce of N buckets, ...": N from the trainer
  const size_t at = description.find("ring all-reduce of ");
  REQUIRE(at != std::string::npos);
  const int buckets = std::stoi(description.substr(at + 19));
  REQUIRE(buckets >= 1);
  for (int r = 0; r < 2; r++) {
    const std::string compute = "compute stream (replica " + std::to_string(r) + ", cuda:0)";
    const std::string comm = "comm stream (replica " + std::to_string(r) + ", cuda:0)";
    const std::string copy = "copy stream (replica " + std::to_string(r) + ", cuda:0)";
    INFO("replica " << r);
    REQUIRE(rows.count(compute));
    REQUIRE(rows.count(comm));
    REQUIRE(rows.count(copy));
    REQUIRE(spans_on(trace, rows.at(compute), "forward + backward") == steps);
    REQUIRE(spans_on(trace, rows.at(compute), "all-reduce wait") == steps);
    REQUIRE(spans_on(trace, rows.at(compute), "optimizer") == steps);
    // one per bucket, and one of the BatchNorm statistics' step sums (the model has BN)
    REQUIRE(spans_on(trace, rows.at(comm), "all-reduce") == steps * (buckets + 1));
    REQUIRE(spans_on(trace, rows.at(comm), "overflow OR") == steps);
  }
  REQUIRE(span_problems(trace) == "");
}
