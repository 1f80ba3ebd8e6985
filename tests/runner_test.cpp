// The test runner itself (tests/runner.h): this binary run again as a real process on the
// "runner fixture" cases below, which do something only when CUTRAIN_TEST_FIXTURE says what
// (in `make test` they pass, doing nothing). Whatever ends a case (a failed assertion, a crash,
// a kill, a hang past the per-case limit, an exit, a kill of the whole process group), the
// output names it, and the cases after it still run where a process is left to run them.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>

#include "tests/data/temp_dir.h"
#include "tests/test_util.h"

using namespace cutrain_test;
namespace fs = std::filesystem;

namespace {
// What the fixture cases are asked to do: "" in a normal run.
std::string fixture() {
  const char* s = std::getenv("CUTRAIN_TEST_FIXTURE");
  return s == nullptr ? "" : s;
}
}  // namespace

TEST_CASE("runner fixture: passes") {}

TEST_CASE("runner fixture: fails its second assertion") {
  if (fixture() != "fail") return;
  REQUIRE(1 + 1 == 2);
  REQUIRE(std::string("two") == "three");
}

TEST_CASE("runner fixture: skips") {
  if (fixture().empty()) return;
  skip("a fixture's reason");
}

TEST_CASE("runner fixture: ends its process") {
  const std::string how = fixture();
  if (how == "abort") std::abort();
  if (how == "segv") ::raise(SIGSEGV);
  if (how == "kill") ::raise(SIGKILL);  // as the OOM killer would
  if (how == "exit") std::_Exit(3);
  if (how == "hang")
    for (;;) ::pause();
  if (how == "orphan") {  // a process started and never waited for
    // It is `sleep 1000` before the case ends (the pipe closes at its exec), so that the
    // runner, finding it left over, names it so.
    int exec_done[2];
    REQUIRE(::pipe2(exec_done, O_CLOEXEC) == 0);
    if (::fork() == 0) {
      ::execlp("sleep", "sleep", "1000", static_cast<char*>(nullptr));
      std::_Exit(127);
    }
    ::close(exec_done[1]);
    char c;
    while (::read(exec_done[0], &c, 1) < 0 && errno == EINTR) {
    }
    ::close(exec_done[0]);
  }
}

TEST_CASE("runner fixture: runs after it") {}

namespace {
struct Run {
  int status = -1;  // the runner's exit status (-1: it did not exit)
  std::string output;
};

// This binary on the fixture cases, with `env` before it; stdout and stderr together.
Run run_fixture(const TempDir& dir, const std::string& env) {
  const std::string self = fs::read_symlink("/proc/self/exe").string();
  const std::string log = dir / "log";
  const int st = std::system((env + " '" + self + "' -tc='runner fixture: *' > '" + log +
                              "' 2>&1").c_str());
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, read_text(log)};
}

// The output's last `n` lines.
std::string tail(const std::string& s, int n) {
  std::string::size_type p = s.size();
  if (p > 0 && s[p - 1] == '\n') p--;
  for (int i = 0; i < n && p != std::string::npos && p > 0; i++) p = s.rfind('\n', p - 1);
  return p == std::string::npos ? s : s.substr(p + 1);
}

bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}
}  // namespace

TEST_CASE("runner: a failed case is listed at the end with its first failed assertion") {
  TempDir dir;
  const Run r = run_fixture(dir, "CUTRAIN_TEST_FIXTURE=fail");
  INFO(r.output);
  REQUIRE(r.status == 1);
  const std::string end = tail(r.output, 5);
  INFO(end);
  REQUIRE(has(end, "failed test cases (1):"));
  REQUIRE(has(end, "runner_test.cpp:"));
  REQUIRE(has(end, "runner fixture: fails its second assertion"));
  REQUIRE(has(end, "REQUIRE( std::string(\"two\") == \"three\" ) values: two == three"));
  REQUIRE(has(end, "skipped 1 test case: a fixture's reason"));
  REQUIRE(has(tail(r.output, 1), "tests: 3 passed, 1 failed, 1 skipped"));
  // every case named as it starts, in order
  REQUIRE(has(r.output, "[case 1] runner fixture: passes ("));
  REQUIRE(has(r.output, "[case 5] runner fixture: runs after it ("));
}

TEST_CASE("runner: the same closing lines in one process (CUTRAIN_TEST_IN_PROCESS=1)") {
  TempDir dir;
  const Run r = run_fixture(dir, "CUTRAIN_TEST_IN_PROCESS=1 CUTRAIN_TEST_FIXTURE=fail");
  INFO(r.output);
  REQUIRE(r.status == 1);
  REQUIRE(has(tail(r.output, 5), "runner fixture: fails its second assertion"));
  REQUIRE(has(tail(r.output, 1), "tests: 3 passed, 1 failed, 1 skipped"));
}

TEST_CASE("runner: a crash, a kill or an exit names the case, and the cases after it run") {
  const struct {
    const char* how;
    const char* says;
  } cases[] = {{"abort", "crashed (SIGABRT)"},
               {"segv", "crashed (SIGSEGV)"},
               {"kill", "was killed (SIGKILL"},
               {"exit", "exited with status 3"}};
  for (const auto& c : cases) {
    TempDir dir;
    const Run r = run_fixture(dir, std::string("CUTRAIN_TEST_FIXTURE=") + c.how);
    INFO(std::string(c.how) << ":\n" << r.output);
    REQUIRE(r.status == 1);
    // said where it happened, then the rest run in a new process
    const auto said = r.output.find(std::string("cutrain_tests: the test process ") + c.says);
    REQUIRE(said != std::string::npos);
    REQUIRE(r.output.find(" in case 4, runner fixture: ends its process (", said) !=
            std::string::npos);
    REQUIRE(has(r.output, "the cases after it run in a new process"));
    REQUIRE(r.output.find("[case 5] runner fixture: runs after it") >
            r.output.find("the cases after it run in a new process"));
    const std::string end = tail(r.output, 5);
    INFO(end);
    REQUIRE(has(end, "failed test cases (1):"));
    REQUIRE(has(end, "runner fixture: ends its process"));
    REQUIRE(has(tail(r.output, 1), "tests: 3 passed, 1 failed, 1 skipped"));
  }
}

TEST_CASE("runner: a case past the per-case limit is stopped and named, and the rest run") {
  TempDir dir;
  // The hanging case never ends; the cases around it do nothing, far below the 10 s limit.
  const Run r = run_fixture(dir, "CUTRAIN_TEST_TIMEOUT=10 CUTRAIN_TEST_FIXTURE=hang");
  INFO(r.output);
  REQUIRE(r.status == 1);
  REQUIRE(has(r.output, "case 4, runner fixture: ends its process ("));
  REQUIRE(has(r.output, "ran past the per-case limit of 10 s (CUTRAIN_TEST_TIMEOUT)"));
  REQUIRE(has(tail(r.output, 5), "was stopped at the per-case limit of 10 s"));
  REQUIRE(has(tail(r.output, 1), "tests: 3 passed, 1 failed, 1 skipped"));
}

TEST_CASE("runner: a process the tests leave running is killed, and named") {
  TempDir dir;
  const Run r = run_fixture(dir, "CUTRAIN_TEST_FIXTURE=orphan");
  INFO(r.output);
  REQUIRE(r.status == 0);
  REQUIRE(has(r.output, "left running by the tests: sleep 1000"));
  REQUIRE(has(tail(r.output, 1), "tests: 4 passed, 0 failed, 1 skipped"));
}

TEST_CASE("runner: killed with its whole process group, the output's last case line names the case") {
  // As `timeout -s KILL make test` does: nothing is left to print closing lines, so the line
  // each case prints as it starts is what names it.
  TempDir dir;
  const std::string self = fs::read_symlink("/proc/self/exe").string();
  const std::string log = dir / "log";
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::setpgid(0, 0);
    ::setenv("CUTRAIN_TEST_FIXTURE", "hang", 1);
    ::setenv("CUTRAIN_TEST_TIMEOUT", "0", 1);
    if (std::freopen(log.c_str(), "w", stdout) == nullptr) std::_Exit(126);
    ::dup2(::fileno(stdout), 2);
    ::execl(self.c_str(), self.c_str(), "-tc=runner fixture: *", static_cast<char*>(nullptr));
    std::_Exit(127);
  }
  // Waits (bounded) for the hanging case to start: it prints its line before it runs.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (!has(read_text(log), "[case 4]") && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ::kill(-pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  const std::string output = read_text(log);
  INFO(output);
  const auto last = output.rfind("[case ");
  REQUIRE(last != std::string::npos);
  const std::string hanging = "[case 4] runner fixture: ends its process (";
  REQUIRE(output.compare(last, hanging.size(), hanging) == 0);
}
