// The documents' citations: every repository path that a Markdown file or a source comment
// cites exists, and every function named beside a cited file is found in that file. A missing
// one fails, naming the document, the line and what is missing, all of them at once.
//
// What counts as a citation (kept narrow, so that it fails only on what a reader would follow):
// - in a tracked *.md file: a `backticked` token that ends in a source or document extension
//   (.h .cpp .cu .cuh .inc .md .py .sh .png) or is `Makefile`; a path in plain text with such
//   an extension whose first folder is one of the repository's (train/README.md); and a
//   Markdown link [text](target) that is not a URL (http:, https:, mailto:) nor an anchor of
//   the same page;
// - in a source file (.h .cpp .cu .cuh .py .sh): a path ending in .md (a comment pointing to a
//   document);
// - a citation followed on its line by a backticked name (`path` `Name`, the journey's form),
//   and a link whose text is a backticked name ([`Name`](path)): the name's last part (after
//   ::, without ()) must appear in the file.
// A citation resolves against the citing file's folder, then the repository's root; a bare
// file name (no /) also names a file of that name in the citing folder or any folder below it
// (a folder README's tables); `#anchor` is dropped. In a source comment, a path counts only
// when its first folder is one of the repository's (out/x.md, a script's output, does not).
// What is not a citation: a bare extension (`.cu`), tokens with a placeholder or pattern in
// them (< > * { } $ ... or a space, or a first folder in capitals: OUT/summary.md, what a
// program writes), example files a user or a test makes (data/train.txt, report.html, model
// .onnx: none has a listed extension), URLs, paths that leave the repository (../shared/...,
// the workplace's documents), and everything under bench/results/ (dated records: they name
// files as they were then). The scan skips folders that are not the repository's own (., build/,
// bin/, bundle/, runs/, data-cache/ and dot folders such as .git and .venv).
//
// doc_problems() is the check itself, tested first on texts and a tree written for the
// purpose, so the scan of the repository is known to be able to fail.
#include <algorithm>
#include <filesystem>
#include <cctype>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "tests/data/temp_dir.h"
#include "tests/test_util.h"

namespace fs = std::filesystem;
using cutrain_test::TempDir;

namespace {

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

bool cited_kind(const std::string& token) {
  if (token == "Makefile") return true;
  for (const char* ext : {".h", ".cpp", ".cu", ".cuh", ".inc", ".md", ".py", ".sh", ".png"})
    if (ends_with(token, ext)) return true;
  return false;
}

bool placeholder(const std::string& token) {
  if (token.empty() || (token[0] == '.' && token.find('/') == std::string::npos)) return true;
  if (token.find_first_of("<>*{}$ \t") != std::string::npos) return true;
  if (token.find("...") != std::string::npos) return true;
  const size_t slash = token.find('/');  // OUT/summary.md: a folder a program is given
  const std::string first = token.substr(0, slash);
  return slash != std::string::npos && !first.empty() &&
         std::all_of(first.begin(), first.end(), [](char c) { return std::isupper(c) || c == '_'; });
}

// Every file under root, relative to it (not in dot folders), once per root.
const std::vector<std::string>& files_under(const fs::path& root) {
  static std::map<std::string, std::vector<std::string>> cache;
  std::vector<std::string>& files = cache[root.string()];
  if (!files.empty()) return files;
  for (auto it = fs::recursive_directory_iterator(root); it != fs::recursive_directory_iterator();
       ++it) {
    if (it->path().filename().string()[0] == '.' ||
        (it.depth() == 0 && (it->path().filename() == "build" || it->path().filename() == "bin"))) {
      if (it->is_directory()) it.disable_recursion_pending();
      continue;
    }
    if (it->is_regular_file()) files.push_back(fs::relative(it->path(), root).generic_string());
  }
  return files;
}

// The file a citation names: against the citing file's folder, then the root (relative to
// root). Empty when it is not a citation (an anchor alone; a path that leaves the repository
// from the citing folder, or into the workplace's ../shared/); "?" when it resolves nowhere.
std::string resolve(const fs::path& root, const std::string& doc, const std::string& cited) {
  const std::string target = cited.substr(0, cited.find('#'));
  if (target.empty() || target.rfind("../shared/", 0) == 0) return "";
  const fs::path here = fs::path(doc).parent_path();
  auto leaves = [](const fs::path& p) { return p.empty() || *p.begin() == ".."; };
  for (const fs::path& base : {here, fs::path()}) {
    const fs::path rel = (base / target).lexically_normal();
    if (!leaves(rel) && fs::exists(root / rel)) return rel.generic_string();
  }
  if (target.find('/') == std::string::npos) {  // a bare name: in this folder or below
    const std::string prefix = here.empty() ? "" : here.generic_string() + "/";
    for (const std::string& f : files_under(root))
      if (f.compare(0, prefix.size(), prefix) == 0 &&
          (f.size() == prefix.size() + target.size() || ends_with(f, "/" + target)) &&
          ends_with(f, target))
        return f;
  }
  return leaves((here / target).lexically_normal()) ? "" : "?";
}

// The name a citation pairs with, as it must appear in the file: "Engine::result_of()" ->
// "result_of".
std::string name_part(std::string name) {
  if (ends_with(name, "()")) name.resize(name.size() - 2);
  const size_t colons = name.rfind("::");
  return colons == std::string::npos ? name : name.substr(colons + 2);
}

bool identifier_like(const std::string& s) {
  static const std::regex re(R"(^~?[A-Za-z_][A-Za-z0-9_]*(::~?[A-Za-z_][A-Za-z0-9_]*)*(\(\))?$)");
  return std::regex_match(s, re);
}

// Every problem of the citations in `text`, the contents of the repository file `doc` (a path
// relative to root), as "doc:line: what".
std::vector<std::string> doc_problems(const fs::path& root, const std::string& doc,
                                      const std::string& text) {
  std::vector<std::string> out;
  const bool markdown = ends_with(doc, ".md");
  std::istringstream lines(text);
  std::string line;
  int n = 0;
  bool in_fence = false;
  auto check = [&](const std::string& cited, const std::string& name) {
    const std::string file = resolve(root, doc, cited);
    const std::string where = doc + ":" + std::to_string(n) + ": ";
    if (file == "?") {
      out.push_back(where + "`" + cited + "` does not exist");
      return;
    }
    if (file.empty() || name.empty()) return;
    if (fs::is_directory(root / file)) return;
    if (read_all(root / file).find(name_part(name)) == std::string::npos)
      out.push_back(where + "`" + cited + "` has no `" + name + "`");
  };
  static const std::regex tick(R"(`([^`]+)`)");
  static const std::regex link(R"(\[([^\]]*)\]\(([^)\s]+)\))");
  static const std::regex md_path(R"(([A-Za-z0-9_./-]+\.md)\b)");
  while (std::getline(lines, line)) {
    n++;
    if (!markdown) {  // a source file: its comments' paths to documents only
      static const std::regex url(R"(\w+://\S+)");
      const std::string code = std::regex_replace(line, url, "");  // URLs are not citations
      const bool script = ends_with(doc, ".py") || ends_with(doc, ".sh");
      const size_t c = code.find(script ? "#" : "//");
      if (c == std::string::npos) continue;
      const std::string comment = code.substr(c);
      for (auto it = std::sregex_iterator(comment.begin(), comment.end(), md_path);
           it != std::sregex_iterator(); ++it) {
        const std::string p = (*it)[1];
        const size_t slash = p.find('/');
        const bool ours = slash == std::string::npos
                              ? std::isupper(static_cast<unsigned char>(p[0]))
                              : p.rfind("../", 0) == 0 || fs::is_directory(root / p.substr(0, slash)) ||
                                    fs::is_directory(root / fs::path(doc).parent_path() / p.substr(0, slash));
        if (ours && !placeholder(p)) check(p, "");
      }
      continue;
    }
    if (line.rfind("```", 0) == 0 || line.rfind("    ```", 0) == 0) in_fence = !in_fence;
    if (in_fence) continue;  // code blocks: commands and examples, not citations
    std::vector<std::pair<size_t, std::string>> ticks;  // position after the token, token
    for (auto it = std::sregex_iterator(line.begin(), line.end(), tick);
         it != std::sregex_iterator(); ++it)
      ticks.push_back({size_t(it->position() + it->length()), (*it)[1]});
    for (size_t i = 0; i < ticks.size(); i++) {
      const std::string& t = ticks[i].second;
      if (!cited_kind(t) || placeholder(t)) continue;
      std::string name;
      if (i + 1 < ticks.size()) {  // `path` `Name`: only blanks between them
        const size_t gap_begin = ticks[i].first;
        const size_t gap_end = line.find('`', gap_begin);
        const std::string gap = line.substr(gap_begin, gap_end - gap_begin);
        if (gap.find_first_not_of(" \t") == std::string::npos && identifier_like(ticks[i + 1].second))
          name = ticks[i + 1].second;
      }
      check(t, name);
    }
    // Plain-text paths (not in backticks or a link's target): a/b.ext with a listed
    // extension whose first folder is one of the repository's.
    {
      static const std::regex plain(R"((^|[\s(,;"])([A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)+)(?=[\s),;:"]|\.(\s|$)|$))");
      const std::string bare = std::regex_replace(std::regex_replace(line, tick, ""), link, "");
      for (auto it = std::sregex_iterator(bare.begin(), bare.end(), plain);
           it != std::sregex_iterator(); ++it) {
        std::string p = (*it)[2];
        while (!p.empty() && p.back() == '.') p.pop_back();  // a sentence's full stop
        const std::string first = p.substr(0, p.find('/'));
        if (cited_kind(p) && !placeholder(p) &&
            (fs::is_directory(root / first) || first == ".."))
          check(p, "");
      }
    }
    for (auto it = std::sregex_iterator(line.begin(), line.end(), link);
         it != std::sregex_iterator(); ++it) {
      const std::string label = (*it)[1], target = (*it)[2];
      if (target.rfind("http:", 0) == 0 || target.rfind("https:", 0) == 0 ||
          target.rfind("mailto:", 0) == 0 || target[0] == '#' || placeholder(target))
        continue;
      std::string name;
      if (label.size() > 2 && label.front() == '`' && label.back() == '`' &&
          identifier_like(label.substr(1, label.size() - 2)))
        name = label.substr(1, label.size() - 2);
      check(target, name);
    }
  }
  return out;
}

// The repository's documents and sources, relative to root, skipping what is not its own.
std::vector<std::string> repository_files(const fs::path& root) {
  const std::set<std::string> skip = {"build", "bin", "bundle", "runs", "data-cache"};
  std::vector<std::string> files;
  for (auto it = fs::recursive_directory_iterator(root); it != fs::recursive_directory_iterator();
       ++it) {
    const std::string rel = fs::relative(it->path(), root).generic_string();
    const std::string name = it->path().filename().string();
    if (it->is_directory()) {
      if (name[0] == '.' || (it.depth() == 0 && skip.count(name)) || rel == "bench/results")
        it.disable_recursion_pending();
      continue;
    }
    for (const char* ext : {".md", ".h", ".cpp", ".cu", ".cuh", ".py", ".sh"})
      if (ends_with(name, ext)) files.push_back(rel);
  }
  std::sort(files.begin(), files.end());
  return files;
}

// --- The kernel files' five fields (kernels/README.md, "One form for every kernel file") ---
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

TEST_CASE("docs: the citation check finds what is missing, and only that") {
  TempDir dir;
  const fs::path root = dir.path();
  cutrain_test::write_text((root / "kernels/relu.h").string(), "void relu_forward_cpu();\n");
  cutrain_test::write_text((root / "kernels/README.md").string(), "x\n");
  cutrain_test::write_text((root / "docs/a.md").string(), "x\n");
  const std::string doc = "docs/page.md";
  auto problems = [&](const std::string& text) { return doc_problems(root, doc, text); };
  // Present: from the root, from the citing folder, a link, a folder, an anchor dropped.
  REQUIRE(problems("`kernels/relu.h` and `a.md` and [k](../kernels/README.md#top)\n").empty());
  REQUIRE(problems("[the kernels](../kernels/) and `kernels/relu.h` `relu_forward_cpu`\n").empty());
  REQUIRE(problems("[`relu_forward_cpu()`](../kernels/relu.h)\n").empty());
  // Missing: each reported with its line.
  REQUIRE(problems("one\n`kernels/gone.cu`\n") ==
          std::vector<std::string>{"docs/page.md:2: `kernels/gone.cu` does not exist"});
  REQUIRE(problems("[x](missing.md)\n") ==
          std::vector<std::string>{"docs/page.md:1: `missing.md` does not exist"});
  REQUIRE(problems("`kernels/relu.h` `relu_backward_cpu`\n") ==
          std::vector<std::string>{"docs/page.md:1: `kernels/relu.h` has no `relu_backward_cpu`"});
  REQUIRE(problems("see [`Tape::backward`](../kernels/relu.h)\n").size() == 1);
  // Not citations: examples, placeholders, code blocks, URLs, outside the repository.
  REQUIRE(problems("`data/train.txt` `runs/fm` `kernels/<op>.h` `*.md` `report.html`\n").empty());
  REQUIRE(problems("```\nbin/cutrain train --train gone.md\n```\n").empty());
  REQUIRE(problems("[site](https://example.com/a.md) `../../shared/GPU.md`\n").empty());
  // A name is checked only right after its file.
  REQUIRE(problems("`kernels/relu.h`, then `Nowhere`\n").empty());
  // In plain text: a path into a folder of the repository, not an example elsewhere.
  REQUIRE(problems("see kernels/relu.h, and kernels/gone.md.\n") ==
          std::vector<std::string>{"docs/page.md:1: `kernels/gone.md` does not exist"});
  REQUIRE(problems("my/own/list.md and runs/fm/report.md\n").empty());
  // A source file: its comments' paths to documents.
  // (The comment is built from pieces, so that this file's own scan does not read it.)
  const std::string comment = std::string("/") + "/ see kernels/README.md, docs/b.md, out/c.md\n";
  REQUIRE(doc_problems(root, "kernels/relu.cpp", comment) ==
          std::vector<std::string>{"kernels/relu.cpp:1: `docs/b.md` does not exist"});
  // A bare name: this folder or below; an extension alone or a program's output: nothing.
  REQUIRE(doc_problems(root, "README.md", "`relu.h` `.cu` `OUT/summary.md`\n").empty());
  REQUIRE(doc_problems(root, "docs/x.md", "`relu.h`\n").size() == 1);
}

TEST_CASE("docs: every citation in the repository's documents and comments resolves") {
  const fs::path root = cutrain_test::repo_root();
  REQUIRE(fs::exists(root / "README.md"));
  std::vector<std::string> all;
  const std::vector<std::string> files = repository_files(root);
  REQUIRE(files.size() > 100);
  for (const std::string& f : files) {
    const std::vector<std::string> p = doc_problems(root, f, read_all(root / f));
    all.insert(all.end(), p.begin(), p.end());
  }
  std::string report;
  for (const std::string& p : all) report += p + "\n";
  INFO(all.size() << " citations do not resolve:\n" << report);
  REQUIRE(all.empty());
}

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
