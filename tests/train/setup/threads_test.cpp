// The threads of a run (train/setup/device.h): the compute threads of the CPU kernels (OpenMP's,
// which oneDNN shares; kernels/parallel.h), how a run's default shares the cores out among
// the replicas that compute at once, that the run's threads really get its count (the
// engine's thread while the engine lives, each --sync-bn replica's thread), and the default
// number of decode threads.
#include <omp.h>

#include <algorithm>
#include <mutex>
#include <thread>
#include <vector>

#include "kernels/parallel.h"
#include "tests/data/temp_dir.h"
#include "tests/test_util.h"
#include "tests/train/replica_fixture.h"
#include "train/engine/replica.h"
#include "train/engine/trainer.h"
#include "train/run/run.h"
#include "train/setup/config.h"
#include "train/setup/device.h"

using namespace cutrain;
using namespace cutrain_test;

namespace {

// The team a parallel region started on this thread gets.
int team_size() {
  int team = 0;
#pragma omp parallel
  {
#pragma omp single
    team = omp_get_num_threads();
  }
  return team;
}

}  // namespace

TEST_CASE("compute threads: a scope sets the calling thread's count and puts it back") {
  const int dynamic = omp_get_dynamic();
  omp_set_dynamic(0);  // n means n: the runtime may not hand out fewer
  const int before = compute_threads(), n = default_compute_threads() + 1;
  {
    const ComputeThreadsScope scope(n);
    REQUIRE(compute_threads() == n);
    REQUIRE(team_size() == n);
    // The count is the thread's own: a thread started now begins with the process's default.
    int other = 0;
    std::thread([&] { other = compute_threads(); }).join();
    REQUIRE(other == default_compute_threads());
  }
  REQUIRE(compute_threads() == before);
  omp_set_dynamic(dynamic);
}

TEST_CASE("compute threads: a run's, as given or the cores shared out among the replicas "
          "computing at once") {
  const int all = default_compute_threads();
  const RunDevice cpu = run_on(Device::cpu, DType::f32), gpu = run_on(Device::cuda, DType::f16);
  TrainConfig c;
  REQUIRE(run_compute_threads(c, cpu) == all);
  c.devices = "cpu,cpu";
  REQUIRE(run_compute_threads(c, cpu) == all);  // without --sync-bn they take turns
  c.sync_bn = true;
  REQUIRE(run_compute_threads(c, cpu) == std::max(1, all / 2));  // side by side
  c.devices = "cpu,cpu,cpu,cpu,cpu,cpu,cpu,cpu,cpu,cpu,cpu,cpu,cpu,cpu,cpu,cpu,cpu";
  REQUIRE(run_compute_threads(c, cpu) == std::max(1, all / 17));  // at least 1
  c.devices = "0,0";
  REQUIRE(run_compute_threads(c, gpu) == all);  // the GPUs compute
  c.compute_threads = 5;
  REQUIRE(run_compute_threads(c, cpu) == 5);  // given: as given

  // eval and predict: the run's count, at most the default here.
  c.compute_threads = 1;
  REQUIRE(inference_compute_threads(c) == 1);
  c.compute_threads = kMaxThreads;
  REQUIRE(inference_compute_threads(c) == std::min(kMaxThreads, all));
  c.compute_threads = 0;  // a checkpoint from before the option
  REQUIRE(inference_compute_threads(c) == all);
}

TEST_CASE("compute threads: the sharing rule on machines this one is not") {
  // cores (the process's default), hardware threads, mpirun's processes here, side by side
  REQUIRE(share_compute_threads(16, 16, 1, 1) == 16);
  REQUIRE(share_compute_threads(16, 16, 4, 1) == 4);  // 4 unbound processes on 16
  REQUIRE(share_compute_threads(8, 16, 4, 1) == 4);   // each bound to an 8-core package
  REQUIRE(share_compute_threads(1, 16, 2, 1) == 1);   // each bound to one core
  REQUIRE(share_compute_threads(16, 16, 1, 3) == 5);  // --sync-bn, 3 replicas
  REQUIRE(share_compute_threads(2, 2, 4, 2) == 1);    // never 0
  REQUIRE(share_compute_threads(384, 384, 1, 1) == kMaxThreads);  // what validate_config takes
}

TEST_CASE("decode threads: every hardware thread on the CPU, one fewer on a GPU, shared out "
          "among the loaders") {
  const int hw = std::max(1, int(std::thread::hardware_concurrency()));
  const RunDevice cpu = run_on(Device::cpu, DType::f32), gpu = run_on(Device::cuda, DType::f16);
  REQUIRE(run_decode_threads(0, cpu, 1) == hw);
  REQUIRE(run_decode_threads(0, gpu, 1) == std::max(1, hw - 1));
  REQUIRE(run_decode_threads(0, cpu, 2) == std::max(1, hw / 2));
  REQUIRE(run_decode_threads(0, cpu, 1000) == 1);
  REQUIRE(run_decode_threads(6, cpu, 2) == 3);  // --threads: the machine's, shared out
  REQUIRE(run_decode_threads(6, gpu, 1) == 6);
  REQUIRE(run_decode_threads(1, cpu, 4) == 1);
}

TEST_CASE("ReplicaThreads: the threads it starts compute on the count it was given") {
  const int n = default_compute_threads() + 1;  // not what a new thread would have anyway
  const ComputeThreadsScope mine(1);
  ReplicaThreads threads(3, nullptr, n);
  std::vector<int> seen(3, -1);
  threads.run([&](int r) { seen[size_t(r)] = compute_threads(); });
  REQUIRE(seen == std::vector<int>{1, n, n});  // rank 0 runs on the caller's thread: its own
}

TEST_CASE("a trainer computes on the run's count: its thread while it lives, --sync-bn's "
          "replica threads, and says so") {
  TempDir dir;
  TrainConfig c = replica_config(dir / "run", 2, kTinyModel);  // BatchNorm: --sync-bn matters
  const int n = default_compute_threads() + 1;  // not what a new thread would have anyway
  c.sync_bn = true, c.compute_threads = n;
  const int before = compute_threads();
  {
    Trainer t(c, run_on(Device::cpu, DType::f32));
    REQUIRE(compute_threads() == n);
    REQUIRE(t.threads_description() == "threads: 1 decoding each, " + std::to_string(n) +
                                           " computing each (--threads, --compute-threads)");
    std::mutex mu;
    std::vector<std::thread::id> thread_of(2);
    std::vector<int> threads_of(2, -1);
    t.on_forward_backward = [&](int rank) {
      const std::lock_guard<std::mutex> lock(mu);
      thread_of[size_t(rank)] = std::this_thread::get_id();
      threads_of[size_t(rank)] = compute_threads();
    };
    t.step();
    REQUIRE(thread_of[0] == std::this_thread::get_id());
    REQUIRE(thread_of[1] != std::this_thread::get_id());  // --sync-bn: a thread of its own
    REQUIRE(threads_of == std::vector<int>{n, n});
  }
  REQUIRE(compute_threads() == before);

  c.sync_bn = false, c.devices = "", c.compute_threads = 0, c.threads = 0;
  Trainer one(c, run_on(Device::cpu, DType::f32));
  REQUIRE(compute_threads() == default_compute_threads());
  REQUIRE(one.threads_description() ==
          "threads: " + std::to_string(std::max(1, int(std::thread::hardware_concurrency()))) +
              " decoding, " + std::to_string(default_compute_threads()) +
              " computing (--threads, --compute-threads)");
}

TEST_CASE("resume: a run keeps its compute threads unless they are given or the replicas "
          "changed") {
  TempDir dir;
  const std::string run = dir / "run";
  const int n = default_compute_threads() + 1;  // not what the default would give
  TrainConfig c = tiny_run_config(run, 64, 1);  // 2 steps of 32 an epoch
  c.val.clear(), c.limit_val = 0, c.log_every = 1000, c.compute_threads = n;
  RunLog log(dir / "log");
  REQUIRE(run_training(c, {}, log.f).config.compute_threads == n);
  auto resume = [&](int epochs, std::vector<std::string> given, auto&& change) {
    TrainConfig r;
    r.resume = run, r.epochs = epochs;
    change(r);
    given.insert(given.end(), {"resume", "epochs"});
    return run_training(r, given, log.f).config.compute_threads;
  };
  REQUIRE(resume(2, {}, [](TrainConfig&) {}) == n);  // kept: oneDNN's sums in the same order
  REQUIRE(resume(3, {"compute_threads"}, [](TrainConfig& r) { r.compute_threads = 1; }) == 1);
  // Other replicas: worked out again (the shards, so oneDNN's bits, change anyway).
  REQUIRE(resume(4, {"devices"}, [](TrainConfig& r) { r.devices = "cpu,cpu"; }) ==
          default_compute_threads());
}
