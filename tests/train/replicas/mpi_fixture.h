// What the mpirun tests share (mpi_test.cpp, timeout_test.cpp on the CPU, mpi_gpu_test.cpp and
// timeout_gpu_test.cpp on GPUs): starting `mpirun --oversubscribe -np N cutrain ...` as a user
// does, reading its metrics, and stopping one of its ranks (stop_rank_1).
#pragma once
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tests/test_util.h"
#include "tests/train/cli_fixture.h"
#include "tests/train/train_fixture.h"
#include "train/checkpoint/checkpoint.h"

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

// The pid of rank `rank` of a run started by mpirun: the cutrain process whose environment says
// OMPI_COMM_WORLD_RANK=rank and whose command line names `out`; -1 when none (yet).
inline pid_t rank_pid(int rank, const std::string& out) {
  namespace fs = std::filesystem;
  for (const fs::directory_entry& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::string cmd = read_text(e.path() / "cmdline"), env = read_text(e.path() / "environ");
    if (cmd.find(out) == std::string::npos || cmd.rfind(cutrain_exe(), 0) != 0) continue;
    const std::string key = std::string("OMPI_COMM_WORLD_RANK=") + std::to_string(rank) + '\0';
    if (env.find(key) != std::string::npos) return pid_t(std::stol(name));
  }
  return -1;
}

// What stop_rank_1 saw.
struct StoppedRank {
  std::string output;     // mpirun's (every rank's) output
  bool stopped = false;   // rank 1 was found and stopped
  bool reported = false;  // the output said `continue_on` (and rank 1 was continued)
  bool ended = false;     // the job ended by itself (else it was killed after 120 s)
  int status = -1;        // mpirun's wait status
};

// The stopped-rank scenario of --collective-timeout: `mpirun -np 2 cutrain args...` (a run
// that writes checkpoints into `run` and trains for a while); once it has written one, rank 1
// is stopped with SIGSTOP where it is (a hung file read, a stuck driver call); once the output
// says `continue_on` (by default the collective timeout's error; "asking the other ranks": a
// rank that is late, not gone) it is continued; the job must then end by itself. Bounded: a
// job still running after 120 s is killed (and `ended` says so). `env`: more of mpirun's
// environment, which its ranks inherit.
inline StoppedRank stop_rank_1(const std::vector<std::string>& args, const std::string& run,
                               const std::string& log,
                               const std::string& continue_on = "collective timeout",
                               const std::vector<std::string>& env = {}) {
  const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  std::vector<std::string> all_env = kMpirunEnv;
  all_env.insert(all_env.end(), env.begin(), env.end());
  const pid_t mpirun = start_process(mpirun_argv(2, args), fd, all_env);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  StoppedRank s;
  pid_t rank1 = -1;
  auto ended = [&] {
    if (!s.ended && ::waitpid(mpirun, &s.status, WNOHANG) == mpirun) s.ended = true;
    return s.ended;
  };
  while (rank1 < 0 && !ended() && std::chrono::steady_clock::now() < deadline) {
    if (!cutrain::newest_checkpoint(run).empty()) rank1 = rank_pid(1, run);
    if (rank1 < 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (rank1 > 0) s.stopped = ::kill(rank1, SIGSTOP) == 0;
  while (!ended() && std::chrono::steady_clock::now() < deadline) {
    if (!s.reported && read_text(log).find(continue_on) != std::string::npos) {
      s.reported = true;
      if (rank1 > 0) ::kill(rank1, SIGCONT);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (!s.ended) {  // stuck: end it all, both ranks too
    const pid_t rank0 = rank_pid(0, run);
    ::kill(mpirun, SIGKILL);
    if (rank0 > 0) ::kill(rank0, SIGKILL);
    if (rank1 > 0) ::kill(rank1, SIGKILL);
    ::waitpid(mpirun, &s.status, 0);
  }
  ::close(fd);
  s.output = read_text(log);
  // (Said just before mpirun ended, it was not seen in the loop.)
  s.reported = s.reported || s.output.find(continue_on) != std::string::npos;
  return s;
}

// stop_rank_1 went as it should: rank 0 said so in one message naming the step, the call and
// rank 1, which did not answer, and the job failed and ended by itself.
inline void require_timeout_reported(const StoppedRank& s, int timeout) {
  INFO("mpirun's output:\n" << s.output);
  REQUIRE(s.stopped);
  REQUIRE(s.ended);
  REQUIRE(s.reported);
  REQUIRE(!(WIFEXITED(s.status) && WEXITSTATUS(s.status) == 0));  // the job failed
  // (How long it waited is measured: the timeout, and a poll's gap.)
  REQUIRE(s.output.find("cutrain: collective timeout: rank 0 waited ") != std::string::npos);
  REQUIRE(s.output.find(" s at step ") != std::string::npos);
  REQUIRE(s.output.find("Rank 1 did not answer within 5 s: stopped, or stuck outside the "
                        "collectives") != std::string::npos);
  REQUIRE(s.output.find("(--collective-timeout " + std::to_string(timeout) + ")") !=
          std::string::npos);
  REQUIRE(s.output.find("internal error") == std::string::npos);
}

}  // namespace cutrain_test
