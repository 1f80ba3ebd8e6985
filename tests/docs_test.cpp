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
#include "tests/docs_scan.h"
#include "tests/test_util.h"

namespace fs = std::filesystem;
using cutrain_test::ends_with;
using cutrain_test::read_all;
using cutrain_test::repository_files;
using cutrain_test::resolve;
using cutrain_test::TempDir;

namespace {

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
