// The folders' include direction (DESIGN.md, "Folders"): kernels <- nn <- train and
// kernels <- data -> train. So kernels/ includes only kernels/; nn/ kernels/ and nn/; data/
// kernels/ and data/; train/ all four. tests/, bench/ and fuzz/ may include anything.
//
// Every .h/.cpp/.cu/.cuh/.inc under the four folders (subfolders too) is read for its
// `#include "..."` lines, and every line against the direction is reported as file:line with
// the rule it breaks, all of them at once. include_violations() is the check itself, tested
// first on texts that break each rule, then on a tree written for the purpose, so the scan of
// the repository is known to be able to fail.
#include <algorithm>
#include <filesystem>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "tests/data/temp_dir.h"
#include "tests/test_util.h"

namespace fs = std::filesystem;

namespace {

// What each library folder may include, in the direction's order; other folders have no rule.
const std::map<std::string, std::vector<std::string>> kAllowed = {
    {"kernels", {"kernels"}},
    {"nn", {"kernels", "nn"}},
    {"data", {"kernels", "data"}},
    {"train", {"kernels", "nn", "data", "train"}}};

// "nn/ may include kernels/ and nn/ only"
std::string rule_of(const std::string& folder) {
  const std::vector<std::string>& ok = kAllowed.at(folder);
  std::string r = folder + "/ may include ";
  for (size_t i = 0; i < ok.size(); i++)
    r += ok[i] + "/" + (i + 2 < ok.size() ? ", " : i + 1 < ok.size() ? " and " : "");
  return r + " only";
}

// The top folder of the file an include names, as the compiler finds it from `file` (both
// relative to the repository): a name with a folder is looked up from the repository root
// (-I.), unless it walks up with "..", which starts from the including file's folder; a bare
// name is a file beside the including one.
std::string target_folder(const fs::path& file, const std::string& name) {
  const bool from_file = name.find('/') == std::string::npos || name.rfind("..", 0) == 0;
  const fs::path target =
      (from_file ? file.parent_path() / name : fs::path(name)).lexically_normal();
  return target.empty() ? "" : target.begin()->string();
}

// Each `#include "..."` of `text` (the contents of `file`, a path relative to the repository)
// against its folder's rule: "file:line: includes NAME: RULE" per offending line.
std::vector<std::string> include_violations(const std::string& file, const std::string& text) {
  const fs::path path(file);
  const auto rule = kAllowed.find(path.empty() ? "" : path.begin()->string());
  if (rule == kAllowed.end()) return {};
  static const std::regex include(R"re(^\s*#\s*include\s*"([^"]+)")re");
  std::vector<std::string> found;
  std::istringstream lines(text);
  std::string line;
  for (int n = 1; std::getline(lines, line); n++) {
    std::smatch m;
    if (!std::regex_search(line, m, include)) continue;
    const std::vector<std::string>& ok = rule->second;
    if (std::find(ok.begin(), ok.end(), target_folder(path, m[1].str())) == ok.end())
      found.push_back(file + ":" + std::to_string(n) + ": includes " + m[1].str() + ": " +
                      rule_of(rule->first));
  }
  return found;
}

// Every source file under the four folders of `root`, in path order, checked.
struct TreeCheck {
  std::vector<std::string> violations;
  int files = 0;  // how many were read
};
TreeCheck check_tree(const fs::path& root) {
  static const std::set<std::string> sources = {".h", ".cpp", ".cu", ".cuh", ".inc"};
  std::vector<fs::path> files;
  for (const auto& folder : kAllowed) {
    if (!fs::is_directory(root / folder.first)) continue;
    for (const auto& e : fs::recursive_directory_iterator(root / folder.first))
      if (e.is_regular_file() && sources.count(e.path().extension().string()))
        files.push_back(e.path().lexically_relative(root));
  }
  std::sort(files.begin(), files.end());
  TreeCheck check;
  for (const fs::path& f : files) {
    const auto v = include_violations(f.string(), cutrain_test::read_text((root / f).string()));
    check.violations.insert(check.violations.end(), v.begin(), v.end());
    check.files++;
  }
  return check;
}

}  // namespace

TEST_CASE("include direction: each rule broken is reported with file:line and the rule") {
  SUBCASE("what is allowed") {
    REQUIRE(include_violations("kernels/conv2d.cu", "#include \"kernels/conv2d.h\"\n").empty());
    REQUIRE(include_violations("nn/ops.h",
                               "#include <vector>\n#include \"kernels/half.h\"\n"
                               "#include \"nn/tensor.h\"\n#include \"local.h\"\n")
                .empty());
    REQUIRE(include_violations("data/loader.h", "#include \"kernels/gpu.h\"\n").empty());
    // train/'s subfolders are train/: a file beside, or one in a sibling subfolder
    REQUIRE(include_violations("train/engine/trainer.cpp",
                               "#include \"kernels/gpu.h\"\n#include \"nn/model.h\"\n"
                               "#include \"data/loader.h\"\n#include \"train/setup/config.h\"\n"
                               "#include \"lane.h\"\n#include \"../replicas/ring.h\"\n")
                .empty());
    // not an include: a comment, a string; and folders without a rule
    REQUIRE(include_violations("nn/a.cpp",
                               "// #include \"train/x.h\"\nf(\"#include \\\"data/x.h\\\"\");\n")
                .empty());
    REQUIRE(include_violations("tests/x.cpp", "#include \"train/engine/trainer.h\"\n").empty());
    REQUIRE(include_violations("fuzz/x.cpp", "#include \"train/setup/config.h\"\n").empty());
  }
  SUBCASE("kernels/ includes only kernels/") {
    const auto v = include_violations("kernels/x.cu",
                                      "#include \"kernels/x.h\"\n"
                                      "#include \"nn/tensor.h\"\n"
                                      "#include \"data/loader.h\"\n");
    REQUIRE(v.size() == 2);
    REQUIRE(v[0] == "kernels/x.cu:2: includes nn/tensor.h: kernels/ may include kernels/ only");
    REQUIRE(v[1] == "kernels/x.cu:3: includes data/loader.h: kernels/ may include kernels/ only");
  }
  SUBCASE("nn/ includes nothing of data/ or train/") {
    const auto v = include_violations("nn/checkpoint.h",
                                      "#pragma once\n#include \"data/sampler.h\"\n"
                                      "  #  include \"train/setup/config.h\"  // why\n"
                                      "#include \"../train/run.h\"\n");
    REQUIRE(v.size() == 3);
    REQUIRE(v[0] ==
            "nn/checkpoint.h:2: includes data/sampler.h: nn/ may include kernels/ and nn/ only");
    REQUIRE(v[1].rfind("nn/checkpoint.h:3: includes train/setup/config.h: ", 0) == 0);
    REQUIRE(v[2].rfind("nn/checkpoint.h:4: includes ../train/run.h: ", 0) == 0);
  }
  SUBCASE("data/ includes nothing of nn/ or train/, also from a subfolder") {
    const auto v = include_violations("data/sub/x.cpp",
                                      "#include \"nn/tensor.h\"\n"
                                      "#include \"data/x.h\"\n"
                                      "#include \"train/setup/config.h\"\n");
    REQUIRE(v.size() == 2);
    REQUIRE(v[0] ==
            "data/sub/x.cpp:1: includes nn/tensor.h: data/ may include kernels/ and data/ only");
    REQUIRE(v[1].rfind("data/sub/x.cpp:3: includes train/setup/config.h: ", 0) == 0);
  }
  SUBCASE("train/ includes none of tests/, bench/, fuzz/, also from a subfolder") {
    const auto v = include_violations("train/run/run.cpp", "#include \"tests/test_util.h\"\n"
                                                           "#include \"../../bench/x.h\"\n");
    REQUIRE(v.size() == 2);
    REQUIRE(v[0] == "train/run/run.cpp:1: includes tests/test_util.h: train/ may include "
                    "kernels/, nn/, data/ and train/ only");
    REQUIRE(v[1].rfind("train/run/run.cpp:2: includes ../../bench/x.h: ", 0) == 0);
  }
}

TEST_CASE("include direction: a tree with offending files fails, naming each of them") {
  cutrain_test::TempDir dir;
  cutrain_test::write_text(dir / "kernels/a.h", "#pragma once\n#include \"kernels/b.h\"\n");
  cutrain_test::write_text(dir / "nn/bad.h",
                           "#pragma once\n#include \"nn/a.h\"\n#include \"data/sampler.h\"\n");
  cutrain_test::write_text(dir / "data/deep/bad.cu", "#include \"train/engine/trainer.h\"\n");
  cutrain_test::write_text(dir / "train/engine/ok.cpp",
                           "#include \"nn/a.h\"\n#include \"data/b.h\"\n#include \"../run/c.h\"\n");
  cutrain_test::write_text(dir / "nn/README.md", "#include \"train/x.h\"\n");  // not a source
  const TreeCheck check = check_tree(dir.path());
  REQUIRE(check.files == 4);
  REQUIRE(check.violations.size() == 2);
  REQUIRE(check.violations[0].rfind("data/deep/bad.cu:1: includes train/engine/trainer.h: ", 0) ==
          0);
  REQUIRE(check.violations[1].rfind("nn/bad.h:3: includes data/sampler.h: ", 0) == 0);
}

TEST_CASE("include direction: kernels <- nn <- train, kernels <- data -> train in the repository") {
  const fs::path root = cutrain_test::repo_root();
  for (const char* folder : {"kernels", "nn", "data", "train"})
    REQUIRE_MESSAGE(fs::is_directory(root / folder), (root / folder).string() << " is missing");
  const TreeCheck check = check_tree(root);
  REQUIRE(check.files > 100);  // the sources were found and read
  std::string report;
  for (const std::string& v : check.violations) report += "\n  " + v;
  REQUIRE_MESSAGE(check.violations.empty(), check.violations.size()
                                                << " include(s) against the direction:" << report);
}
