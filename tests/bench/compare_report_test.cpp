// bench/compare.sh's table and the proof behind each PyTorch row ([peer-fair]), without a GPU:
// recorded run folders in, the table out (tests/bench/compare_report_test.py, any python3, no
// torch); compare.sh --report-only on those folders; and, where PyTorch 2.x is installed in
// .venv-bench (bench/README.md), torch_reference.py's tuned step trained on the CPU, printing
// every proof line and passing, and its step in fp16 on the CPU (tests/bench/tuned_step_test.py).
// Skipped, saying why, without it (CI has no PyTorch).
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "tests/data/temp_dir.h"
#include "tests/test_util.h"
#include "tests/train/cli_fixture.h"
#include "tests/train/fashion_mnist_data.h"
#include "tests/train/train_fixture.h"

using namespace cutrain_test;
namespace fs = std::filesystem;

namespace {

const std::string kFixtures = "tests/bench/compare_report_test.py";

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// .venv-bench's python when it has PyTorch 2.x (bench/README.md makes it); "" otherwise, after
// skip() with the reason (CI has no PyTorch).
std::string torch2_python(const TempDir& dir) {
  const fs::path python = repo_root() / ".venv-bench" / "bin" / "python";
  if (fs::exists(python) &&
      run_process({python.string(), "-c",
                   "import sys, torch; sys.exit(int(torch.__version__.split('.')[0]) < 2)"},
                  dir / "probe.log").status == 0)
    return python.string();
  skip(python.string() + " with PyTorch 2.x is missing (bench/README.md makes it; CI has none)");
  return "";
}

}  // namespace

TEST_CASE("compare report: medians, bounds, set-up columns and proof checks from recorded runs") {
  TempDir dir;
  const Ran r = run_process({"/usr/bin/env", "python3", (repo_root() / kFixtures).string()},
                            dir / "unittest.log");
  INFO(r.output);
  REQUIRE(r.status == 0);
  REQUIRE(contains(r.output, "OK"));
}

TEST_CASE("compare report: compare.sh --report-only writes the table of recorded runs again") {
  TempDir dir;
  const std::string runs = dir / "runs";
  REQUIRE(run_process({"/usr/bin/env", "python3", (repo_root() / kFixtures).string(), runs},
                      dir / "fixture.log").status == 0);
  const Ran r = run_process({"/usr/bin/env", "bash", (repo_root() / "bench/compare.sh").string(),
                             "--report-only", runs}, dir / "report.log");
  INFO(r.output);
  REQUIRE(r.status == 0);
  REQUIRE(contains(r.output, "## Batch 128"));
  REQUIRE(contains(r.output, "| torch-tuned-graph (cuda graph) | 1 | 120,000 |"));
  REQUIRE(contains(r.output, "FAIL: 1 graph breaks in the timed run"));
  REQUIRE(contains(r.output, "proof: replays 4677 of 4680 steps"));
}

TEST_CASE("compare report: the tuned PyTorch step, fp16 on the CPU: skips on overflow, equals "
          "eager, compiled whole with no graph break (PyTorch 2.x)") {
  TempDir dir;
  const std::string python = torch2_python(dir);
  if (python.empty()) return;
  const Ran r = run_process({python, (repo_root() / "tests/bench/tuned_step_test.py").string(),
                             cutrain_exe()},
                            dir / "tuned_step.log");
  INFO(r.output);
  REQUIRE(r.status == 0);
}

TEST_CASE("compare report: the tuned PyTorch step on the CPU prints every proof line and passes") {
  TempDir dir;
  const std::string python = torch2_python(dir);
  if (python.empty()) return;
  // cutrain's configuration of a tiny run, which torch_reference.py reads
  const FashionMnistFiles& fm = fashion_mnist_jpegs();
  write_text(dir / "tiny.model", kTinyModel);
  const std::string run = dir / "cutrain";
  REQUIRE(run_cutrain({"train", "--train", fm.train, "--val", fm.test, "--limit-train", "128",
                       "--limit-val", "64", "--model", dir / "tiny.model", "--batch", "32",
                       "--epochs", "1", "--device", "cpu", "--out", run},
                      dir / "cutrain.log")
              .status == 0);
  const std::string out = dir / "torch";
  const Ran r = run_process({python, (repo_root() / "bench/torch_reference.py").string(),
                             "--config", run + "/config.json", "--cutrain", cutrain_exe(),
                             "--mode", "tuned-graph", "--device", "cpu", "--workers", "1",
                             "--out", out},
                            dir / "torch.log");
  INFO(r.output);
  REQUIRE(r.status == 0);
  for (const char* line :
       {"proof: tuned-graph on cpu: ran eager; torch 2.", "memory format channels_last",
        "proof: graph captured no (not run: CUDA graphs need a CUDA device); replays 0 of 4 steps",
        "proof: one tuned step against one eager step, same batch and state: largest parameter "
        "difference 0 (0 of the step's largest change)",
        "proof: timed run: graph breaks 0, unique graphs 0, recompiles 0, cudagraph skips 0",
        "proof: sync debug mode not run: CUDA only", "proof: PASS"})
    REQUIRE(contains(r.output, line));
  REQUIRE(fs::exists(out + "/checkpoint.pt"));  // one per epoch, as cutrain's
}
