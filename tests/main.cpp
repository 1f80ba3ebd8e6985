// The test runner: doctest, run under a supervising parent (tests/runner.h), with a listener
// that prints a line as each case starts, reports each case's start, first failure, skip and
// end to the parent, and counts skipped cases apart; the parent prints the closing lines (the
// failed cases with their first failed assertion, the skip reasons, "tests: N passed, N failed,
// N skipped") whatever happened to the process that ran them. In CUDA builds a failing CUDA,
// cuDNN or cuBLAS call throws (kernels/check.h), so it fails its test case instead of
// aborting the process. CUTRAIN_TEST_ABORT_IN=TEXT aborts at the start of the first test case
// whose source file's name contains TEXT: a planted crash, with which the runner's test and
// bench/bundle/run.sh's show that a crash is named and the cases after it still run. Under
// the GPU simulator (sim/README.md) each test case starts with the devices' sticky errors
// cleared, so that a kernel's fault fails its own test case and not every one after it (a GPU
// would need a new process).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "tests/runner.h"
#include "tests/test_util.h"

#if defined(CUTRAIN_SIM)
#include <cutrain_sim.h>
#endif

using cutrain_test::Events;

namespace {
bool g_skipping = false;  // the running test case called skip()

std::string where(const char* file, int line) { return std::string(file) + ":" + std::to_string(line); }

struct SummaryListener : doctest::IReporter {
  const doctest::ContextOptions& opt;
  long started = 0;      // cases started by this process
  bool failed = false;   // the running case sent its first failure
  bool crashed = false;  // doctest caught a fatal signal: the process ends after this case

  explicit SummaryListener(const doctest::ContextOptions& o) : opt(o) {}
  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override { Events::get().send("run"); }
  void test_run_end(const doctest::TestRunStats&) override {
    if (!crashed) Events::get().send("done");
  }
  void test_case_start(const doctest::TestCaseData& tc) override {
    g_skipping = false;
    failed = false;
    const long index = std::max(1L, long(opt.first)) + started++;
    std::printf("[case %ld] %s (%s:%d)\n", index, tc.m_name, tc.m_file.c_str(), tc.m_line);
    std::fflush(stdout);
    Events::get().send("start", {std::to_string(index), tc.m_file.c_str(),
                                 std::to_string(tc.m_line), tc.m_name});
#if defined(CUTRAIN_SIM)
    cutrain_sim::reset_errors();
#endif
    const char* plant = std::getenv("CUTRAIN_TEST_ABORT_IN");
    if (plant != nullptr && *plant != 0 && std::strstr(tc.m_file.c_str(), plant) != nullptr) {
      std::fprintf(stderr, "CUTRAIN_TEST_ABORT_IN=%s: aborting in \"%s\" (a planted fault)\n",
                   plant, tc.m_name);
      std::abort();
    }
  }
  void test_case_reenter(const doctest::TestCaseData&) override {}
  void test_case_end(const doctest::CurrentTestCaseStats& s) override {
    std::fflush(stdout);
    if (crashed) return;  // the parent names the crash from the process's end
    Events::get().send("end", {!s.testCaseSuccess ? "failed" : g_skipping ? "skipped" : "passed"});
  }
  void fail(const std::string& text) {
    if (failed) return;
    failed = true;
    Events::get().send("fail", {text});
  }
  void test_case_exception(const doctest::TestCaseException& e) override {
    if (e.is_crash) crashed = true;
    fail(std::string(e.is_crash ? "crashed: " : "threw: ") + e.error_string.c_str());
  }
  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}
  void log_assert(const doctest::AssertData& a) override {
    if (!a.m_failed) return;
    std::string text = where(a.m_file, a.m_line) + ": " + doctest::assertString(a.m_at) + "( " +
                       a.m_expr + " )";
    if (a.m_threw)
      text += " threw: " + std::string(a.m_exception.c_str());
    else if (a.m_decomp.size() != 0)
      text += " values: " + std::string(a.m_decomp.c_str());
    fail(text);
  }
  void log_message(const doctest::MessageData& m) override {
    if (m.m_severity & doctest::assertType::is_warn) return;
    fail(where(m.m_file, m.m_line) + ": " + m.m_string.c_str());
  }
  void test_case_skipped(const doctest::TestCaseData&) override {}
};
}  // namespace

DOCTEST_REGISTER_LISTENER("cutrain-summary", 1, SummaryListener);

namespace cutrain_test {
void skip(const std::string& reason) {
  g_skipping = true;
  Events::get().send("skip", {reason});
}
}  // namespace cutrain_test

int main(int argc, char** argv) {
#if defined(CUTRAIN_CUDA)
  cutrain::set_cuda_errors_throw(true);
#endif
  // The cases from `first` on (1: all): a process started again after a crash begins at the
  // case after the one that crashed.
  const auto run = [&](long first, int events_fd) {
    if (events_fd >= 0) Events::get().to_fd(events_fd);
    doctest::Context context;
    context.applyCommandLine(argc, argv);
    if (first > 1) context.setOption("first", int(first));
    const int rc = context.run();
    std::fflush(stdout);
    return rc;
  };
  long first = 1;  // the command line's own --first, if any (doctest's spellings of it)
  for (int i = 1; i < argc; i++)
    for (const char* opt : {"--first=", "-f=", "--dt-first=", "-dt-f="})
      if (std::strncmp(argv[i], opt, std::strlen(opt)) == 0)
        first = std::max(1L, std::atol(argv[i] + std::strlen(opt)));
  const char* in_process = std::getenv("CUTRAIN_TEST_IN_PROCESS");
  if (in_process == nullptr || std::strcmp(in_process, "1") != 0)
    return cutrain_test::supervise(run, first);
  const int rc = run(first, -1);
  const cutrain_test::Tally& t = Events::get().local();
  if (!t.began()) return rc;  // listing, counting or --help
  t.print_closing_lines();
  return rc != 0 || t.failed() != 0 ? 1 : 0;
}
