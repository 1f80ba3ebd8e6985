// The test runner: doctest, plus a listener that counts skipped test cases apart and prints
// the closing line "tests: N passed, N failed, N skipped". In CUDA builds a failing CUDA,
// cuDNN or cuBLAS call throws (kernels/check.h), so it fails its test case instead of
// aborting the process. CUTRAIN_TEST_ABORT_IN=TEXT aborts at the start of the first test case
// whose source file's name contains TEXT: a planted crash, with which bench/bundle/run.sh's
// test shows that one group's abort leaves the other groups' results intact. Under the GPU
// simulator (sim/README.md) each test case starts with the devices' sticky errors cleared, so
// that a kernel's fault fails its own test case and not every one after it (a GPU would need
// a new process).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>

#include "tests/test_util.h"

#if defined(CUTRAIN_SIM)
#include <cutrain_sim.h>
#endif

namespace {
struct Counts {
  int passed = 0, failed = 0, skipped = 0;
  bool skipping = false;                 // the running test case called skip()
  std::map<std::string, int> reasons;    // skip reason -> test cases
};
Counts& counts() {
  static Counts c;
  return c;
}

struct SummaryListener : doctest::IReporter {
  explicit SummaryListener(const doctest::ContextOptions&) {}
  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats&) override {}
  void test_case_start(const doctest::TestCaseData& tc) override {
    counts().skipping = false;
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
    Counts& c = counts();
    if (!s.testCaseSuccess)
      c.failed++;
    else if (c.skipping)
      c.skipped++;
    else
      c.passed++;
  }
  void test_case_exception(const doctest::TestCaseException&) override {}
  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}
  void log_assert(const doctest::AssertData&) override {}
  void log_message(const doctest::MessageData&) override {}
  void test_case_skipped(const doctest::TestCaseData&) override {}
};
}  // namespace

DOCTEST_REGISTER_LISTENER("cutrain-summary", 1, SummaryListener);

namespace cutrain_test {
void skip(const std::string& reason) {
  counts().skipping = true;
  counts().reasons[reason]++;
}
}  // namespace cutrain_test

int main(int argc, char** argv) {
#if defined(CUTRAIN_CUDA)
  cutrain::set_cuda_errors_throw(true);
#endif
  doctest::Context context;
  context.applyCommandLine(argc, argv);
  const int rc = context.run();
  if (context.shouldExit()) return rc;
  const Counts& c = counts();
  for (const auto& kv : c.reasons)
    std::printf("skipped %d test case%s: %s\n", kv.second, kv.second == 1 ? "" : "s",
                kv.first.c_str());
  std::printf("tests: %d passed, %d failed, %d skipped\n", c.passed, c.failed, c.skipped);
  return rc != 0 || c.failed != 0 ? 1 : 0;
}
