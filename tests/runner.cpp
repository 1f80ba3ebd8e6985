// The test runner's tally and its supervising parent (runner.h says what each half does).
#include "tests/runner.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

namespace cutrain_test {
namespace {

std::vector<std::string> split_tabs(const std::string& line) {
  std::vector<std::string> out;
  std::string::size_type a = 0;
  for (;;) {
    const auto b = line.find('\t', a);
    out.push_back(line.substr(a, b == std::string::npos ? std::string::npos : b - a));
    if (b == std::string::npos) return out;
    a = b + 1;
  }
}

// A field of an event line: tabs and newlines as spaces, at most 600 characters (the first
// failure of a long message is enough to find it in the output above).
std::string field(const std::string& s) {
  std::string out = s.size() > 600 ? s.substr(0, 600) + " ..." : s;
  for (char& c : out)
    if (c == '\t' || c == '\n' || c == '\r') c = ' ';
  return out;
}

}  // namespace

// ---------------------------------------------------------------- Tally

void Tally::apply(const std::string& line) {
  const std::vector<std::string> f = split_tabs(line);
  const std::string& kind = f[0];
  if (kind == "run") {
    began_ = true;
  } else if (kind == "start" && f.size() == 5) {
    running_ = true;
    index_ = std::atol(f[1].c_str());
    where_ = f[2] + ":" + f[3];
    name_ = f[4];
    first_.clear();
  } else if (kind == "fail" && f.size() == 2) {
    if (running_ && first_.empty()) first_ = f[1];
  } else if (kind == "skip" && f.size() == 2) {
    reasons_[f[1]]++;
  } else if (kind == "end" && f.size() == 2) {
    if (!running_) return;
    running_ = false;
    if (f[1] == "failed")
      failures_.push_back({name_, where_, first_.empty() ? "failed" : first_});
    else if (f[1] == "skipped")
      skipped_++;
    else
      passed_++;
  } else if (kind == "done") {
    done_ = true;
  }
}

void Tally::abandon(const std::string& why) {
  if (!running_) {
    failures_.push_back({"(between test cases, after " + current() + ")", "-", why});
    return;
  }
  running_ = false;
  failures_.push_back({name_, where_, first_.empty() ? why : why + "; before it: " + first_});
}

std::string Tally::current() const {
  return index_ == 0 ? std::string("the start") : "case " + std::to_string(index_) + ", " +
                                                      name_ + " (" + where_ + ")";
}

void Tally::print_closing_lines() const {
  for (const auto& kv : reasons_)
    std::printf("skipped %d test case%s: %s\n", kv.second, kv.second == 1 ? "" : "s",
                kv.first.c_str());
  if (!failures_.empty()) {
    std::printf("failed test cases (%zu):\n", failures_.size());
    for (const Failure& f : failures_)
      std::printf("  %s  %s\n      %s\n", f.where.c_str(), f.name.c_str(), f.first.c_str());
  }
  std::printf("tests: %d passed, %zu failed, %d skipped\n", passed_, failures_.size(), skipped_);
  std::fflush(stdout);
}

// ---------------------------------------------------------------- Events

Events& Events::get() {
  static Events e;
  return e;
}

void Events::send(const std::string& kind, const std::vector<std::string>& fields) {
  std::string line = kind;
  for (const std::string& s : fields) line += "\t" + field(s);
  std::lock_guard<std::mutex> lock(mutex_);
  if (fd_ < 0) {
    local_.apply(line);
    return;
  }
  line += "\n";
  // One write per line: a pipe keeps writes of up to PIPE_BUF bytes whole, and fields are cut
  // short enough for that; the loop only covers a signal's interruption.
  for (size_t done = 0; done < line.size();) {
    const ssize_t n = ::write(fd_, line.data() + done, line.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // the parent is gone: nobody left to tell
    done += size_t(n);
  }
}

// ---------------------------------------------------------------- supervise

namespace {

// The per-case time limit: long enough that no case comes near it on a busy machine (the
// slowest take 15 s in make test and 35 s in make sim-test alone on 2 cores: make slowest,
// make sim-slowest), short enough that a hang is named well within CI's time.
constexpr double kDefaultCaseLimitSeconds = 900;

double case_limit_seconds() {
  const char* s = std::getenv("CUTRAIN_TEST_TIMEOUT");
  if (s == nullptr || *s == 0) return kDefaultCaseLimitSeconds;
  char* end = nullptr;
  const double v = std::strtod(s, &end);
  if (end == s || *end != 0 || !(v >= 0)) {
    std::fprintf(stderr, "cutrain_tests: CUTRAIN_TEST_TIMEOUT=%s is not a number of seconds; "
                         "using %g\n", s, kDefaultCaseLimitSeconds);
    return kDefaultCaseLimitSeconds;
  }
  return v;
}

volatile sig_atomic_t g_stop_signal = 0;  // SIGTERM, SIGINT or SIGHUP received
int g_wake[2] = {-1, -1};                 // a byte per signal: wakes the poll below

void on_signal(int sig) {
  if (sig != SIGCHLD) g_stop_signal = sig;
  const int saved = errno;
  const char b = 0;
  (void)!::write(g_wake[1], &b, 1);
  errno = saved;
}

std::string signal_name(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev != nullptr ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

std::string describe_status(int status) {
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    const std::string name = signal_name(sig);
    if (sig == SIGKILL) return "was killed (SIGKILL: the OOM killer, or a kill from outside)";
    return "crashed (" + name + ")";
  }
  return "exited with status " + std::to_string(WEXITSTATUS(status));
}

// The processes this one adopted (it is their subreaper): what the tests started and left
// behind when the test process ended.
std::vector<pid_t> adopted_children() {
  std::vector<pid_t> out;
  DIR* d = ::opendir("/proc");
  if (d == nullptr) return out;
  const pid_t self = ::getpid();
  while (dirent* e = ::readdir(d)) {
    const pid_t pid = pid_t(std::atol(e->d_name));
    if (pid <= 0) continue;
    std::ifstream stat("/proc/" + std::string(e->d_name) + "/stat");
    std::string s;
    std::getline(stat, s);
    const auto close = s.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(s.substr(close + 1));
    char state = 0;
    long ppid = 0;
    rest >> state >> ppid;
    if (ppid == self && state != 'Z') out.push_back(pid);
  }
  ::closedir(d);
  return out;
}

std::string command_line(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/cmdline");
  std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  for (char& c : s)
    if (c == 0) c = ' ';
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s.size() > 120 ? s.substr(0, 120) + " ..." : s;
}

// Kills what the test process left running (its children, adopted when it ended, and theirs
// in turn), saying which; reaps every zombie.
void kill_leftovers() {
  for (int round = 0; round < 50; round++) {
    while (::waitpid(-1, nullptr, WNOHANG) > 0) {
    }
    const std::vector<pid_t> left = adopted_children();
    if (left.empty()) return;
    for (pid_t p : left) {
      std::printf("cutrain_tests: killing process %d, left running by the tests: %s\n", int(p),
                  command_line(p).c_str());
      ::kill(p, SIGKILL);
    }
    std::fflush(stdout);
    for (pid_t p : left) ::waitpid(p, nullptr, 0);
  }
}

struct Child {
  pid_t pid = -1;
  int status = 0;
  bool exited = false;
};

// Reaps whatever ended: the test process (its status kept) or a process it left behind.
void reap(Child& c) {
  int st = 0;
  for (pid_t p; (p = ::waitpid(-1, &st, WNOHANG)) > 0;)
    if (p == c.pid) c.status = st, c.exited = true;
}

}  // namespace

int supervise(const std::function<int(long first, int events_fd)>& child, long first) {
  using Clock = std::chrono::steady_clock;
  const double limit = case_limit_seconds();
  // Processes the test process leaves behind become this one's children, so they can be
  // killed when it ends instead of running on (and holding make's output open).
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  if (::pipe2(g_wake, O_CLOEXEC | O_NONBLOCK) != 0) {
    std::perror("cutrain_tests: pipe");
    return 2;
  }
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGTERM, SIGINT, SIGHUP, SIGCHLD}) ::sigaction(sig, &sa, nullptr);

  Tally tally;
  int last_rc = 0;
  long progress_mark = -1;  // the last case index at which a new process was started
  for (;;) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) {
      std::perror("cutrain_tests: pipe");
      return 2;
    }
    std::fflush(stdout);
    std::fflush(stderr);
    Child c;
    c.pid = ::fork();
    if (c.pid < 0) {
      std::perror("cutrain_tests: fork");
      return 2;
    }
    if (c.pid == 0) {
      ::close(fds[0]);
      ::close(g_wake[0]);
      ::close(g_wake[1]);
      struct sigaction dfl {};
      dfl.sa_handler = SIG_DFL;
      for (int sig : {SIGTERM, SIGINT, SIGHUP, SIGCHLD}) ::sigaction(sig, &dfl, nullptr);
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the runner
      std::exit(child(first, fds[1]));
    }
    ::close(fds[1]);
    progress_mark = tally.last_index();

    std::string buffer;
    Clock::time_point case_began = Clock::now();
    bool timed_out = false, eof = false;
    while (!eof || !c.exited) {
      pollfd p[2] = {{eof ? -1 : fds[0], POLLIN, 0}, {g_wake[0], POLLIN, 0}};
      ::poll(p, 2, 1000);
      if (p[1].revents & POLLIN) {
        char sink[64];
        while (::read(g_wake[0], sink, sizeof sink) > 0) {
        }
      }
      reap(c);
      if (!eof && (p[0].revents & (POLLIN | POLLHUP))) {
        char chunk[4096];
        const ssize_t n = ::read(fds[0], chunk, sizeof chunk);
        if (n <= 0) {
          eof = true;
        } else {
          buffer.append(chunk, size_t(n));
          for (std::string::size_type nl; (nl = buffer.find('\n')) != std::string::npos;) {
            const bool was_running = tally.running();
            const long was_index = tally.last_index();
            tally.apply(buffer.substr(0, nl));
            buffer.erase(0, nl + 1);
            if (tally.running() && (!was_running || tally.last_index() != was_index))
              case_began = Clock::now();
          }
        }
      }
      // A test's grandchild may hold the pipe open after the test process ended.
      if (c.exited && !eof) {
        pollfd q = {fds[0], POLLIN, 0};
        if (::poll(&q, 1, 0) == 0) eof = true;
      }
      if (g_stop_signal != 0 && !c.exited) ::kill(c.pid, g_stop_signal);
      const double secs = std::chrono::duration<double>(Clock::now() - case_began).count();
      if (!c.exited && limit > 0 && tally.running() && secs > limit) {
        std::printf("\ncutrain_tests: %s ran past the per-case limit of %g s "
                    "(CUTRAIN_TEST_TIMEOUT); stopping its process\n",
                    tally.current().c_str(), limit);
        std::fflush(stdout);
        timed_out = true;
        ::kill(c.pid, SIGKILL);
        ::waitpid(c.pid, &c.status, 0);
        c.exited = true;
      }
    }
    ::close(fds[0]);
    kill_leftovers();
    last_rc = WIFEXITED(c.status) ? WEXITSTATUS(c.status) : 128 + WTERMSIG(c.status);

    if (!tally.began()) return last_rc;  // listing, counting, --help, or a bad option
    const std::string how = timed_out ? "was stopped at the per-case limit of " +
                                            std::to_string(int(limit)) + " s (a hang?)"
                                      : describe_status(c.status);
    if (g_stop_signal != 0) {
      const std::string why = "interrupted by " + signal_name(g_stop_signal);
      std::printf("\ncutrain_tests: %s while running %s\n", why.c_str(), tally.current().c_str());
      if (tally.running()) tally.abandon(why);
      tally.print_closing_lines();
      return 128 + g_stop_signal;
    }
    if (tally.done()) {
      // The cases ran to their end; a crash after them (static destructors) is a failure too.
      if (WIFSIGNALED(c.status)) {
        tally.abandon("the test process " + how + " after its last test case");
        break;
      }
      break;
    }
    const std::string why = "the test process " + how;
    std::printf("\ncutrain_tests: %s in %s; the cases after it run in a new process\n",
                why.c_str(), tally.current().c_str());
    const bool was_running = tally.running();
    tally.abandon(why);
    // Between cases with nothing run since the last start: starting again would repeat it.
    if (!was_running && tally.last_index() == progress_mark) break;
    first = tally.last_index() + 1;
  }
  tally.print_closing_lines();
  return tally.failed() != 0 || last_rc != 0 ? 1 : 0;
}

}  // namespace cutrain_test
