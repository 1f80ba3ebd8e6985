// `cutrain train` and `cutrain pack` when the machine says no: a write that fails (a full
// disk, met here as the file size limit of RLIMIT_FSIZE, which needs no root and no special file
// system) ends the run with the path and the system's reason, once, without HDF5's error stack
// and without a record of a checkpoint that is not there; a pack is one message, exit 2, and
// nothing left under its name. The final line names best.h5 only when it exists.
#include <signal.h>
#include <sys/resource.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "tests/data/temp_dir.h"
#include "tests/test_util.h"
#include "tests/train/cli_fixture.h"
#include "tests/train/train_fixture.h"
#include "train/cli/cli.h"
#include "train/run/run.h"

using namespace cutrain;
using namespace cutrain_test;
namespace fs = std::filesystem;

namespace {

// No file may grow past 32 KiB, and the signal that would kill the process for trying is
// ignored, so write() fails with EFBIG ("File too large") the way a full disk fails with
// ENOSPC. Runs in the child between fork and exec: async-signal-safe calls only.
void small_files_only() {
  struct sigaction ignore = {};
  ignore.sa_handler = SIG_IGN;
  ::sigaction(SIGXFSZ, &ignore, nullptr);
  const rlimit limit{32 << 10, 32 << 10};
  ::setrlimit(RLIMIT_FSIZE, &limit);
}

}  // namespace

TEST_CASE("cutrain train: a write that fails ends the run with the path and the reason, once") {
  const FashionMnistFiles& fm = fashion_mnist_jpegs();
  TempDir dir;
  write_text(dir / "small.model", kSmallModel);  // a checkpoint of ~9,000 parameters: > 32 KiB
  const std::string run = dir / "run";
  const Ran r = run_cutrain({"train", "--train", fm.train, "--limit-train", "128", "--model",
                             dir / "small.model", "--batch", "32", "--epochs", "1", "--mean",
                             "0.3", "--std", "0.3", "--device", "cpu", "--threads", "2",
                             "--log-every", "1000", "--out", run},
                            dir / "log", small_files_only);
  INFO("exit " << r.status << ", printed:\n" << r.output);
  REQUIRE(r.status == kExitUsage);
  const std::string first = checkpoint_path(run, 4);  // 4 steps an epoch
  REQUIRE(r.output.find("cannot write '" + first + "': File too large") != std::string::npos);
  REQUIRE(count_of(r.output, first) == 1);  // said once
  REQUIRE(r.output.find("HDF5") == std::string::npos);
  REQUIRE(r.output.find("infinite loop") == std::string::npos);
  REQUIRE(!names_source_location(r.output));
  // Nothing half written is left, and no record names a checkpoint that is not there.
  for (const fs::directory_entry& e : fs::directory_iterator(run)) {
    INFO(e.path());
    REQUIRE(e.path().filename().string().find(".h5") == std::string::npos);
  }
  REQUIRE(read_text(run + "/metrics.jsonl").find("\"checkpoint\"") == std::string::npos);
}

TEST_CASE("cutrain pack: a write that fails is one message with the pack and the reason, exit 2") {
  const FashionMnistFiles& fm = fashion_mnist_jpegs();
  TempDir dir;
  // 2,000 images of 28x28 (1.5 MB) fail in the images; 100 (78 KB) in the file's last writes.
  for (const char* n : {"2000", "100"}) {
    INFO(n << " images");
    write_text(dir / "few.txt", "");
    {
      std::ifstream all(fm.train);
      std::ofstream few(dir / "few.txt");
      std::string line;
      for (int i = 0; i < std::atoi(n) && std::getline(all, line); i++)
        few << fs::path(fm.train).parent_path().string() << "/" << line << "\n";
    }
    const std::string pack = dir / "p.h5";
    const Ran r = run_cutrain({"pack", dir / "few.txt", pack, "--size", "28", "--channels", "1"},
                              dir / "log", small_files_only);
    INFO("exit " << r.status << ", printed:\n" << r.output);
    REQUIRE(r.status == kExitUsage);  // not an internal error, and no crash on the way out
    REQUIRE(r.output.find("'" + pack + "': File too large") != std::string::npos);
    REQUIRE(count_of(r.output, "File too large") == 1);
    REQUIRE(r.output.find(".tmp") == std::string::npos);  // the temporary file is not named
    REQUIRE(r.output.find("errno") == std::string::npos);  // nor HDF5's stack
    REQUIRE(!names_source_location(r.output));
    for (const fs::directory_entry& e : fs::directory_iterator(dir.path())) {
      INFO(e.path());
      REQUIRE(e.path().filename().string().find("p.h5") == std::string::npos);
    }
  }
}

TEST_CASE("run_training: the final line names best.h5 only when there is one") {
  TempDir dir;
  TrainConfig c = tiny_run_config(dir / "no-val", 64, 1);
  c.val.clear(), c.limit_val = 0, c.log_every = 1000;
  const std::string log = dir / "log";
  FILE* out = std::fopen(log.c_str(), "w");
  REQUIRE(out != nullptr);
  run_training(c, {}, out);
  std::fclose(out);
  std::string text = read_text(log);
  INFO(text);
  REQUIRE(text.find("checkpoints in " + dir / "no-val" + "; metrics: ") != std::string::npos);
  REQUIRE(text.find("(best: ") == std::string::npos);

  TrainConfig v = tiny_run_config(dir / "val", 64, 1);  // with validation: a best model
  v.log_every = 1000;
  out = std::fopen(log.c_str(), "w");
  run_training(v, {}, out);
  std::fclose(out);
  text = read_text(log);
  REQUIRE(text.find("(best: " + best_checkpoint_path(dir / "val") + ")") != std::string::npos);
  // The checkpoint's record follows the checkpoint: the file it names exists.
  std::istringstream lines(read_text(dir / "val" + "/metrics.jsonl"));
  int records = 0;
  for (std::string line; std::getline(lines, line);)
    if (line.find("\"kind\":\"checkpoint\"") != std::string::npos) {
      records++;
      REQUIRE(line.find(checkpoint_path(dir / "val", 2)) != std::string::npos);
    }
  REQUIRE(records == 1);
  REQUIRE(fs::exists(checkpoint_path(dir / "val", 2)));
}
