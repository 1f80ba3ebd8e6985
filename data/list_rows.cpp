#include "data/list_rows.h"

#include <unistr.h>  // libunistring: u8_check

#include <charconv>
#include <filesystem>
#include <iterator>
#include <map>
#include <set>
#include <sstream>

#include "kernels/check.h"
#include "kernels/printable.h"

namespace fs = std::filesystem;

namespace cutrain {

int64_t first_non_utf8(const std::string& text) {
  const uint8_t* begin = reinterpret_cast<const uint8_t*>(text.data());
  const uint8_t* bad = u8_check(begin, text.size());
  return bad ? int64_t(bad - begin) : -1;
}

namespace {

constexpr int kMaxShown = 20;       // problem lines quoted in one error; the rest are counted
constexpr size_t kMaxNames = 20;    // class names quoted in a note

// "'a', 'b', 'c'", or the first 20 and "... (N in all)".
template <typename Names>
std::string quoted(const Names& names) {
  std::string s;
  size_t i = 0;
  for (const std::string& n : names) {
    if (i == kMaxNames) return s + ", ... (" + std::to_string(names.size()) + " in all)";
    s += (i++ ? ", '" : "'") + printable(n) + "'";
  }
  return s;
}

// An optional '-' and decimal digits: what a class index looks like. Anything else is a name.
bool looks_integer(const std::string& t) {
  const size_t digits = !t.empty() && t[0] == '-' ? 1 : 0;
  return digits < t.size() && t.find_first_not_of("0123456789", digits) == std::string::npos;
}

// Parses and range-checks an integer label (looks_integer). False, with *err set, when it is
// bad.
bool parse_index(const std::string& text, int num_classes, int32_t* label, std::string* err) {
  int64_t v = 0;
  const char* end = text.data() + text.size();
  const auto r = std::from_chars(text.data(), end, v);
  const bool overflow = r.ec == std::errc::result_out_of_range && r.ptr == end;
  if (!overflow && (r.ec != std::errc() || r.ptr != end)) {
    *err = "label '" + text + "' is not an integer";
    return false;
  }
  const std::string range = "[0, " + std::to_string(num_classes) + ")";
  if (overflow || v > INT32_MAX || v < INT32_MIN) {
    *err = "label " + text + " is out of range";
  } else if (num_classes > 0 && (v < 0 || v >= num_classes)) {
    *err = "label " + text + " is outside " + range;
  } else if (v < 0) {
    *err = "label " + text + " is negative (labels are 0, 1, 2, ...)";
  } else {
    *label = int32_t(v);
    return true;
  }
  return false;
}

// A class name the list itself introduces: "" or why it cannot be one. It must be writable to
// classes.txt, and UTF-8 (first_non_utf8).
std::string name_problem(const std::string& name) {
  if (name.find_first_of(std::string("\r\n\0", 3)) != std::string::npos)
    return "class name '" + name + "' holds a line break or a NUL byte";
  if (const int64_t at = first_non_utf8(name); at >= 0)
    return "class name '" + printable(name) + "' is not UTF-8 text (byte " +
           std::to_string(at) + " of the name): save the list as UTF-8";
  return "";
}

// Every label a class index: the list format as it always was.
void resolve_indices(const std::vector<ListRow>& rows, int num_classes,
                     std::vector<int32_t>& labels, ListProblems& problems) {
  std::string err;
  for (size_t i = 0; i < rows.size(); i++)
    if (!parse_index(rows[i].label, num_classes, &labels[i], &err)) problems.add(rows[i].line, err);
}

// Names looked up in `known` (from `from`); integers that are not known names are indices.
void resolve_known(const std::vector<ListRow>& rows, const std::vector<std::string>& known,
                   const std::string& from, std::vector<int32_t>& labels,
                   ListProblems& problems) {
  std::map<std::string, int32_t> index;
  for (size_t k = 0; k < known.size(); k++) index.emplace(known[k], int32_t(k));
  std::set<std::string> unknown;
  std::string err;
  for (size_t i = 0; i < rows.size(); i++) {
    const std::string& text = rows[i].label;
    const auto it = index.find(text);
    if (it != index.end()) {
      if (looks_integer(text) && text != std::to_string(it->second))
        problems.add(rows[i].line, "label '" + text + "' is ambiguous: the name of class " +
                                       std::to_string(it->second) + " in " + from +
                                       ", or class index " + text +
                                       " (write every label as a name, or every one as an index)");
      else
        labels[i] = it->second;
    } else if (looks_integer(text)) {
      if (!parse_index(text, int(known.size()), &labels[i], &err))
        problems.add(rows[i].line, err + " (the integer labels of a list with class names are "
                                         "indices into " + from + ")");
    } else {
      problems.add(rows[i].line, "unknown class '" + text + "'");
      unknown.insert(text);
    }
  }
  if (unknown.empty()) return;
  problems.note(std::to_string(unknown.size()) + " class name" +
                (unknown.size() == 1 ? " is" : "s are") + " not among " + from + ": " +
                quoted(unknown));
  problems.note(known.empty() ? from + " have no names (integer labels and no classes.txt): "
                                       "give the labels as indices"
                              : from + " (" + std::to_string(known.size()) + "): " +
                                    quoted(known));
}

// No known classes: the list's own names, sorted by byte order, are the classes. Returns them.
std::vector<std::string> resolve_collected(const std::vector<ListRow>& rows, int num_classes,
                                          std::vector<int32_t>& labels,
                                          ListProblems& problems) {
  std::set<std::string> names;  // std::string orders by unsigned bytes, as std::sort does
  size_t first_name = rows.size(), first_index = rows.size(), integers = 0;
  for (size_t i = 0; i < rows.size(); i++) {
    if (!looks_integer(rows[i].label)) {
      names.insert(rows[i].label);
      if (first_name == rows.size()) first_name = i;
    } else if (integers++ == 0) {
      first_index = i;
    }
  }
  // A list mixing the two kinds: the rarer kind is taken for the mistake.
  const bool names_win = integers * 2 <= rows.size();
  std::map<std::string, int32_t> index;
  std::vector<std::string> classes(names.begin(), names.end());
  for (size_t k = 0; k < classes.size(); k++) index.emplace(classes[k], int32_t(k));
  std::string err;
  for (size_t i = 0; i < rows.size(); i++) {
    const std::string& text = rows[i].label;
    const bool integer = looks_integer(text);
    if (integer && !names_win) {
      if (!parse_index(text, num_classes, &labels[i], &err)) problems.add(rows[i].line, err);
    } else if (integer) {
      problems.add(rows[i].line,
                   "label '" + text + "' is an integer, but the list gives class names (line " +
                       std::to_string(rows[first_name].line) + ": '" + rows[first_name].label +
                       "'): write every label as a name, or put a classes.txt beside the list "
                       "(then an integer is an index into it)");
    } else if (!integer && !names_win) {
      problems.add(rows[i].line,
                   "label '" + text + "' is not an integer, but the list gives class indices "
                       "(line " + std::to_string(rows[first_index].line) + ": '" +
                       rows[first_index].label + "'): write every label as an index, or every "
                       "one as a class name");
    } else if (!name_problem(text).empty()) {
      problems.add(rows[i].line, name_problem(text));
    } else {
      labels[i] = index.at(text);
    }
  }
  return classes;
}

}  // namespace

bool is_list_space(char c) {
  return c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v';
}

std::string trim_list_field(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && is_list_space(s[b])) b++;
  while (e > b && is_list_space(s[e - 1])) e--;
  return s.substr(b, e - b);
}

void ListProblems::add(int64_t line, const std::string& what) {
  count_++;
  if (shown_.size() == size_t(kMaxShown) && line >= shown_.rbegin()->first) return;
  shown_.emplace(line, printable(file_) + ":" + std::to_string(line) + ": " + printable(what));
  if (shown_.size() > size_t(kMaxShown)) shown_.erase(std::prev(shown_.end()));
}

void ListProblems::note(const std::string& text) { notes_.push_back(printable(text)); }

void ListProblems::throw_if_any() const {
  if (count_ == 0) return;
  std::ostringstream os;
  os << printable(file_) << ": " << count_ << " malformed line" << (count_ == 1 ? "" : "s") << ":";
  for (const auto& [line, s] : shown_) os << "\n  " << s;
  if (count_ > kMaxShown) os << "\n  ... and " << count_ - kMaxShown << " more";
  for (const std::string& n : notes_) os << "\n  " << n;
  throw UserError(os.str());
}

ImageList make_image_list(const std::string& list_path, const std::vector<ListRow>& rows,
                          ListProblems& problems, const ListOptions& opt) {
  CHECK(opt.num_classes >= 0, "num_classes must be >= 0, got " << opt.num_classes);
  ImageList list;
  list.source = list_path;
  const fs::path dir = fs::absolute(list_path).parent_path();
  const fs::path classes = dir / kClassNamesFile;
  int num_classes = opt.num_classes;
  std::error_code ec;
  if (fs::path(list_path).filename() != kClassNamesFile && fs::exists(classes, ec)) {
    list.class_names = read_class_names(classes.string());
    const int n = int(list.class_names.size());
    USER_CHECK(num_classes == 0 || num_classes == n,
               printable(list_path) << ": " << printable(classes.string()) << " names " << n
                                    << " classes, but " << num_classes << " were asked for");
    num_classes = n;
  }

  std::vector<int32_t> labels(rows.size(), -1);  // -1: refused
  bool names = false;
  for (const ListRow& r : rows) names = names || !looks_integer(r.label);
  if (!names) {
    resolve_indices(rows, num_classes, labels, problems);
  } else if (opt.classes) {
    resolve_known(rows, *opt.classes, opt.classes_source, labels, problems);
    list.class_names = *opt.classes;
  } else if (!list.class_names.empty()) {
    resolve_known(rows, list.class_names, classes.string(), labels, problems);
  } else {
    list.class_names = resolve_collected(rows, opt.num_classes, labels, problems);
    USER_CHECK(opt.num_classes == 0 || int(list.class_names.size()) <= opt.num_classes,
               printable(list_path) << " names " << list.class_names.size() << " classes, but "
                                    << opt.num_classes << " were asked for");
  }
  for (size_t i = 0; i < rows.size(); i++) {
    if (labels[i] < 0) continue;
    const fs::path p(rows[i].path);
    list.samples.push_back({(p.is_absolute() ? p : dir / p).lexically_normal().string(),
                            labels[i]});
  }
  problems.throw_if_any();
  CHECK(!list.samples.empty(), printable(list_path) << ": rows but no samples and no problems");
  return list;
}

}  // namespace cutrain
