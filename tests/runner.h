// defines: the test runner's two halves. The test cases run in a child process, which reports
// each case's start, first failure, skips and end as lines on a pipe (Events); the parent
// (supervise) reads them, so it can name the case that was running when the child crashed,
// was killed or hung past the per-case time limit, start a new child at the case after it,
// and always print the closing lines (Tally): every failed case with its first failed
// assertion, the skip reasons, and "tests: N passed, N failed, N skipped".
//
// The child also prints one line as each case starts ("[case 12] name (file:line)"), flushed,
// so that even a kill of the whole process group (an outer `timeout -s KILL`) leaves the name
// of the case that was running in the output's last lines.
//
// CUTRAIN_TEST_IN_PROCESS=1 runs the cases in the runner's own process, without the parent
// (for gdb, rr or valgrind: one process to follow); a crash then ends the run, as it did before.
// CUTRAIN_TEST_TIMEOUT=S is the per-case limit in seconds (0: none); its default is in runner.cpp.
#pragma once
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace cutrain_test {

// The event lines, one per line, fields separated by tabs (tabs and newlines inside a field
// are written as spaces):
//   run                                  the run began (doctest is not only listing or counting)
//   start <index> <file> <line> <name>   a case began: index counts from 1 over the cases that
//                                        pass the filters, as doctest's --first does
//   fail <text>                          the running case's failed assertion, message or
//                                        exception (only the first counts)
//   skip <reason>                        the running case skipped itself
//   end <passed|failed|skipped>          the running case ended
//   done                                 the run ended
// Tally reads them, in whichever process they were written.
class Tally {
 public:
  void apply(const std::string& line);
  // The running case ended without its "end": the process that ran it crashed (`why`, e.g.
  // "crashed: SIGSEGV"), was killed, or was stopped by the time limit. Counted as failed.
  void abandon(const std::string& why);
  // Prints the skip reasons, the failed cases and the "tests:" line to stdout.
  void print_closing_lines() const;

  bool running() const { return running_; }
  bool began() const { return began_; }
  bool done() const { return done_; }
  long last_index() const { return index_; }  // the index of the case started last (0: none)
  std::string current() const;                // "name (file:line)" of the case started last
  int failed() const { return int(failures_.size()); }

 private:
  struct Failure {
    std::string name, where, first;
  };
  int passed_ = 0, skipped_ = 0;
  std::vector<Failure> failures_;
  std::map<std::string, int> reasons_;  // skip reason -> cases
  bool began_ = false, done_ = false, running_ = false;
  long index_ = 0;
  std::string name_, where_, first_;
};

// Where the child's listener sends its event lines: a pipe to the parent, or (in process) a
// Tally of its own. Thread-safe: a test's threads may fail assertions at once.
class Events {
 public:
  static Events& get();
  void to_fd(int fd) { fd_ = fd; }
  void send(const std::string& kind, const std::vector<std::string>& fields = {});
  Tally& local() { return local_; }

 private:
  std::mutex mutex_;
  int fd_ = -1;
  Tally local_;
};

// Runs `child(first)` in forked child processes, from the case numbered `first` (1: all),
// reading their events, until the run is done; returns the runner's exit status. `child`
// sends its events to `events_fd` (Events::to_fd) and returns doctest's status. Called at the
// start of main, before any thread exists.
int supervise(const std::function<int(long first, int events_fd)>& child, long first);

}  // namespace cutrain_test
