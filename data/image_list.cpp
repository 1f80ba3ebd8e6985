#include "data/image_list.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "data/atomic_file.h"
#include "data/list_rows.h"
#include "kernels/check.h"
#include "kernels/printable.h"

namespace fs = std::filesystem;

namespace cutrain {

namespace {

// Removes what editors leave around a line: a UTF-8 byte-order mark on the first line, the
// '\r' of a CRLF line end.
void strip_line_end(std::string& line, bool first_line) {
  if (first_line && line.compare(0, 3, "\xEF\xBB\xBF") == 0) line.erase(0, 3);
  if (!line.empty() && line.back() == '\r') line.pop_back();
}

// Splits a trimmed, non-empty line into path and label text. Returns "" or what is wrong.
std::string split_line(const std::string& line, std::string* path, std::string* label) {
  const size_t tab = line.rfind('\t');
  if (tab != std::string::npos) {
    *path = trim_list_field(line.substr(0, tab));
    *label = trim_list_field(line.substr(tab + 1));
    if (path->find('\t') != std::string::npos)
      return "more than two tab-separated fields; expected 'path<TAB>label'";
  } else {
    std::istringstream words(line);
    std::vector<std::string> fields;
    for (std::string w; words >> w;) fields.push_back(w);
    if (fields.size() == 1) return "no label: expected 'path label' or 'path<TAB>label'";
    if (fields.size() > 2)
      return std::to_string(fields.size()) +
             " space-separated fields; expected 'path label' (a path or a class name with "
             "spaces needs a tab before the label)";
    *path = fields[0];
    *label = fields[1];
  }
  if (path->empty()) return "empty path";
  // The OS would open the path only up to its NUL: another file than the line names.
  if (path->find('\0') != std::string::npos) return "a NUL byte in the path";
  if (label->empty()) return "no label: expected 'path label' or 'path<TAB>label'";
  return "";
}

std::string absolute_normal(const fs::path& p) {
  return fs::absolute(p).lexically_normal().string();
}

bool has_outer_space(const std::string& s) {
  return !s.empty() && (is_list_space(s.front()) || is_list_space(s.back()));
}

bool is_image_name(const fs::path& p) {
  std::string ext = p.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) {
    return char(std::tolower(c));
  });
  static const std::set<std::string> kExt = {".jpg", ".jpeg", ".png", ".bmp", ".gif",
                                             ".tga", ".pgm",  ".ppm", ".webp"};
  return kExt.count(ext) > 0;
}

bool hidden(const fs::path& p) { return p.filename().string().compare(0, 1, ".") == 0; }

}  // namespace

std::vector<std::string> read_class_names(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  USER_CHECK(in, "cannot read class names '" << printable(path) << "'");
  std::vector<std::string> names;
  std::string line;
  int64_t offset = 0;  // of the line in the file
  for (bool first = true; std::getline(in, line); first = false) {
    const int64_t bad = first_non_utf8(line);
    USER_CHECK(bad < 0, printable(path)
                            << ":" << names.size() + 1 << ": the class name '" << printable(line)
                            << "' is not UTF-8 text (byte " << offset + bad << " of the file): "
                            << "save " << printable(fs::path(path).filename().string())
                            << " as UTF-8");
    offset += int64_t(line.size()) + 1;
    strip_line_end(line, first);
    names.push_back(trim_list_field(line));
  }
  while (!names.empty() && names.back().empty()) names.pop_back();
  USER_CHECK(!names.empty(), printable(path) << ": no class names");
  std::set<std::string> seen;
  for (size_t i = 0; i < names.size(); i++) {
    USER_CHECK(!names[i].empty(), printable(path)
                                      << ":" << i + 1 << ": empty class name (a blank line would "
                                      << "shift every later label)");
    USER_CHECK(seen.insert(names[i]).second, printable(path)
                                                 << ":" << i + 1 << ": duplicate class name '"
                                                 << printable(names[i]) << "'");
  }
  return names;
}

ImageList read_image_list(const std::string& list_path, int num_classes) {
  ListOptions opt;
  opt.num_classes = num_classes;
  return read_image_list(list_path, opt);
}

ImageList read_image_list(const std::string& list_path, const ListOptions& opt) {
  std::error_code ec;
  USER_CHECK(fs::exists(list_path, ec),
             "image list '" << printable(list_path) << "' does not exist");
  USER_CHECK(
      !fs::is_directory(list_path, ec),
      "image list '" << printable(list_path) << "' is a folder, "
                     << "not a list file (a folder per class is read by scan_class_folders)");
  std::ifstream in(list_path, std::ios::binary);
  USER_CHECK(in,
             "cannot read image list '" << printable(list_path) << "': " << std::strerror(errno));

  ListProblems problems(list_path);
  std::vector<ListRow> rows;
  std::string line, path, label, err;
  int64_t n = 0;
  for (bool first = true; std::getline(in, line); first = false) {
    n++;
    strip_line_end(line, first);
    line = trim_list_field(line);
    if (line.empty() || line[0] == '#') continue;
    err = split_line(line, &path, &label);
    if (err.empty())
      rows.push_back({n, path, label});
    else
      problems.add(n, err);
  }
  USER_CHECK(!in.bad(), "error while reading image list '" << printable(list_path) << "'");
  if (rows.empty()) {
    problems.throw_if_any();
    USER_CHECK(false, "image list '" << printable(list_path) << "' has no samples (" << n
                                     << " lines, all blank or comments)");
  }
  return make_image_list(list_path, rows, problems, opt);
}

ImageList scan_class_folders(const std::string& root) {
  std::error_code ec;
  USER_CHECK(fs::exists(root, ec), "image folder '" << printable(root) << "' does not exist");
  USER_CHECK(fs::is_directory(root, ec), "'" << printable(root) << "' is not a folder");
  ImageList list;
  list.source = root;
  const fs::path base = absolute_normal(root);
  try {
    for (const fs::directory_entry& e : fs::directory_iterator(base))
      if (e.is_directory() && !hidden(e.path()))
        list.class_names.push_back(e.path().filename().string());
    std::sort(list.class_names.begin(), list.class_names.end());
    USER_CHECK(!list.class_names.empty(), "'" << printable(root)
                                              << "' has no class folders (expected "
                                              << "<root>/<class name>/<images>)");
    std::vector<std::string> empty;
    for (size_t k = 0; k < list.class_names.size(); k++) {
      const std::string& name = list.class_names[k];
      const int64_t bad = first_non_utf8(name);
      USER_CHECK(bad < 0, "class folder '" << printable((base / name).string())
                                           << "': its name is not UTF-8 text (byte " << bad
                                           << " of the name): rename the folder (the run keeps "
                                           << "class names as UTF-8 text)");
      USER_CHECK(name.find_first_of("\r\n") == std::string::npos && !has_outer_space(name),
                 "class folder '" << printable(name)
                                  << "': a class name cannot hold a line break or begin or "
                                     "end with whitespace (it is written to "
                                  << kClassNamesFile << ")");
      std::vector<std::string> files;
      for (const fs::directory_entry& e : fs::directory_iterator(base / name))
        if (e.is_regular_file() && !hidden(e.path()) && is_image_name(e.path()))
          files.push_back(e.path().filename().string());
      if (files.empty()) empty.push_back("'" + printable(name) + "'");
      std::sort(files.begin(), files.end());
      for (const std::string& f : files)
        list.samples.push_back({(base / name / f).string(), int32_t(k)});
    }
    std::ostringstream names;
    for (size_t i = 0; i < empty.size(); i++) names << (i ? ", " : "") << empty[i];
    USER_CHECK(empty.empty(), "'" << printable(root) << "': " << empty.size() << " class folder"
                                  << (empty.size() == 1 ? " has" : "s have") << " no images (jpg, "
                                  << "jpeg, png, bmp, gif, tga, pgm, ppm, webp): " << names.str());
  } catch (const fs::filesystem_error& e) {
    USER_CHECK(false, "cannot scan '" << printable(root) << "': " << printable(e.what()));
  }
  return list;
}

void write_image_list(const ImageList& list, const std::string& path) {
  const fs::path dir = fs::path(absolute_normal(path)).parent_path();
  std::string text;
  for (size_t i = 0; i < list.samples.size(); i++) {
    const Sample& s = list.samples[i];
    USER_CHECK(s.path.find_first_of(std::string("\t\r\n\0", 4)) == std::string::npos &&
                   !has_outer_space(s.path) && !s.path.empty(),
               "sample " << i << ": the path cannot be written to a list (empty, or a tab, line "
                         << "break, NUL or surrounding whitespace): '" << printable(s.path) << "'");
    USER_CHECK(s.label >= 0,
               "sample " << i << " (" << printable(s.path) << "): negative label " << s.label);
    const fs::path p = absolute_normal(s.path);
    const fs::path rel = p.lexically_relative(dir);
    std::string out = p.string();
    if (!rel.empty() && *rel.begin() != "..") out = rel.string();
    // Not a comment, and nothing the reader would strip: leading whitespace, or a UTF-8
    // byte-order mark on the first line ("./ a.jpg" is " a.jpg").
    if (out[0] == '#' || is_list_space(out[0]) || out.compare(0, 3, "\xEF\xBB\xBF") == 0)
      out = "./" + out;
    text += out + "\t" + std::to_string(s.label) + "\n";
  }
  write_file_atomically(path, text);
}

void write_class_names(const std::vector<std::string>& names, const std::string& path) {
  std::set<std::string> seen;
  std::string text;
  for (size_t i = 0; i < names.size(); i++) {
    const std::string& n = names[i];
    USER_CHECK(!n.empty() && n.find_first_of("\r\n") == std::string::npos && !has_outer_space(n),
               "class " << i << ": name '" << printable(n)
                        << "' is empty or holds a line break or surrounding "
                        << "whitespace");
    USER_CHECK(seen.insert(n).second, "class " << i << ": duplicate name '" << printable(n) << "'");
    text += n + "\n";
  }
  write_file_atomically(path, text);
}

uint64_t image_list_hash(const ImageList& list) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a 64: offset basis, then xor and multiply
  auto eat = [&h](unsigned char byte) { h = (h ^ byte) * 0x100000001b3ull; };
  for (const Sample& s : list.samples) {
    for (char c : s.path) eat((unsigned char)c);
    eat(0);  // paths hold no 0 byte, so ("ab", 1) and ("a", ...) cannot run together
    const uint32_t label = uint32_t(s.label);
    for (int b = 0; b < 4; b++) eat((unsigned char)(label >> (8 * b)));
  }
  return h;
}

std::vector<int64_t> class_histogram(const ImageList& list, int num_classes) {
  CHECK(num_classes > 0, "class_histogram: num_classes must be positive, got " << num_classes);
  std::vector<int64_t> counts(size_t(num_classes), 0);
  for (size_t i = 0; i < list.samples.size(); i++) {
    const int32_t label = list.samples[i].label;
    USER_CHECK(label >= 0 && label < num_classes,
               "sample " << i << " (" << printable(list.samples[i].path) << "): label " << label
                         << " is outside [0, " << num_classes << ")");
    counts[size_t(label)]++;
  }
  return counts;
}

ImageList read_images(const std::string& list_or_folder, int num_classes) {
  ListOptions opt;
  opt.num_classes = num_classes;
  return read_images(list_or_folder, opt);
}

ImageList read_images(const std::string& list_or_folder, const ListOptions& opt) {
  if (!std::filesystem::is_directory(list_or_folder))
    return is_csv_list(list_or_folder, opt) ? read_csv_list(list_or_folder, opt)
                                            : read_image_list(list_or_folder, opt);
  ImageList l = scan_class_folders(list_or_folder);
  USER_CHECK(opt.num_classes == 0 || int(l.class_names.size()) == opt.num_classes,
             printable(list_or_folder) << " has " << l.class_names.size() << " class folders, but "
                                       << opt.num_classes << " classes were asked for");
  return l;
}

}  // namespace cutrain
