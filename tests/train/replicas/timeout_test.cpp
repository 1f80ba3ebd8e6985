// The collective timeout (--collective-timeout; train/replicas/mpi.h, ring.h, the engine's
// --sync-bn rendezvous): a replica or rank that waits longer than the timeout for the others
// stops with one message naming the step, the collective and whom it waited for.
//   - the CPU ring alone: a rank whose neighbour never comes;
//   - replicas in one process with --sync-bn: one held by a test hook before its forward;
//   - mpirun -np 2 on the CPU: one rank stopped with SIGSTOP mid-run (the other says so and
//     the job ends, its newest checkpoint intact for --resume); continued while rank 0 asks
//     where it is (late, not gone: the run goes on); a long evaluation on rank 0
//     (which the others wait for with no deadline) under a short timeout, which must not trip;
//     and the whole job stopped for longer than the timeout, then continued: no trip either;
//   - Deadline, the timeout's clock, on given times.
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/data/temp_dir.h"
#include "tests/test_util.h"
#include "tests/train/cli_fixture.h"
#include "tests/train/replica_fixture.h"
#include "tests/train/replicas/mpi_fixture.h"
#include "tests/train/train_fixture.h"
#include "train/checkpoint/checkpoint.h"
#include "train/engine/trainer.h"
#include "train/replicas/deadline.h"
#include "train/replicas/ring.h"

using namespace cutrain;
using namespace cutrain_test;
namespace fs = std::filesystem;

namespace {
// The mpirun cases' run: `cutrain train` of the tiny model on 128 Fashion-MNIST images (4 steps
// an epoch) for `epochs` epochs, a checkpoint every 2 steps, one thread of each kind per rank,
// --collective-timeout 2, into `run`.
std::vector<std::string> tiny_run(const TempDir& dir, const std::string& run, int epochs) {
  return {"train", "--train", fashion_mnist_jpegs().train, "--limit-train", "128", "--model",
          tiny_model(dir), "--batch", "32", "--epochs", std::to_string(epochs), "--device", "cpu",
          "--threads", "1", "--compute-threads", "1", "--checkpoint-every", "2", "--log-every",
          "1000", "--collective-timeout", "2", "--out", run};
}
}  // namespace

TEST_CASE("timeout: Deadline counts the waits between polls, not a gap where the process was stopped") {
  using std::chrono::milliseconds;
  const Deadline::Clock::time_point t0{};
  Deadline d(1.0, t0);
  REQUIRE(!d.passed(t0 + milliseconds(250)));
  REQUIRE(!d.passed(t0 + milliseconds(500)));
  // Stopped for an hour: not counted.
  REQUIRE(!d.passed(t0 + milliseconds(500 + 3600 * 1000)));
  REQUIRE(d.waited() == doctest::Approx(0.5));
  // Polled on: past the limit after another 0.5 s and a little.
  const auto resumed = t0 + milliseconds(500 + 3600 * 1000);
  REQUIRE(!d.passed(resumed + milliseconds(250)));
  REQUIRE(!d.passed(resumed + milliseconds(500)));
  REQUIRE(d.passed(resumed + milliseconds(750)));
  REQUIRE(d.waited() == doctest::Approx(1.25));
  // A gap just under kGapSeconds still counts; none for a limit of 0.
  Deadline g(1.0, t0);
  REQUIRE(g.passed(t0 + milliseconds(int(Deadline::kGapSeconds * 1000) - 1)));
  Deadline never(0, t0);
  REQUIRE(!never.passed(t0 + milliseconds(1000)));
  REQUIRE(!never.passed(t0 + milliseconds(1900)));
  REQUIRE(never.waited() == doctest::Approx(1.9));
}

TEST_CASE("timeout: a CPU ring rank whose neighbour never comes stops, naming it") {
  Ring ring(2);
  ring.set_timeout(0.2);
  ring.at_step(41);
  std::vector<float> data(8, 1.0f);
  // Rank 1 never enters: rank 0 sends its chunk, then waits for rank 1's.
  REQUIRE_USER_ERROR(ring.all_reduce(0, data.data(), 8, DType::f32, true),
                     "collective timeout: replica 0 waited 0.2 s at step 42 in the all-reduce "
                     "for replica 1, which never sent its chunk (--collective-timeout 0.2)");
  // The ring is aborted for every rank, with the same message (a UserError: the cause is a
  // replica that stopped, not cutrain).
  REQUIRE_USER_ERROR(ring.all_reduce(1, data.data(), 8, DType::f32, true),
                     "replica 0 waited 0.2 s at step 42");
}

TEST_CASE("timeout: --sync-bn replicas in one process: one held back, the other stops naming it") {
  TempDir dir;
  TrainConfig c = replica_config(dir / "run", 2, kTinyModel);  // BatchNorm: sums to meet on
  c.sync_bn = true, c.collective_timeout = 0.5;
  Trainer t(c, run_on(Device::cpu, DType::f32));
  // Replica 1 is held before its forward until the engine has given up on it (bounded, so a
  // broken engine fails this test instead of hanging it).
  t.on_forward_backward = [&](int rank) {
    if (rank != 1) return;
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!t.engine().sync_failed() && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  };
  REQUIRE_USER_ERROR(t.step(), "collective timeout: replica 0 waited 0.5 s at step 1 in "
                               "--sync-bn's BatchNorm sums for replica 1, which never brought "
                               "theirs (--collective-timeout 0.5)");
  REQUIRE(t.engine().sync_failed());
}

TEST_CASE("timeout: mpirun -np 2, rank 1 stopped mid-run: rank 0 says so, the job ends") {
  if (no_mpirun()) return;
  TempDir dir;
  const std::string run = dir / "run";
  // 4 steps an epoch, a checkpoint every 2 steps, and epochs without end in the test's time (the
  // whole run would take hours): rank 1 is surely stopped mid-run, however busy the machine.
  const StoppedRank s = stop_rank_1(tiny_run(dir, run, 1000000), run, dir / "log");
  require_timeout_reported(s, 2);
  // Its newest checkpoint is complete, and a run resumes from it (in one process).
  // (Two epochs more than it had begun, the run shortened to end there.)
  const std::string newest = newest_checkpoint(run);
  REQUIRE(!newest.empty());
  const int64_t step = read_checkpoint(newest).step;
  REQUIRE(step > 0);
  const int64_t epochs = step / 4 + 2;
  const Ran resumed =
      run_cutrain({"train", "--resume", run, "--epochs", std::to_string(epochs)}, dir / "resumed");
  INFO(resumed.output);
  REQUIRE(resumed.status == 0);
  REQUIRE(read_checkpoint(newest_checkpoint(run)).step == epochs * 4);
}

TEST_CASE("timeout: mpirun -np 2, rank 1 late but not gone: rank 0 asks, it answers, the run goes on") {
  if (no_mpirun()) return;
  TempDir dir;
  const std::string run = dir / "run";
  // Rank 1 is stopped past the timeout and continued as soon as rank 0 says it asks the other
  // ranks where they are: the collective completes while rank 0 waits for the answers. That
  // wait is 60 s here (5 s in a run), so that how fast this test and mpirun's forwarding of
  // rank 0's words react on a loaded machine cannot decide the outcome.
  // (100 epochs of 4 steps: rank 1 is stopped at the first checkpoint, step 2.)
  const int epochs = 100;
  const StoppedRank s = stop_rank_1(tiny_run(dir, run, epochs), run, dir / "log",
                                    "asking the other ranks",
                                    {"CUTRAIN_COLLECTIVE_ASK_SECONDS=60"});
  INFO("mpirun's output:\n" << s.output);
  REQUIRE(s.stopped);
  REQUIRE(s.reported);
  REQUIRE(s.ended);
  REQUIRE(WIFEXITED(s.status));
  REQUIRE(WEXITSTATUS(s.status) == 0);
  REQUIRE(s.output.find("cutrain: rank 0 waited ") != std::string::npos);
  REQUIRE(s.output.find("asking the other ranks where they are (60 s)") != std::string::npos);
  REQUIRE(s.output.find("completed after all: a rank was late, not gone; the run goes on") !=
          std::string::npos);
  REQUIRE(s.output.find("collective timeout:") == std::string::npos);
  REQUIRE(read_checkpoint(newest_checkpoint(run)).step == epochs * 4);
}

TEST_CASE("timeout: mpirun -np 2, rank 0 evaluating alone for longer than the timeout: no trip") {
  if (no_mpirun()) return;
  TempDir dir;
  const std::string run = dir / "run";
  const FashionMnistFiles& fm = fashion_mnist_jpegs();
  // The default model over 10,000 validation images on rank 0, rank 1 waiting for it, against
  // a timeout of 2 s; the steps themselves take milliseconds.
  const Ran r = run_mpirun(2, {"train", "--train", fm.train, "--limit-train", "128", "--val",
                               fm.test, "--limit-val", "10000", "--model", "default",
                               "--batch", "32", "--epochs", "1", "--device", "cpu",
                               "--threads", "1", "--compute-threads", "1",
                               "--collective-timeout", "2", "--out", run},
                           dir / "log");
  INFO(r.output);
  REQUIRE(r.status == 0);
  REQUIRE(r.output.find("collective timeout") == std::string::npos);
  REQUIRE(r.output.find("asking the other ranks") == std::string::npos);
  // It did wait longer than the timeout: the evaluation's own record says how long it took.
  std::ifstream metrics(run + "/metrics.jsonl");
  double eval_seconds = 0;
  for (std::string line; std::getline(metrics, line);) {
    const nlohmann::json j = nlohmann::json::parse(line);
    if (j["kind"] == "eval") eval_seconds = j["seconds"].get<double>();
  }
  REQUIRE(eval_seconds > 2);
}

TEST_CASE("timeout: mpirun -np 2, the whole job stopped longer than the timeout: no trip") {
  if (no_mpirun()) return;
  TempDir dir;
  const std::string run = dir / "run";
  const std::string log = dir / "log";
  // As a shell's Ctrl-Z then fg, or a scheduler suspending the job: both ranks stopped for
  // longer than the timeout while the run trains, then continued; it goes on to its end.
  const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  // (150 epochs of 4 steps: both ranks are stopped at the first checkpoint, step 2.)
  const int epochs = 150;
  const pid_t mpirun = start_process(mpirun_argv(2, tiny_run(dir, run, epochs)), fd, kMpirunEnv);
  pid_t rank0 = -1, rank1 = -1;
  int status = -1;
  bool ended = false;
  while (!ended && (rank0 < 0 || rank1 < 0)) {
    if (!newest_checkpoint(run).empty()) rank0 = rank_pid(0, run), rank1 = rank_pid(1, run);
    ended = ::waitpid(mpirun, &status, WNOHANG) == mpirun;
    if (!ended) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  REQUIRE(!ended);  // (it had not ended before it was stopped)
  REQUIRE(::kill(rank0, SIGSTOP) == 0);
  REQUIRE(::kill(rank1, SIGSTOP) == 0);
  // The stop is the scenario, not a synchronization: it lasts at least this long.
  std::this_thread::sleep_for(std::chrono::seconds(5));
  ::kill(rank0, SIGCONT);
  ::kill(rank1, SIGCONT);
  // Its end, bounded: a job that hangs is killed after 120 s, and the test fails.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (!ended && std::chrono::steady_clock::now() < deadline) {
    ended = ::waitpid(mpirun, &status, WNOHANG) == mpirun;
    if (!ended) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (!ended) {
    ::kill(mpirun, SIGKILL), ::kill(rank0, SIGKILL), ::kill(rank1, SIGKILL);
    ::waitpid(mpirun, &status, 0);
  }
  ::close(fd);
  const std::string output = read_text(log);
  INFO(output);
  REQUIRE(ended);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  REQUIRE(output.find("collective timeout") == std::string::npos);
  REQUIRE(read_checkpoint(newest_checkpoint(run)).step == epochs * 4);
}
