#include "tests/docs_scan.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

namespace fs = std::filesystem;

namespace cutrain_test {

namespace {

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

}  // namespace

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

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

}  // namespace cutrain_test
