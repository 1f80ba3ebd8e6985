// `make sim-test` (sim/sim.mk) and the bundle's run.sh (bench/bundle/run.sh) pick the GPU test
// cases by name (-tc='*[gpu]*'), so a GPU case without "[gpu]" in its name would never run on
// the simulator or in a GPU window, silently. This checks the rule on every test file: a case
// whose body calls REQUIRE_GPU() (or REQUIRE_CUDNN(), which calls it) is named "... [gpu]: ...",
// and a case named so calls it. (This file's own cases are CPU cases: their names say "the
// gpu tag", never the tag itself.)
#include <filesystem>
#include <regex>
#include <string>
#include <vector>

#include "tests/data/temp_dir.h"  // read_text
#include "tests/test_util.h"

namespace fs = std::filesystem;

namespace {

// The test cases of one file's text whose name and body disagree: "file: name" each.
std::vector<std::string> misnamed_cases(const std::string& file, const std::string& text) {
  // A case runs from its TEST_CASE to the next one (or the end); its name is the string
  // literals that open it, concatenated.
  static const std::regex open(R"re(\nTEST_CASE\w*\(\s*((?:"(?:[^"\\]|\\.)*"\s*)+))re");
  static const std::regex literal(R"re("((?:[^"\\]|\\.)*)")re");
  std::vector<std::string> bad;
  const std::string t = "\n" + text;
  std::vector<std::pair<size_t, std::string>> cases;  // (where, name)
  for (auto it = std::sregex_iterator(t.begin(), t.end(), open); it != std::sregex_iterator();
       ++it) {
    std::string name;
    const std::string lits = (*it)[1].str();
    for (auto l = std::sregex_iterator(lits.begin(), lits.end(), literal);
         l != std::sregex_iterator(); ++l)
      name += (*l)[1].str();
    cases.emplace_back(size_t(it->position()), name);
  }
  for (size_t i = 0; i < cases.size(); i++) {
    const size_t end = i + 1 < cases.size() ? cases[i + 1].first : t.size();
    const std::string body = t.substr(cases[i].first, end - cases[i].first);
    const bool gpu = body.find("REQUIRE_GPU()") != std::string::npos ||
                     body.find("REQUIRE_CUDNN()") != std::string::npos;
    const bool named = cases[i].second.find("[gpu]") != std::string::npos;
    if (gpu != named)
      bad.push_back(file + ": \"" + cases[i].second + "\" " +
                    (gpu ? "calls REQUIRE_GPU() but is not named [gpu]"
                         : "is named [gpu] but does not call REQUIRE_GPU()"));
  }
  return bad;
}


}  // namespace

TEST_CASE("tests: the gpu tag check finds a GPU case named otherwise, and the reverse") {
  const std::string text =
      "TEST_CASE(\"a [gpu]: fine\") {\n  REQUIRE_GPU();\n}\n"
      "TEST_CASE(\"b: runs on the GPU \"\n          \"unnamed\") {\n  REQUIRE_GPU();\n}\n"
      "TEST_CASE_TEMPLATE(\"c [gpu]: cuDNN\", T, float) {\n  REQUIRE_CUDNN();\n}\n"
      "TEST_CASE(\"d [gpu]: \\\"quoted\\\" but on the CPU\") {\n  REQUIRE(true);\n}\n"
      "TEST_CASE(\"e: the CPU\") {\n  REQUIRE(true);\n}\n";
  const std::vector<std::string> bad = misnamed_cases("x.cpp", text);
  REQUIRE(bad.size() == 2);
  REQUIRE(bad[0] ==
          "x.cpp: \"b: runs on the GPU unnamed\" calls REQUIRE_GPU() but is not named [gpu]");
  REQUIRE(bad[1] ==
        "x.cpp: \"d [gpu]: \\\"quoted\\\" but on the CPU\" is named [gpu] but does not call "
        "REQUIRE_GPU()");
}

TEST_CASE("tests: every GPU test case has the gpu tag in its name, so make sim-test runs it") {
  const fs::path root = cutrain_test::repo_root() / "tests";
  std::vector<std::string> bad;
  int gpu_files = 0;
  for (const auto& e : fs::recursive_directory_iterator(root)) {
    if (!e.is_regular_file() || e.path().extension() != ".cpp") continue;
    const std::string rel = fs::relative(e.path(), root.parent_path()).generic_string();
    if (rel == "tests/gpu_names_test.cpp") continue;  // this file's own examples
    const std::string text = cutrain_test::read_text(e.path().string());
    gpu_files += text.find("REQUIRE_GPU()") != std::string::npos;
    const std::vector<std::string> b = misnamed_cases(rel, text);
    bad.insert(bad.end(), b.begin(), b.end());
  }
  REQUIRE(gpu_files > 20);
  std::string report;
  for (const std::string& b : bad) report += b + "\n";
  INFO(report);
  REQUIRE(bad.empty());
}
