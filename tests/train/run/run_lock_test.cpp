// One writer per run folder, with real processes (train/run/run_setup.h, data/folder_lock.h):
// two `cutrain train` started together into one folder, of which exactly one runs and trains as
// a run alone would, bit for bit; a --resume of a run that is live is refused, naming it; and
// after the live run is killed with SIGKILL (the kernel drops its lock), the resume works.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fcntl.h>
#include <filesystem>
#include <thread>
#include <vector>

#include "tests/data/temp_dir.h"
#include "tests/test_util.h"
#include "tests/train/cli_fixture.h"
#include "tests/train/train_fixture.h"
#include "train/checkpoint/checkpoint.h"
#include "train/cli/cli.h"

using namespace cutrain;
using namespace cutrain_test;
namespace fs = std::filesystem;

namespace {

// `cutrain train` on the first `images` Fashion-MNIST training images with the tiny model,
// fixed seed and threads (so two runs give the same bits), into `out`, plus `more` options.
std::vector<std::string> train_args(const std::string& model, const std::string& out,
                                    int images, int epochs, std::vector<std::string> more = {}) {
  std::vector<std::string> a = {
      cutrain_exe(), "train", "--train", fashion_mnist_jpegs().train, "--limit-train",
      std::to_string(images), "--model", model, "--batch", "32", "--epochs",
      std::to_string(epochs), "--seed", "5", "--device", "cpu", "--threads", "1",
      "--compute-threads", "1", "--log-every", "1000", "--out", out};
  a.insert(a.end(), more.begin(), more.end());
  return a;
}

struct Started {
  pid_t pid;
  int fd;
  std::string log;
};

Started start(const std::vector<std::string>& args, const std::string& log) {
  const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  return {start_process(args, fd), fd, log};
}

Ran finish(const Started& s) {
  Ran r;
  r.status = wait_process(s.pid);
  ::close(s.fd);
  r.output = read_text(s.log);
  return r;
}

}  // namespace

TEST_CASE("run lock: two trainings started together into one folder: exactly one runs, as alone") {
  TempDir dir;
  write_text(dir / "tiny.model", kTinyModel);
  const std::string model = dir / "tiny.model";
  // Both started before either can have locked the folder; which one wins is the kernel's.
  const Started a = start(train_args(model, dir / "run", 192, 2), dir / "a.log");
  const Started b = start(train_args(model, dir / "run", 192, 2), dir / "b.log");
  const Ran ra = finish(a), rb = finish(b);
  INFO("a: exit " << ra.status << "\n" << ra.output << "\nb: exit " << rb.status << "\n"
                  << rb.output);
  REQUIRE(std::min(ra.status, rb.status) == 0);
  REQUIRE(std::max(ra.status, rb.status) == kExitUsage);
  const Ran& loser = ra.status ? ra : rb;
  // Refused by the lock while the winner ran (naming it, or, in the instant between its lock
  // and its note of who it is, saying it has just started), or, had it started only after the
  // winner had ended, by the winner's checkpoints: either way before it wrote a thing.
  REQUIRE((loser.output.find("is in use by another process (pid ") != std::string::npos ||
           loser.output.find("is in use by another process (it has just started)") !=
               std::string::npos ||
           loser.output.find("holds checkpoints of an earlier run") != std::string::npos));
  REQUIRE(!names_source_location(loser.output));

  // The winner's checkpoint is a run alone's, bit for bit.
  const Ran solo = run_process(train_args(model, dir / "solo", 192, 2), dir / "solo.log");
  REQUIRE(solo.status == 0);
  require_same_state(read_checkpoint(newest_checkpoint(dir / "run")),
                     read_checkpoint(newest_checkpoint(dir / "solo")));
}

TEST_CASE("run lock: a resume of a live run is refused; after SIGKILL the resume works") {
  TempDir dir;
  write_text(dir / "tiny.model", kTinyModel);
  const std::string run = dir / "run";
  // 4 steps an epoch, 40 epochs, a checkpoint every 2 steps: live for a while.
  const Started live = start(train_args(dir / "tiny.model", run, 128, 40,
                                        {"--checkpoint-every", "2"}),
                             dir / "live.log");
  // Wait until it has written a checkpoint, then stop it where it is: it holds the lock, and
  // nothing it does can race with what follows.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  bool saved = false;
  while (!saved && std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (::waitpid(live.pid, &status, WNOHANG) == live.pid) break;  // ended early: reported below
    saved = !newest_checkpoint(run).empty();
    if (!saved) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ::kill(live.pid, saved ? SIGSTOP : SIGKILL);
  INFO("the live run's output:\n" << read_text(live.log));
  REQUIRE(saved);

  const Ran refused = run_cutrain({"train", "--resume", run}, dir / "refused.log");
  INFO(refused.output);
  REQUIRE(refused.status == kExitUsage);
  REQUIRE(refused.output.find("--resume " + run + " is in use by another process (pid " +
                              std::to_string(live.pid) + " on ") != std::string::npos);
  REQUIRE(refused.output.find("cutrain train, since ") != std::string::npos);

  ::kill(live.pid, SIGKILL);  // kill -9: the kernel releases its lock, however it stopped
  REQUIRE(finish(live).status == 128 + SIGKILL);
  const Ran resumed = run_cutrain({"train", "--resume", run}, dir / "resumed.log");
  INFO(resumed.output);
  REQUIRE(resumed.status == 0);
  REQUIRE(resumed.output.find("resuming from ") != std::string::npos);
  REQUIRE(read_checkpoint(newest_checkpoint(run)).step == 160);  // 40 epochs of 4 steps
}
