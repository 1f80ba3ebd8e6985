// CSV lists (data/image_list.h, "CSV files"): read_csv_list, csv_columns_problem, is_csv_list.
// The splitting into fields is libcsv's (Debian's libcsv-dev), through its streaming API: the
// file is fed a line at a time, so each record knows the line it starts on, and the callbacks
// only collect; everything that can fail is decided outside them (no exception crosses C code).
#include <csv.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "data/image_list.h"
#include "data/list_rows.h"
#include "kernels/check.h"
#include "kernels/printable.h"

namespace fs = std::filesystem;

namespace cutrain {

namespace {

const std::vector<std::string> kPathColumns = {"image", "filename", "file", "path", "image_path"};
const std::vector<std::string> kLabelColumns = {"label", "class", "category", "target"};

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  return s;
}

// "'a', 'b'" for a message.
std::string quoted(const std::vector<std::string>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); i++) s += (i ? ", '" : "'") + v[i] + "'";
  return s;
}

bool all_digits(const std::string& s) {
  return !s.empty() && s.find_first_not_of("0123456789") == std::string::npos;
}

// The two entries of "PATH,LABEL", trimmed; false when there are not exactly two.
bool split_columns(const std::string& spec, std::string* path, std::string* label) {
  const size_t comma = spec.find(',');
  if (comma == std::string::npos || spec.find(',', comma + 1) != std::string::npos) return false;
  *path = trim_list_field(spec.substr(0, comma));
  *label = trim_list_field(spec.substr(comma + 1));
  return true;
}

// The column a --csv-columns entry names in `header` (a 0-based index, or a name compared
// without case), or -1 with *err set.
int find_column(const std::vector<std::string>& header, const std::string& entry,
                const char* role, std::string* err) {
  if (all_digits(entry)) {
    if (entry.size() <= 6 && std::stoi(entry) < int(header.size())) return std::stoi(entry);
    *err = "the " + std::string(role) + " column index " + entry + " is beyond the header's " +
           std::to_string(header.size()) + " columns (" + quoted(header) + "; indices from 0)";
    return -1;
  }
  std::vector<int> hits;
  for (size_t i = 0; i < header.size(); i++)
    if (lower(header[i]) == lower(entry)) hits.push_back(int(i));
  if (hits.size() == 1) return hits[0];
  *err = (hits.empty() ? "no column named '" + entry + "'"
                       : std::to_string(hits.size()) + " columns named '" + entry + "'") +
         " for the " + role + " in the header (" + quoted(header) + ")" +
         (hits.empty() ? "" : ": choose one by its index");
  return -1;
}

// The one column of `header` named one of `names` (without case), or -1 with *err set.
int default_column(const std::vector<std::string>& header, const std::vector<std::string>& names,
                   const char* role, std::string* err) {
  std::vector<int> hits;
  for (size_t i = 0; i < header.size(); i++)
    if (std::find(names.begin(), names.end(), lower(header[i])) != names.end())
      hits.push_back(int(i));
  if (hits.size() == 1) return hits[0];
  std::string list;
  for (size_t i = 0; i < names.size(); i++)
    list += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
  std::vector<std::string> which;
  for (int h : hits) which.push_back(header[size_t(h)]);
  *err = (hits.empty() ? "no " + std::string(role) + " column in the header (" + quoted(header) +
                             "): expected one named " + list + " (any case)"
                       : std::to_string(hits.size()) + " columns could be the " + role + " (" +
                             quoted(which) + ")") +
         "; choose with --csv-columns PATH,LABEL (names or 0-based indices)";
  return -1;
}

// What the libcsv callbacks fill, and what is decided about each record once it ends.
struct CsvState {
  std::string file;
  ListOptions opt;
  ListProblems* problems;
  std::vector<ListRow> rows;
  std::vector<std::string> fields;  // of the record being read
  int64_t line = 0;                 // the line being fed (1-based)
  int64_t record_line = 1;          // where the record being read started
  bool between_records = true;      // no record is open
  bool have_header = false;
  int path_col = -1, label_col = -1;
  std::vector<std::string> header;
  std::string fatal;  // a header that cannot be used: nothing after it can be read

  void end_record() {
    between_records = true;
    if (fatal.empty()) have_header ? take_row() : take_header();
    fields.clear();
  }

  void take_header() {
    have_header = true;
    for (const std::string& f : fields) header.push_back(trim_list_field(f));
    std::string err, path_entry, label_entry;
    if (opt.csv_columns.empty()) {
      path_col = default_column(header, kPathColumns, "path", &err);
      if (path_col >= 0) label_col = default_column(header, kLabelColumns, "label", &err);
    } else {
      split_columns(opt.csv_columns, &path_entry, &label_entry);  // checked before reading
      path_col = find_column(header, path_entry, "path", &err);
      if (path_col >= 0) label_col = find_column(header, label_entry, "label", &err);
      if (label_col >= 0 && label_col == path_col)
        err = "--csv-columns " + opt.csv_columns + " names column " + std::to_string(path_col) +
              " ('" + header[size_t(path_col)] + "') for both the path and the label";
    }
    if (!err.empty())  // the header's names quoted as they are, made printable once here
      fatal = printable(file + ":" + std::to_string(record_line) + ": " + err);
  }

  void take_row() {
    const size_t need = size_t(std::max(path_col, label_col)) + 1;
    if (fields.size() < need) {
      problems->add(record_line, std::to_string(fields.size()) + " field" +
                                     (fields.size() == 1 ? "" : "s") + "; the header has " +
                                     std::to_string(header.size()) + " columns, the " +
                                     (label_col > path_col ? "label ('" : "path ('") +
                                     header[need - 1] + "') is column " +
                                     std::to_string(need - 1) + " (from 0)");
      return;
    }
    const std::string path = trim_list_field(fields[size_t(path_col)]);
    const std::string label = trim_list_field(fields[size_t(label_col)]);
    if (path.empty()) {
      problems->add(record_line, "empty path (column '" + header[size_t(path_col)] + "')");
    } else if (path.find('\0') != std::string::npos) {
      problems->add(record_line, "a NUL byte in the path");
    } else if (path.find_first_of("\r\n") != std::string::npos) {
      problems->add(record_line, "a line break in the path");
    } else if (label.empty()) {
      problems->add(record_line, "no label (column '" + header[size_t(label_col)] + "' is empty)");
    } else {
      rows.push_back({record_line, path, label});
    }
  }
};

void on_field(void* text, size_t len, void* state) {
  static_cast<CsvState*>(state)->fields.emplace_back(
      len ? std::string(static_cast<const char*>(text), len) : std::string());
}

void on_record(int, void* state) { static_cast<CsvState*>(state)->end_record(); }

// libcsv's parser, freed however the reading ends.
struct CsvParser {
  csv_parser p;
  CsvParser() { CHECK(csv_init(&p, CSV_STRICT | CSV_STRICT_FINI) == 0, "csv_init failed"); }
  ~CsvParser() { csv_free(&p); }
  CsvParser(const CsvParser&) = delete;
  CsvParser& operator=(const CsvParser&) = delete;
};

bool blank(const std::string& line) {
  return line.find_first_not_of(" \t\r\n") == std::string::npos;
}

}  // namespace

std::string csv_columns_problem(const std::string& spec) {
  if (spec.empty()) return "";
  std::string path, label;
  const bool two = split_columns(spec, &path, &label);
  if (two && !path.empty() && !label.empty() && lower(path) != lower(label)) return "";
  return "expected PATH,LABEL: two different column names or 0-based indices (e.g. "
         "filename,class or 0,1), got '" + printable(spec) + "'";
}

bool is_csv_list(const std::string& path, const ListOptions& opt) {
  return !opt.csv_columns.empty() || lower(fs::path(path).extension().string()) == ".csv";
}

ImageList read_csv_list(const std::string& csv_path, const ListOptions& opt) {
  const std::string columns_problem = csv_columns_problem(opt.csv_columns);
  USER_CHECK(columns_problem.empty(), "--csv-columns: " << columns_problem);
  std::error_code ec;
  USER_CHECK(fs::exists(csv_path, ec), "CSV list '" << printable(csv_path) << "' does not exist");
  USER_CHECK(!fs::is_directory(csv_path, ec),
             "CSV list '" << printable(csv_path) << "' is a folder");
  std::ifstream in(csv_path, std::ios::binary);
  USER_CHECK(in, "cannot read CSV list '" << printable(csv_path) << "': " << std::strerror(errno));

  ListProblems problems(csv_path);
  CsvState st;
  st.opt = opt;
  st.problems = &problems;
  st.file = csv_path;
  CsvParser parser;
  std::string line;
  bool syntax_error = false;
  while (!syntax_error && std::getline(in, line)) {
    st.line++;
    if (st.line == 1 && line.compare(0, 3, "\xEF\xBB\xBF") == 0) line.erase(0, 3);
    if (!in.eof()) line += '\n';
    if (st.between_records && !blank(line)) {
      st.record_line = st.line;  // a record starts on this line
      st.between_records = false;
    }
    const size_t used = csv_parse(&parser.p, line.data(), line.size(), on_field, on_record, &st);
    USER_CHECK(st.fatal.empty(), st.fatal);
    if (used != line.size()) {
      const int e = csv_error(&parser.p);
      USER_CHECK(e == CSV_EPARSE, printable(csv_path) << ":" << st.line << ": " << csv_strerror(e));
      problems.add(st.line, "CSV syntax error: a quote inside an unquoted field, or text after "
                            "a closing quote (a quote in a field is written \"\" inside a "
                            "quoted field); the lines after it are not read");
      syntax_error = true;
    }
  }
  USER_CHECK(!in.bad(), "error while reading CSV list '" << printable(csv_path) << "'");
  if (!syntax_error && csv_fini(&parser.p, on_field, on_record, &st) != 0)
    problems.add(st.record_line, "CSV syntax error: a quoted field that starts here is never "
                                 "closed (the file ends inside it)");
  USER_CHECK(st.fatal.empty(), st.fatal);
  if (st.rows.empty()) {
    problems.throw_if_any();
    USER_CHECK(false, "CSV list '"
                          << printable(csv_path) << "' has no samples ("
                          << (st.have_header ? "a header and no rows" : "not even a header row")
                          << ")");
  }
  return make_image_list(csv_path, st.rows, problems, opt);
}

}  // namespace cutrain
