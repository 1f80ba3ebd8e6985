// What the mpirun tests share (mpi_test.cpp on the CPU, mpi_gpu_test.cpp on GPUs): starting
// `mpirun --oversubscribe -np N cutrain ...` as a user does, and reading its metrics.
#pragma once
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tests/test_util.h"
#include "tests/train/cli_fixture.h"
#include "tests/train/train_fixture.h"

namespace cutrain_test {

// mpirun from PATH, or "" when it is not there.
inline std::string mpirun_exe() {
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/bin:/bin";
  for (size_t b = 0; b <= dirs.size();) {
    size_t e = dirs.find(':', b);
    if (e == std::string::npos) e = dirs.size();
    const std::filesystem::path p = std::filesystem::path(dirs.substr(b, e - b)) / "mpirun";
    if (::access(p.c_str(), X_OK) == 0) return p.string();
    b = e + 1;
  }
  return "";
}

// `mpirun --oversubscribe -np N cutrain args...` (N processes on two cores: oversubscribed),
// and the environment it needs: OpenMPI refuses to run as root unless told it may (CI runs as
// root).
inline std::vector<std::string> mpirun_argv(int np, const std::vector<std::string>& args) {
  std::vector<std::string> all = {mpirun_exe(), "--oversubscribe", "-np", std::to_string(np),
                                  cutrain_exe()};
  all.insert(all.end(), args.begin(), args.end());
  return all;
}
inline const std::vector<std::string> kMpirunEnv = {"OMPI_ALLOW_RUN_AS_ROOT=1",
                                             "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1"};

inline Ran run_mpirun(int np, const std::vector<std::string>& args, const std::string& log) {
  return run_process(mpirun_argv(np, args), log, kMpirunEnv);
}

// Every "loss" of a metrics file's step records, as written (the shortest text that reads
// back to the same double: equal text, equal bits).
inline std::vector<std::string> step_losses(const std::string& metrics) {
  std::vector<std::string> out;
  std::ifstream in(metrics);
  for (std::string line; std::getline(in, line);) {
    if (line.find("\"kind\":\"step\"") == std::string::npos) continue;
    const size_t b = line.find("\"loss\":") + 7;
    out.push_back(line.substr(b, line.find(',', b) - b));
  }
  return out;
}

// True, after marking the test skipped, when mpirun is not there.
inline bool no_mpirun() {
  if (!mpirun_exe().empty()) return false;
  skip("mpirun is not installed (make deps installs openmpi-bin)");
  return true;
}

// kTinyModel's description in dir/tiny.txt: its path.
inline std::string tiny_model(const TempDir& dir) {
  const std::string path = dir / "tiny.txt";
  std::ofstream(path) << kTinyModel;
  return path;
}


}  // namespace cutrain_test
