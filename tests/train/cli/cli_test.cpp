// The cutrain program's answers to a user's mistakes (train/cli/cli.h): a message that says what
// is wrong and what to do, no source location, exit status 2; an unknown option gets the
// likely intended one; a bug (cutrain::Error) keeps its file:line and exits 1.
#include <sys/resource.h>

#include <CLI/CLI.hpp>

#include <cstdio>

#include "tests/data/temp_dir.h"
#include "tests/test_util.h"
#include "tests/train/cli_fixture.h"
#include "tests/train/fashion_mnist_data.h"
#include "tests/train/train_fixture.h"
#include "train/cli/cli.h"
#include "train/cli/commands.h"

using namespace cutrain;
using namespace cutrain_test;

TEST_CASE("cutrain: each user mistake is a plain message and exit status 2") {
  const FashionMnistFiles& fm = fashion_mnist_jpegs();
  TempDir dir;
  const std::string out = dir / "run", log = dir / "log";
  struct Case {
    std::vector<std::string> args;
    std::string says;
  };
  const std::vector<Case> cases = {
      {{"train", "--trian", fm.train}, "cutrain train: unknown option --trian (did you mean --train?)"},
      {{"train", "--train", fm.train, "--epoch", "3"}, "(did you mean --epochs?)"},
      {{"train", "--train", fm.train, "--batch", "abc"}, "--batch"},
      {{"train", "--train", dir / "no-such.txt", "--out", out},
       "image list '" + dir / "no-such.txt" + "' does not exist"},
      {{"train", "--train", fm.train, "--threads", "400", "--out", out},
       "--threads must be in [0, 256], got 400"},
      {{"train", "--train", fm.train, "--lr", "1e30", "--out", out},
       "--lr must be a finite number in [0, 10]"},
      {{"train", "--train", fm.train, "--wd", "inf", "--out", out},
       "--wd must be a finite number in [0, 1]"},
      {{"train", "--train", fm.train, "--size", "100000", "--out", out},
       "--size must be in [0, 4096], got 100000"},
      {{"eval", "--checkpoint", dir / "none", "--data", fm.test}, "no such file or folder"},
      {{"describe", "--input", "28x28"}, "--input must be HxWxC"},
      {{"eval", "--checkpoint", dir / "none", "--data", fm.test, "--threads", "400"},
       "cutrain eval: --threads: Value 400 not in range 0 to 256"},
      {{"pack", fm.test, dir / "p.h5", "--size", "100000"}, "--size: Value 100000 not in range"},
      {{"train", "--train", fm.train, "--allow-data-change", "--out", out},
       "--allow-data-change goes with --resume"},
  };
  for (const Case& c : cases) {
    const Ran r = run_cutrain(c.args, log);
    INFO(c.args[1] << " ...: exit " << r.status << ", printed:\n" << r.output);
    REQUIRE(r.status == kExitUsage);
    REQUIRE(r.output.find(c.says) != std::string::npos);
    REQUIRE(!names_source_location(r.output));
  }
  REQUIRE(run_cutrain({"train", "--help"}, log).status == 0);
}

TEST_CASE("cutrain: a thread that cannot start is a message, not std::terminate") {
  // A stack limit beyond the address space: every new thread's stack (its size is this limit)
  // fails to map, so the first thread a command starts cannot start. check-data's first is a
  // decode worker of its Loader; train's is the checkpoint writer (the loaders start with the
  // first step).
  const FashionMnistFiles& fm = fashion_mnist_jpegs();
  TempDir dir;
  auto no_threads = [] {
    const rlimit huge{rlim_t(1) << 47, rlim_t(1) << 47};
    ::setrlimit(RLIMIT_STACK, &huge);
  };
  Ran r = run_cutrain({"check-data", fm.test, "--threads", "3"}, dir / "log", no_threads);
  INFO("exit " << r.status << ", printed:\n" << r.output);
  REQUIRE(r.status == kExitUsage);
  REQUIRE(r.output.find("cutrain: cannot start decode thread 1 of 3: Resource temporarily "
                        "unavailable (the system's limit of threads, or no memory for another "
                        "one: lower --threads)") != std::string::npos);
  write_text(dir / "small.model", kSmallModel);
  r = run_cutrain({"train", "--train", fm.train, "--limit-train", "256", "--mean", "0.3", "--std",
                   "0.3", "--model", dir / "small.model", "--device", "cpu", "--out", dir / "run"},
                  dir / "log", no_threads);
  INFO("exit " << r.status << ", printed:\n" << r.output);
  REQUIRE(r.status == kExitUsage);
  REQUIRE(r.output.find("cutrain: cannot start the checkpoint writer thread") != std::string::npos);
}

TEST_CASE("closest_option: the long option a typo most likely meant, or none") {
  CLI::App app;
  TrainArgs a;
  CLI::App* train = add_train_command(app, a);
  REQUIRE(closest_option(*train, "--trian") == "--train");
  REQUIRE(closest_option(*train, "--epoch") == "--epochs");
  REQUIRE(closest_option(*train, "--lr=0.1") == "--lr");
  REQUIRE(closest_option(*train, "--label-smothing") == "--label-smoothing");
  REQUIRE(closest_option(*train, "--xyzzy") == "");
  REQUIRE(closest_option(*train, "-q") == "");
}

TEST_CASE("run_reporting_errors: a user's mistake exits 2 as is; a bug exits 1 with file:line") {
  TempDir dir;
  FILE* err = std::fopen((dir / "err").c_str(), "w+");
  REQUIRE(err != nullptr);
  REQUIRE(run_reporting_errors([] { return 7; }, err) == 7);
  REQUIRE(run_reporting_errors([]() -> int { USER_CHECK(false, "--batch is too big"); return 0; }, err) ==
          kExitUsage);
  REQUIRE(run_reporting_errors([]() -> int { CHECK(false, "an invariant broke"); return 0; }, err) ==
          kExitFailure);
  std::fclose(err);
  const std::string text = read_text(dir / "err");
  REQUIRE(text.find("cutrain: --batch is too big\n") != std::string::npos);
  REQUIRE(text.find("cutrain: internal error: tests/train/cli/cli_test.cpp:") != std::string::npos);
}
