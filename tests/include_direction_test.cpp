// The folders' include direction (README.md, "Architecture in brief"): kernels <- nn <- train and
// kernels <- data -> train. So kernels/ includes only kernels/; nn/ kernels/ and nn/; data/
// kernels/ and data/; train/ all four. The GPU simulator, sim/, stands beside kernels/ on the
// ground floor: it may include kernels/ (kernels/half.h) and itself, and no library folder
// includes it (the kernels' sources stay plain CUDA; only the SIM build puts sim/include on the
// path, where <cuda_runtime.h> then means the simulator's). tests/, bench/ and fuzz/ may
// include anything.
//
// Inside train/, its folders stand on floors (train/README.md), from the bottom:
//   replicas < setup, checkpoint, report, export < engine, minimal < run < cli
// (minimal/, the one-file trainer, stands beside engine/: it uses the floors below, never the
// Engine, the Trainer or run_training). A file may include its own folder and the folders on the floors below its own; never a
// folder on its own floor or above. So the include graph between train/'s folders has no
// cycle, and a folder's README can say what it may use.
//
// Every .h/.cpp/.cu/.cuh/.inc under the five folders (subfolders too) is read for its
// `#include "..."` lines, and every line against the direction is reported as file:line with
// the rule it breaks, all of them at once. include_violations() is the check itself, tested
// first on texts that break each rule, then on trees written for the purpose, so the scan of
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
    {"train", {"kernels", "nn", "data", "train"}},
    {"sim", {"kernels", "sim"}}};

// train/'s folders, floor by floor from the bottom (see the top of this file).
const std::vector<std::vector<std::string>> kTrainFloors = {
    {"replicas"}, {"setup", "checkpoint", "report", "export"}, {"engine", "minimal"}, {"run"},
    {"cli"}};

// "a, b and c"
std::string and_list(const std::vector<std::string>& items) {
  std::string r;
  for (size_t i = 0; i < items.size(); i++)
    r += items[i] + (i + 2 < items.size() ? ", " : i + 1 < items.size() ? " and " : "");
  return r;
}

// "nn/ may include kernels/ and nn/ only"
std::string rule_of(const std::string& folder) {
  std::vector<std::string> ok;
  for (const std::string& f : kAllowed.at(folder)) ok.push_back(f + "/");
  return folder + "/ may include " + and_list(ok) + " only";
}

// The floor of train/'s folder `name` (0 at the bottom); -1 for a folder on no floor.
int train_floor(const std::string& name) {
  for (size_t f = 0; f < kTrainFloors.size(); f++)
    for (const std::string& n : kTrainFloors[f])
      if (n == name) return int(f);
  return -1;
}

// "replicas < setup, checkpoint, report, export < engine, minimal < run < cli"
std::string train_floors() {
  std::string r;
  for (size_t f = 0; f < kTrainFloors.size(); f++) {
    r += f ? " < " : "";
    for (size_t i = 0; i < kTrainFloors[f].size(); i++) r += (i ? ", " : "") + kTrainFloors[f][i];
  }
  return r;
}

// "train/engine/ may include train/replicas/, train/setup/, ... and itself only (train/'s
// floors: ...)"
std::string train_rule_of(const std::string& folder) {
  std::vector<std::string> below;
  for (int f = 0; f < train_floor(folder); f++)
    for (const std::string& n : kTrainFloors[size_t(f)]) below.push_back("train/" + n + "/");
  below.push_back("itself");
  return "train/" + folder + "/ may include " + and_list(below) + " only (train/'s floors: " +
         train_floors() + ")";
}

// The file an include names, as the compiler finds it from `file` (both relative to the
// repository): a name with a folder is looked up from the repository root (-I.), unless it
// walks up with "..", which starts from the including file's folder; a bare name is a file
// beside the including one.
fs::path include_target(const fs::path& file, const std::string& name) {
  const bool from_file = name.find('/') == std::string::npos || name.rfind("..", 0) == 0;
  return (from_file ? file.parent_path() / name : fs::path(name)).lexically_normal();
}

// The top folder of a path ("train" of train/run/run.h), and the one below it ("run").
std::string top_folder(const fs::path& p) { return p.empty() ? "" : p.begin()->string(); }
std::string train_folder(const fs::path& p) {
  auto it = p.begin();
  if (it == p.end() || *it != "train" || ++it == p.end()) return "";
  return std::next(it) == p.end() ? "" : it->string();  // "" for a file in train/ itself
}

// Where a source in train/ may be: in a folder on a floor. "" when it is; else why not.
std::string train_placement(const fs::path& file) {
  const std::string from = train_folder(file);
  if (from.empty()) return "train/ holds no sources of its own: move it into one of its folders";
  if (train_floor(from) < 0)
    return "train/" + from + "/ is on no floor: add it to kTrainFloors in "
           "tests/include_direction_test.cpp, and to train/README.md";
  return "";
}

// Within train/: may `file` (train/X/..., placed) include `target`? "" when it may; else the
// rule it breaks.
std::string train_violation(const fs::path& file, const fs::path& target) {
  if (top_folder(target) != "train") return "";
  const std::string from = train_folder(file), to = train_folder(target);
  if (to == from) return "";
  if (to.empty() || train_floor(to) < 0 || train_floor(to) >= train_floor(from))
    return train_rule_of(from);
  return "";
}

// Each `#include "..."` of `text` (the contents of `file`, a path relative to the repository)
// against its folder's rule: "file:line: includes NAME: RULE" per offending line; for a file
// of train/ outside its floors, "file: WHY" (its includes then have no train/ rule to break).
std::vector<std::string> include_violations(const std::string& file, const std::string& text) {
  const fs::path path(file);
  const auto rule = kAllowed.find(top_folder(path));
  if (rule == kAllowed.end()) return {};
  std::vector<std::string> found;
  const bool in_train = rule->first == "train";
  const std::string placement = in_train ? train_placement(path) : "";
  if (!placement.empty()) found.push_back(file + ": " + placement);
  static const std::regex include(R"re(^\s*#\s*include\s*"([^"]+)")re");
  std::istringstream lines(text);
  std::string line;
  for (int n = 1; std::getline(lines, line); n++) {
    std::smatch m;
    if (!std::regex_search(line, m, include)) continue;
    const std::vector<std::string>& ok = rule->second;
    const fs::path target = include_target(path, m[1].str());
    const std::string where = file + ":" + std::to_string(n) + ": includes " + m[1].str() + ": ";
    if (std::find(ok.begin(), ok.end(), top_folder(target)) == ok.end())
      found.push_back(where + rule_of(rule->first));
    else if (in_train && placement.empty())
      if (const std::string why = train_violation(path, target); !why.empty())
        found.push_back(where + why);
  }
  return found;
}

// Every source file under the five folders of `root`, in path order, checked.
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
    // within train/: a file beside, or one in a folder on a lower floor
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
  SUBCASE("sim/ includes kernels/ and itself; no library folder includes sim/") {
    REQUIRE(include_violations("sim/access.cpp", "#include \"sim/sim.h\"\n"
                                                 "#include \"kernels/half.h\"\n")
                .empty());
    auto v = include_violations("sim/streams.cpp", "#include \"nn/tensor.h\"\n");
    REQUIRE(v.size() == 1);
    REQUIRE(v[0] == "sim/streams.cpp:1: includes nn/tensor.h: sim/ may include kernels/ and sim/ "
                    "only");
    v = include_violations("kernels/x.cu", "#include \"sim/sim.h\"\n");
    REQUIRE(v.size() == 1);
    REQUIRE(v[0] == "kernels/x.cu:1: includes sim/sim.h: kernels/ may include kernels/ only");
    v = include_violations("train/engine/x.cpp", "#include \"sim/include/cutrain_sim.h\"\n");
    REQUIRE(v.size() == 1);
    REQUIRE(v[0].rfind("train/engine/x.cpp:1: includes sim/include/cutrain_sim.h: train/ may "
                       "include kernels/, nn/, data/ and train/ only", 0) == 0);
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
  SUBCASE("train/'s folders include only the floors below their own") {
    const std::string engine_rule =
        "train/engine/ may include train/replicas/, train/setup/, train/checkpoint/, "
        "train/report/, train/export/ and itself only (train/'s floors: replicas < setup, "
        "checkpoint, report, export < engine, minimal < run < cli)";
    // upward, by path and by "..": engine below run, replicas below engine
    auto v = include_violations("train/engine/x.cpp", "#include \"train/engine/engine.h\"\n"
                                                      "#include \"train/run/run.h\"\n");
    REQUIRE(v.size() == 1);
    REQUIRE(v[0] == "train/engine/x.cpp:2: includes train/run/run.h: " + engine_rule);
    v = include_violations("train/replicas/ring.h", "#include \"../engine/replica.h\"\n");
    REQUIRE(v.size() == 1);
    REQUIRE(v[0] == "train/replicas/ring.h:1: includes ../engine/replica.h: train/replicas/ may "
                    "include itself only (train/'s floors: replicas < setup, checkpoint, report, "
                    "export < engine, minimal < run < cli)");
    // sideways: folders on one floor include none of each other (so no cycle either way)
    v = include_violations("train/setup/x.cpp", "#include \"train/report/report.h\"\n"
                                                "#include \"train/replicas/mpi.h\"\n");
    REQUIRE(v.size() == 1);
    REQUIRE(v[0].rfind("train/setup/x.cpp:1: includes train/report/report.h: train/setup/ may "
                       "include train/replicas/ and itself only", 0) == 0);
    // a header in train/ itself, and sources outside the floors
    v = include_violations("train/cli/x.cpp", "#include \"train/x.h\"\n");
    REQUIRE(v.size() == 1);
    REQUIRE(v[0].rfind("train/cli/x.cpp:1: includes train/x.h: train/cli/ may include", 0) == 0);
    v = include_violations("train/tools/x.cpp", "#include \"train/run/run.h\"\n");
    REQUIRE(v.size() == 1);
    REQUIRE(v[0] == "train/tools/x.cpp: train/tools/ is on no floor: add it to kTrainFloors in "
                    "tests/include_direction_test.cpp, and to train/README.md");
    v = include_violations("train/cli/x.cpp", "#include \"train/tools/y.h\"\n");  // on no floor
    REQUIRE(v.size() == 1);
    REQUIRE(v[0].rfind("train/cli/x.cpp:1: includes train/tools/y.h: train/cli/ may include", 0) ==
            0);
    v = include_violations("train/x.cpp", "");
    REQUIRE(v.size() == 1);
    REQUIRE(v[0] == "train/x.cpp: train/ holds no sources of its own: move it into one of its "
                    "folders");
    // the one-file trainer, beside engine/: the floors below, never the Engine, the Trainer
    // or the run (train/minimal/README.md)
    REQUIRE(include_violations("train/minimal/x.cpp", "#include \"train/setup/config.h\"\n"
                                                      "#include \"train/checkpoint/checkpoint.h\"\n")
                .empty());
    v = include_violations("train/minimal/x.cpp", "#include \"train/engine/trainer.h\"\n"
                                                  "#include \"train/run/run.h\"\n");
    REQUIRE(v.size() == 2);
    REQUIRE(v[0] == "train/minimal/x.cpp:1: includes train/engine/trainer.h: train/minimal/ may "
                    "include train/replicas/, train/setup/, train/checkpoint/, train/report/, "
                    "train/export/ and itself only (train/'s floors: replicas < setup, "
                    "checkpoint, report, export < engine, minimal < run < cli)");
    REQUIRE(v[1].rfind("train/minimal/x.cpp:2: includes train/run/run.h: ", 0) == 0);
    // the top floor may include every floor below
    REQUIRE(include_violations("train/cli/main.cpp",
                               "#include \"train/run/run.h\"\n#include \"train/engine/engine.h\"\n"
                               "#include \"train/export/onnx_export.h\"\n"
                               "#include \"train/report/report.h\"\n"
                               "#include \"train/checkpoint/checkpoint.h\"\n"
                               "#include \"train/setup/config.h\"\n"
                               "#include \"train/replicas/mpi.h\"\n#include \"progress.h\"\n")
                .empty());
  }
}

TEST_CASE("include direction: a tree with offending files fails, naming each of them") {
  cutrain_test::TempDir dir;
  cutrain_test::write_text(dir / "kernels/a.h", "#pragma once\n#include \"kernels/b.h\"\n");
  cutrain_test::write_text(dir / "nn/bad.h",
                           "#pragma once\n#include \"nn/a.h\"\n#include \"data/sampler.h\"\n");
  cutrain_test::write_text(dir / "data/deep/bad.cu", "#include \"train/engine/trainer.h\"\n");
  cutrain_test::write_text(dir / "train/engine/ok.cpp",
                           "#include \"nn/a.h\"\n#include \"data/b.h\"\n"
                           "#include \"../replicas/c.h\"\n");
  cutrain_test::write_text(dir / "nn/README.md", "#include \"train/x.h\"\n");  // not a source
  const TreeCheck check = check_tree(dir.path());
  REQUIRE(check.files == 4);
  REQUIRE(check.violations.size() == 2);
  REQUIRE(check.violations[0].rfind("data/deep/bad.cu:1: includes train/engine/trainer.h: ", 0) ==
          0);
  REQUIRE(check.violations[1].rfind("nn/bad.h:3: includes data/sampler.h: ", 0) == 0);
}

TEST_CASE("include direction: a cycle between train/'s folders fails, naming the edges") {
  cutrain_test::TempDir dir;
  // engine <-> run: run may include engine, so the edge engine -> run is the one reported
  cutrain_test::write_text(dir / "train/engine/a.h", "#pragma once\n#include \"train/run/b.h\"\n");
  cutrain_test::write_text(dir / "train/run/b.h", "#pragma once\n#include \"train/engine/a.h\"\n");
  // setup <-> checkpoint, one floor: both edges
  cutrain_test::write_text(dir / "train/setup/c.h", "#include \"../checkpoint/d.h\"\n");
  cutrain_test::write_text(dir / "train/checkpoint/d.h", "#include \"train/setup/c.h\"\n");
  const TreeCheck check = check_tree(dir.path());
  REQUIRE(check.files == 4);
  REQUIRE(check.violations.size() == 3);
  REQUIRE(check.violations[0].rfind("train/checkpoint/d.h:1: includes train/setup/c.h: ", 0) == 0);
  REQUIRE(check.violations[1].rfind("train/engine/a.h:2: includes train/run/b.h: ", 0) == 0);
  REQUIRE(check.violations[2].rfind("train/setup/c.h:1: includes ../checkpoint/d.h: ", 0) == 0);
}

TEST_CASE("include direction: kernels <- nn <- train, kernels <- data -> train in the repository") {
  const fs::path root = cutrain_test::repo_root();
  for (const char* folder : {"kernels", "nn", "data", "train", "sim"})
    REQUIRE_MESSAGE(fs::is_directory(root / folder), (root / folder).string() << " is missing");
  const TreeCheck check = check_tree(root);
  REQUIRE(check.files > 100);  // the sources were found and read
  std::string report;
  for (const std::string& v : check.violations) report += "\n  " + v;
  REQUIRE_MESSAGE(check.violations.empty(), check.violations.size()
                                                << " include(s) against the direction:" << report);
}
