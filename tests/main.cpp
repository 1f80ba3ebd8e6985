// The test runner: doctest, plus a listener that counts skipped test cases apart and prints
// the closing line "tests: N passed, N failed, N skipped".
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <map>
#include <string>

#include "tests/test_util.h"

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
  void test_case_start(const doctest::TestCaseData&) override { counts().skipping = false; }
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
