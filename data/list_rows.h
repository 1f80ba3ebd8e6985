// defines: (internal to the list readers) ListRow, ListProblems and make_image_list: what the
// plain list reader (image_list.cpp) and the CSV reader (csv_list.cpp) share once they have
// split a file into rows of (line, path, label text): classes.txt, the label rules of
// image_list.h (integers or class names), the paths made absolute, and all problems thrown as
// one error.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "data/image_list.h"

namespace cutrain {

// The offset of the first byte of `text` that does not belong to valid UTF-8 (a stray
// continuation byte, a sequence cut short, an overlong form, a surrogate), or -1 when it is all
// UTF-8. The run keeps class names in JSON (config.json, checkpoints, packs), which holds only
// UTF-8: a name that is not is refused where it is read, naming where.
int64_t first_non_utf8(const std::string& text);

struct ListRow {
  int64_t line;       // 1-based, where the row starts
  std::string path;   // as written (trimmed), relative or absolute, not empty
  std::string label;  // trimmed, not empty
};

// Collects the problems of a whole file, so that one run reports all of them: the 20 with the
// lowest line numbers, in line order, as "file:line: what", then a count of the rest, then
// any notes (once each). Each problem and note is one line of the message, and is made
// printable here (kernels/printable.h), so the readers may quote the file's text as it is: a
// name holding a line break or an escape sequence shows as "\x0a", "\x1b".
class ListProblems {
 public:
  explicit ListProblems(std::string file) : file_(std::move(file)) {}
  void add(int64_t line, const std::string& what);
  void note(const std::string& text);
  int64_t count() const { return count_; }
  // Throws UserError (the data's fault) when there are problems.
  void throw_if_any() const;

 private:
  std::string file_;
  std::multimap<int64_t, std::string> shown_;  // line -> message, at most 20
  std::vector<std::string> notes_;
  int64_t count_ = 0;
};

// The list of `rows` read from `list_path`: labels resolved (image_list.h, "Labels"), paths
// made absolute against the list's folder and lexically normal. Problems found here are added
// to `problems`, which is then thrown if it holds any (those of the reader's own included).
// `rows` must not be empty (the reader says what an empty file is).
ImageList make_image_list(const std::string& list_path, const std::vector<ListRow>& rows,
                          ListProblems& problems, const ListOptions& opt);

// Whitespace as lists trim it: space, tab, CR, FF, VT.
bool is_list_space(char c);
std::string trim_list_field(const std::string& s);

}  // namespace cutrain
