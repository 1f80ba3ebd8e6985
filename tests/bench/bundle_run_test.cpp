// bench/bundle/run.sh, the GPU host's runner, run here on this build's programs
// (CUTRAIN_BUNDLE_BIN) as a real process: its dry run without a GPU, and a planted crash in one
// group of GPU tests, which its row must name while every other group's row stays intact. A fake nvidia-smi on the
// PATH decides whether run.sh believes in a GPU; CUDA_VISIBLE_DEVICES=-1 keeps a real one out
// of it, so the test behaves the same on a GPU host.
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "tests/data/temp_dir.h"
#include "tests/test_util.h"

using namespace cutrain_test;
namespace fs = std::filesystem;

namespace {

// Runs `command` under sh; returns its exit status (-1 when it did not exit normally).
int shell(const std::string& command) {
  const int status = std::system(command.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// The [gpu] test cases of this binary per source file, from doctest's own listing: what run.sh
// must turn into groups.
std::map<std::string, int> gpu_cases_by_file(const TempDir& dir) {
  const std::string listing = dir / "listing.xml";
  REQUIRE(shell("'" + (bin_dir() / "cutrain_tests").string() +
                "' -ltc -tc='*[gpu]*' --reporters=xml > '" + listing + "'") == 0);
  std::map<std::string, int> files;
  const std::string xml = read_text(listing);
  // (the names may hold a raw '>': match the attribute, not the element's end)
  const std::regex file_re("<TestCase name=\"[^\"]*\" filename=\"([^\"]*)\"");
  for (auto it = std::sregex_iterator(xml.begin(), xml.end(), file_re);
       it != std::sregex_iterator(); ++it)
    files[fs::path((*it)[1].str()).stem().string()]++;
  return files;
}

// A folder holding a fake nvidia-smi: -L lists one GPU when `gpu`, none otherwise.
std::string fake_nvidia_smi(const TempDir& dir, bool gpu) {
  const std::string folder = dir / (gpu ? "gpu-bin" : "nogpu-bin");
  write_text(folder + "/nvidia-smi",
             std::string("#!/bin/sh\ncase \"$1\" in -L) ") +
                 (gpu ? "echo 'GPU 0: Fake GPU (UUID: GPU-0)'" : ":") +
                 " ;; *) echo 'Fake GPU, 0.0' ;; esac\n");
  fs::permissions(folder + "/nvidia-smi", fs::perms::owner_all);
  return folder;
}

// run.sh OUT tests on this build, with `env` before it; returns its exit status.
int run_sh(const std::string& env, const std::string& out, const std::string& log) {
  const std::string cmd = env + " CUDA_VISIBLE_DEVICES=-1 CUTRAIN_BUNDLE_BIN='" +
                          bin_dir().string() + "' bash '" +
                          (repo_root() / "bench/bundle/run.sh").string() + "' '" + out +
                          "' tests > '" + log + "' 2>&1";
  return shell(cmd);
}

// The rows of summary.md's table of groups: group -> its cells.
std::map<std::string, std::vector<std::string>> group_rows(const std::string& summary) {
  std::map<std::string, std::vector<std::string>> rows;
  std::istringstream in(summary);
  bool table = false;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("## GPU test groups", 0) == 0) table = true;
    else if (line.rfind("## ", 0) == 0) table = false;
    if (!table || line.rfind("| ", 0) != 0 || line.rfind("| group", 0) == 0 ||
        line.rfind("| ---", 0) == 0)
      continue;
    std::vector<std::string> cells;
    std::stringstream ss(line.substr(2));
    for (std::string c; std::getline(ss, c, '|');) {
      while (!c.empty() && c.back() == ' ') c.pop_back();
      while (!c.empty() && c.front() == ' ') c.erase(0, 1);
      cells.push_back(c);
    }
    rows[cells.at(0)] = cells;
  }
  return rows;
}

}  // namespace

TEST_CASE("bundle run.sh: without a GPU every group of GPU tests says skipped, in seconds, exit 0") {
  TempDir dir;
  const std::map<std::string, int> files = gpu_cases_by_file(dir);
  REQUIRE(!files.empty());
  const std::string out = dir / "out";
  const int rc = run_sh("PATH='" + fake_nvidia_smi(dir, false) + "':\"$PATH\"", out,
                        dir / "log");
  INFO(read_text(dir / "log"));
  REQUIRE(rc == 0);
  const std::string summary = read_text(out + "/summary.md");
  INFO(summary);
  const auto rows = group_rows(summary);
  // every [gpu] test case in exactly one group: the groups are the files, with their counts
  REQUIRE(rows.size() == files.size());
  for (const auto& [file, count] : files) {
    INFO(file);
    REQUIRE(rows.count(file) == 1);
    const std::vector<std::string>& r = rows.at(file);
    REQUIRE(r.at(1) == "0");                       // passed
    REQUIRE(r.at(2) == "0");                       // failed
    REQUIRE(r.at(3) == std::to_string(count));     // skipped
    REQUIRE(r.at(6) == "skipped: nvidia-smi lists no GPU");
  }
}

TEST_CASE("bundle run.sh: a crash planted in one group is named, and every other row is intact") {
  TempDir dir;
  const std::map<std::string, int> files = gpu_cases_by_file(dir);
  REQUIRE(files.size() >= 2);
  const std::string planted = files.begin()->first;  // aborts at its first test case
  const std::string out = dir / "out";
  const int rc = run_sh("CUTRAIN_TEST_ABORT_IN='" + planted + "' PATH='" +
                            fake_nvidia_smi(dir, true) + "':\"$PATH\"",
                        out, dir / "log");
  INFO(read_text(dir / "log"));
  REQUIRE(rc == 1);
  const std::string summary = read_text(out + "/summary.md");
  INFO(summary);
  const auto rows = group_rows(summary);
  for (const auto& [file, count] : files) {
    INFO(file);
    REQUIRE(rows.count(file) == 1);
    const std::vector<std::string>& r = rows.at(file);
    if (file == planted) {
      // the crash named, and the group's other cases run after it in a new process
      REQUIRE(r.at(1) == "0");
      REQUIRE(r.at(2) == std::to_string(count));
      REQUIRE(r.at(5) == "1");
      REQUIRE(r.at(6).find("the test process crashed (SIGABRT)") != std::string::npos);
    } else {
      // a "GPU" that cannot be used: each GPU test fails (CUTRAIN_EXPECT_GPU), none skips
      REQUIRE(r.at(1) == "0");
      REQUIRE(r.at(2) == std::to_string(count));
      REQUIRE(r.at(3) == "0");
      REQUIRE(r.at(6).find("CUTRAIN_EXPECT_GPU is set") != std::string::npos);
    }
  }
  // a crash is not run again one case per process (the runner went on past it): no "#k" rows
  REQUIRE(rows.count(planted + " #1") == 0);
  REQUIRE(fs::exists(out + "/tests.log"));
}
