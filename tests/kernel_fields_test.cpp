// The kernel files' five fields (kernels/README.md, "One form for every kernel file").
//
// Every kernels/**/*.h, *.cu and *.cuh outside kExemptKernelFiles opens with a comment (the
// file's lines up to the first one that is neither blank nor a // comment) holding the labels
// Math:, Launch:, Bytes:, Flops:, Precision:, each once, in that order, each starting a comment
// line ("// Bytes: ..."). A field runs from its label to the next label or the comment's end.
// Bytes: and Flops: each name at least one cost function (a word ending in _cost, e.g.
// relu_forward_gpu_cost), and every name they write is defined as `LaunchCost name(` in the
// file itself, its .h (same folder, same stem), a kernels/ header it includes, or a .h/.cuh
// the field cites by path. A field's prose may point to another file ("Math: as conv2d.h"):
// the labels stay, and the cost names are still written out.
//
// field_problems() is the check itself, tested first on files written for the purpose, so the
// scan of the repository is known to be able to fail.
#include <filesystem>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include "tests/data/temp_dir.h"
#include "tests/docs_scan.h"
#include "tests/test_util.h"

namespace fs = std::filesystem;
using cutrain_test::ends_with;
using cutrain_test::read_all;
using cutrain_test::repository_files;
using cutrain_test::resolve;
using cutrain_test::TempDir;

namespace {

const char* const kFieldLabels[] = {"Math:", "Launch:", "Bytes:", "Flops:", "Precision:"};

// The runtime's helpers: files under kernels/ that declare no op's kernel, so carry no fields.
const std::map<std::string, std::string> kExemptKernelFiles = {
    {"kernels/arrival_counters.h", "a zeroed counter buffer for last_block_to_arrive"},
    {"kernels/blocked_sum.h", "a summation helper that kernels and CPU loops call"},
    {"kernels/caching_allocator.h", "the device memory pool"},
    {"kernels/nvtx_memory.h", "the memory pool's annotations for memory checkers"},
    {"kernels/check.h", "CHECK, CUDA_CHECK, LAUNCH_CHECK"},
    {"kernels/cuda_util.cuh", "storage types, 16-byte packs, grid sizes"},
    {"kernels/cudnn_util.h", "cuDNN handles and descriptors"},
    {"kernels/ema.h", "per-element math run inside multi_tensor.cu's kernels (fields there)"},
    {"kernels/gpu.h", "streams, events, buffers, graphs"},
    {"kernels/half.h", "the host's binary16 type"},
    {"kernels/hd.h", "CUTRAIN_HD and the once-rounded arithmetic"},
    {"kernels/impl.h", "the implementation switch's names"},
    {"kernels/launch_plan.h", "LaunchCost and LaunchPlan themselves"},
    {"kernels/ladder/welford.h", "per-value math run inside batchnorm_ladder.cu's v3 (fields there)"},
    {"kernels/loss_scale.h", "the scaler's transition, run inside step_state.cu's kernels (fields there)"},
    {"kernels/onednn.h", "the CPU library's convolution and GEMM, no GPU kernel"},
    {"kernels/parallel.h", "the CPU threads' rule"},
    {"kernels/printable.h", "text from outside made safe to print, host code"},
    {"kernels/rng.h", "counter-based random numbers"},
    {"kernels/tc_plan.h", "tc_gemm's tile plan and cost, host code (fields in tc_gemm.cuh)"},
    {"kernels/thread_start.h", "start_thread"},
    {"kernels/vendor.h", "cuDNN and cuBLAS calls, no kernel of ours (costs beside each)"},
    {"kernels/xxhash64.h", "a checksum on the host"},
};

bool kernel_file(const std::string& rel) {
  return rel.rfind("kernels/", 0) == 0 &&
         (ends_with(rel, ".h") || ends_with(rel, ".cu") || ends_with(rel, ".cuh"));
}

// Is `name` defined as a cost function (`LaunchCost name(`) in the file `rel` (relative to root)?
bool defines_cost(const fs::path& root, const std::string& rel, const std::string& name) {
  if (rel.empty() || !fs::is_regular_file(root / rel)) return false;
  const std::regex def("LaunchCost\\s+" + name + "\\s*\\(");
  return std::regex_search(read_all(root / rel), def);
}

// Every problem of the fields of the kernel file `file` (relative to root), whose text is
// `text`, as "file: what".
std::vector<std::string> field_problems(const fs::path& root, const std::string& file,
                                        const std::string& text) {
  std::vector<std::string> out;
  std::istringstream lines(text);
  std::string line;
  std::vector<std::string> opening;  // the opening comment's lines
  while (std::getline(lines, line)) {
    if (line.find_first_not_of(" \t\r") != std::string::npos && line.rfind("//", 0) != 0) break;
    opening.push_back(line);
  }
  static const std::regex label_re(R"(^//\s*(Math|Launch|Bytes|Flops|Precision):)");
  std::map<std::string, std::vector<size_t>> at;  // label -> lines of the opening it starts
  for (size_t i = 0; i < opening.size(); i++) {
    std::smatch m;
    if (std::regex_search(opening[i], m, label_re)) at[m[1].str() + ":"].push_back(i);
  }
  size_t last = 0;
  std::string last_label;
  for (const char* label : kFieldLabels) {
    auto it = at.find(label);
    if (it == at.end()) {
      out.push_back(file + ": no `" + label + "` field in the opening comment");
      continue;
    }
    if (it->second.size() > 1) out.push_back(file + ": `" + label + "` more than once");
    if (!last_label.empty() && it->second[0] < last)
      out.push_back(file + ": `" + label + "` before `" + last_label + "`");
    last = it->second[0], last_label = label;
  }
  // The text of a field: its label's line to the next label (or the opening's end).
  auto field = [&](const std::string& label) {
    auto it = at.find(label);
    if (it == at.end()) return std::string();
    std::string t;
    for (size_t i = it->second[0]; i < opening.size(); i++) {
      if (i > it->second[0] && std::regex_search(opening[i], label_re)) break;
      t += opening[i] + "\n";
    }
    return t;
  };
  // Where else a cost function may be defined: its .h, its kernels/ includes.
  const fs::path fp(file);
  std::vector<std::string> homes;  // (the file itself: its text)
  homes.push_back((fp.parent_path() / (fp.stem().string() + ".h")).generic_string());
  static const std::regex include_re(R"(#include\s+"(kernels/[^"]+)\")");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), include_re);
       it != std::sregex_iterator(); ++it)
    homes.push_back((*it)[1]);
  static const std::regex cost_re(R"(\b([A-Za-z0-9_]+_cost)\b)");
  static const std::regex cited_re(R"(([A-Za-z0-9_./]+\.(h|cuh))\b)");
  for (const char* label : {"Bytes:", "Flops:"}) {
    const std::string t = field(label);
    if (t.empty()) continue;
    std::vector<std::string> where = homes;
    for (auto it = std::sregex_iterator(t.begin(), t.end(), cited_re); it != std::sregex_iterator();
         ++it) {
      const std::string r = resolve(root, file, (*it)[1]);
      if (!r.empty() && r != "?") where.push_back(r);
    }
    std::set<std::string> names;
    for (auto it = std::sregex_iterator(t.begin(), t.end(), cost_re); it != std::sregex_iterator();
         ++it)
      names.insert((*it)[1]);
    if (names.empty())
      out.push_back(file + ": `" + label + "` names no cost function (a *_gpu_cost)");
    for (const std::string& name : names)
      if (!std::regex_search(text, std::regex("LaunchCost\\s+" + name + "\\s*\\(")) &&
          std::none_of(where.begin(), where.end(),
                       [&](const std::string& h) { return defines_cost(root, h, name); }))
        out.push_back(file + ": `" + label + "` names `" + name +
                      "`, defined in neither the file, its .h, its kernels/ includes nor a "
                      "header the field cites");
  }
  return out;
}

}  // namespace

TEST_CASE("docs: the kernel files' field check finds what is missing, and only that") {
  TempDir dir;
  const fs::path root = dir.path();
  const std::string cost = "inline LaunchCost relu_forward_gpu_cost(int64_t n) { return {}; }\n";
  cutrain_test::write_text((root / "kernels/relu.h").string(), "#pragma once\n" + cost);
  cutrain_test::write_text((root / "kernels/plan.h").string(),
                           "LaunchCost tc_gemm_cost(int m);\n");
  // (Each comment is built from pieces, so that this file's own scans do not read it.)
  const std::string c = std::string("/") + "/ ";
  const std::string good = c + "defines: relu\n" + c + "Math: y = max(x, 0)\n" + c +
                           "Launch: a thread per element\n" + c +
                           "Bytes: relu_forward_gpu_cost: 2*n*sizeof(T)\n" + c +
                           "  (second line of the field)\n" + c +
                           "Flops: relu_forward_gpu_cost: n\n" + c +
                           "Precision: exact\n#pragma once\n";
  auto problems = [&](const std::string& file, const std::string& text) {
    return field_problems(root, file, text);
  };
  REQUIRE(problems("kernels/relu.h", good).empty());
  REQUIRE(problems("kernels/relu.cu", good).empty());  // its .h defines the cost
  // Missing labels: every one named, all at once.
  REQUIRE(problems("kernels/x.h", c + "math: lower case is not a label\n#pragma once\n") ==
          std::vector<std::string>{
              "kernels/x.h: no `Math:` field in the opening comment",
              "kernels/x.h: no `Launch:` field in the opening comment",
              "kernels/x.h: no `Bytes:` field in the opening comment",
              "kernels/x.h: no `Flops:` field in the opening comment",
              "kernels/x.h: no `Precision:` field in the opening comment"});
  // A label after the opening comment does not count.
  std::string late = good;
  late.replace(late.find(c + "Precision:"), c.size() + 10, "#pragma once\n" + c + "Precision:");
  REQUIRE(problems("kernels/relu.h", late) ==
          std::vector<std::string>{"kernels/relu.h: no `Precision:` field in the opening comment"});
  // Out of order, and twice.
  const std::string swapped = c + "Math: m\n" + c + "Bytes: relu_forward_gpu_cost\n" + c +
                              "Launch: l\n" + c + "Flops: relu_forward_gpu_cost\n" + c +
                              "Precision: p\n" + c + "Precision: q\n";
  REQUIRE(problems("kernels/relu.h", swapped) ==
          std::vector<std::string>{"kernels/relu.h: `Bytes:` before `Launch:`",
                                   "kernels/relu.h: `Precision:` more than once"});
  // Cost functions: none named; one that does not exist; one found through an include or a
  // header the field cites.
  const std::string no_cost = c + "Math: m\n" + c + "Launch: l\n" + c + "Bytes: 2n\n" + c +
                              "Flops: gone_gpu_cost\n" + c + "Precision: p\n";
  REQUIRE(problems("kernels/relu.h", no_cost) ==
          std::vector<std::string>{
              "kernels/relu.h: `Bytes:` names no cost function (a *_gpu_cost)",
              "kernels/relu.h: `Flops:` names `gone_gpu_cost`, defined in neither the file, its "
              ".h, its kernels/ includes nor a header the field cites"});
  const std::string elsewhere = c + "Math: m\n" + c + "Launch: l\n" + c + "Bytes: tc_gemm_cost\n" +
                                c + "Flops: tc_gemm_cost (plan.h)\n" + c + "Precision: p\n";
  REQUIRE(problems("kernels/gemm.cuh", elsewhere + "#include \"kernels/plan.h\"\n").empty());
  REQUIRE(problems("kernels/gemm.cuh", elsewhere).size() == 1);  // Bytes: cites no plan.h
  // A file that defines the cost itself.
  REQUIRE(problems("kernels/own.h", no_cost + "LaunchCost gone_gpu_cost(int n);\n").size() == 1);
}

TEST_CASE("docs: every kernel file opens with the five fields") {
  const fs::path root = cutrain_test::repo_root();
  std::vector<std::string> all;
  int checked = 0;
  for (const std::string& f : repository_files(root)) {
    if (!kernel_file(f) || kExemptKernelFiles.count(f)) continue;
    checked++;
    const std::vector<std::string> p = field_problems(root, f, read_all(root / f));
    all.insert(all.end(), p.begin(), p.end());
  }
  for (const auto& e : kExemptKernelFiles)  // an exemption for a file that is gone is stale
    if (!fs::exists(root / e.first)) all.push_back(e.first + ": exempt, but does not exist");
  std::string report;
  for (const std::string& p : all) report += p + "\n";
  INFO(all.size() << " problems in " << checked << " kernel files:\n" << report);
  REQUIRE(checked >= 30);
  REQUIRE(all.empty());
}
