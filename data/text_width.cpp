#include "data/text_width.h"

#include <unigbrk.h>
#include <unistr.h>
#include <uniwidth.h>

#include <algorithm>
#include <vector>

namespace cutrain {
namespace {

const uint8_t* bytes(std::string_view s) { return reinterpret_cast<const uint8_t*>(s.data()); }

// Columns of one code point of printable text. uc_width says -1 for control characters;
// printable() has escaped those, so this is 0, 1 or 2.
int char_width(ucs4_t uc) { return std::max(uc_width(uc, "UTF-8"), 0); }

// The columns of valid UTF-8 (printable's output): the sum over its code points.
size_t valid_width(const uint8_t* s, const uint8_t* end) {
  size_t w = 0;
  while (s < end) {
    ucs4_t uc;
    s += u8_mbtouc_unsafe(&uc, s, size_t(end - s));
    w += size_t(char_width(uc));
  }
  return w;
}

}  // namespace

size_t display_width(std::string_view utf8) {
  const std::string p = printable(utf8);
  return valid_width(bytes(p), bytes(p) + p.size());
}

std::string pad_right(std::string_view utf8, size_t width) {
  std::string p = printable(utf8);
  const size_t w = valid_width(bytes(p), bytes(p) + p.size());
  if (w < width) p.append(width - w, ' ');
  return p;
}

std::string truncate_to_width(std::string_view utf8, size_t width) {
  const std::string p = printable(utf8);
  const uint8_t* begin = bytes(p);
  const uint8_t* end = begin + p.size();
  if (valid_width(begin, end) <= width) return p;
  if (width == 0) return "";
  const size_t marker = display_width(kEllipsis);
  const size_t budget = width > marker ? width - marker : 0;
  // Whole grapheme clusters (a base and its combining marks, a flag's two regional
  // indicators) while they fit. breaks[i] != 0: a cluster starts at byte i. The whole-string
  // u8_grapheme_breaks, not u8_grapheme_next: the latter looks at two code points at a time
  // and so splits a run of flags anywhere (libunistring 1.0).
  std::vector<char> breaks(p.size());
  u8_grapheme_breaks(begin, p.size(), breaks.data());
  size_t cut = 0, used = 0;
  while (cut < p.size()) {
    size_t next = cut + 1;
    while (next < p.size() && !breaks[next]) next++;
    const size_t w = valid_width(begin + cut, begin + next);
    if (used + w > budget) break;
    used += w;
    cut = next;
  }
  return p.substr(0, cut) + std::string(kEllipsis);
}

std::string fit_to_width(std::string_view utf8, size_t width) {
  return pad_right(truncate_to_width(utf8, width), width);
}

size_t column_width(const std::vector<std::string>& cells, size_t min_width, size_t max_width) {
  size_t w = min_width;
  for (const std::string& c : cells) w = std::max(w, display_width(c));
  return std::min(w, std::max(min_width, max_width));
}

}  // namespace cutrain
