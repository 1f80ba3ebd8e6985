// defines: cutrain_exe(), the cutrain program beside the test binary, and run_cutrain(), which
// runs it as a real process and returns its exit status and everything it printed (through
// run_process(), which runs any program).
#pragma once
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "tests/data/temp_dir.h"
#include "tests/test_util.h"

namespace cutrain_test {

// The cutrain program beside this test binary (both are in bin/).
inline std::string cutrain_exe() {
  return (bin_dir() / "cutrain").string();
}

struct Ran {
  int status = -1;     // the exit status; 128 + signal when a signal ended it
  std::string output;  // stdout and stderr, interleaved as written
};

// Starts the program argv[0] (a path) with its stdout and stderr on the file descriptor `out`
// (which the child keeps and the caller still owns), with `env` ("NAME=value") added to this
// process's environment; returns its pid. `in_child`, when given, runs in the child between
// fork and exec: it may only make async-signal-safe calls (setrlimit).
inline pid_t start_process(std::vector<std::string> all, int out,
                           std::vector<std::string> env = {}, void (*in_child)() = nullptr) {
  // Everything the child needs is made before fork(): between fork and exec a child of a
  // multithreaded process may not allocate.
  std::vector<char*> argv;
  for (std::string& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (char** e = environ; *e; e++) envp.push_back(*e);
  for (std::string& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    ::dup2(out, 1), ::dup2(out, 2);
    if (in_child) in_child();
    ::execve(argv[0], argv.data(), envp.data());
    ::_exit(127);
  }
  return pid;
}

// Waits for a started process: its exit status, 128 + signal when a signal ended it.
inline int wait_process(pid_t pid) {
  int status = 0;
  if (pid <= 0 || ::waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Runs the program argv[0] to its end, its output to `log` (a file); env and in_child as
// start_process's.
inline Ran run_process(std::vector<std::string> all, const std::string& log,
                       std::vector<std::string> env = {}, void (*in_child)() = nullptr) {
  const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  Ran r;
  r.status = wait_process(start_process(std::move(all), fd, std::move(env), in_child));
  ::close(fd);
  r.output = read_text(log);
  return r;
}

// Runs `cutrain args...` to its end, its output to `log` (a file); in_child as run_process's.
inline Ran run_cutrain(const std::vector<std::string>& args, const std::string& log,
                       void (*in_child)() = nullptr) {
  std::vector<std::string> all = {cutrain_exe()};
  all.insert(all.end(), args.begin(), args.end());
  return run_process(all, log, {}, in_child);
}

}  // namespace cutrain_test
