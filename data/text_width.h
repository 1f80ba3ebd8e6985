// defines: display_width(), pad_right(), truncate_to_width(), fit_to_width() and
// column_width(): text measured in terminal columns rather than bytes, so that tables whose
// cells hold class names ("Ñandú", "靴", "Ankle boot") line up, and a cut never falls inside
// a character. The widths come from libunistring (uc_width, as in a UTF-8 locale), the
// character boundaries from its grapheme cluster breaks (u8_grapheme_breaks).
//
// Rules, the same in every function:
//   - Text is UTF-8, printed as printable() shows it (kernels/printable.h): an invalid byte,
//     a control character (a tab or an escape sequence would move the cursor, not take a
//     column) or a bidi control becomes a visible escape such as "\x1b" or "\u202e", and its
//     columns are the escape's (4 or 6). Nothing in a cell can move the cursor.
//   - East Asian wide and fullwidth characters (靴, most emoji) count 2 columns; combining
//     marks and other zero-width characters count 0; the rest 1. Ambiguous-width characters
//     (…, �, Greek and Cyrillic in CJK fonts) count 1, as most terminals in UTF-8 locales draw
//     them.
//   - A cluster's width is the sum of its code points': emoji joined by U+200D (ZWJ) or made
//     wide by U+FE0F are drawn differently by different terminals and may not line up.
//   - Truncation keeps whole grapheme clusters (a base with its combining marks: "n" + U+0303
//     is never split) and ends with "…" (U+2026, 1 column), so a cut name says it was cut.
//
// Tables cap a name column at kMaxNameColumns and truncate longer names; the class index
// beside the name keeps two names with the same start apart.
#pragma once
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/printable.h"  // printable(): what these functions print

namespace cutrain {

// The widest a table's column of names grows (terminal columns); longer names are cut.
constexpr size_t kMaxNameColumns = 40;

// The marker truncate_to_width() puts where it cut.
inline constexpr std::string_view kEllipsis = "\u2026";  // …, 1 column

// The columns `utf8` takes when printed (printed as printable(utf8)).
// "cat" -> 3, "Ñandú" -> 5 (precomposed or with combining marks), "靴" -> 2, "\xff" -> 4
// (printed as the 4 characters \xff).
size_t display_width(std::string_view utf8);

// printable(utf8) followed by spaces up to `width` columns; unchanged (not cut) if wider.
std::string pad_right(std::string_view utf8, size_t width);

// printable(utf8) if it fits in `width` columns; otherwise its longest run of whole grapheme
// clusters that fits in width - 1 columns, then "…". The result never exceeds `width`: a wide
// character that would straddle the edge is dropped whole ("ab靴" at 3 -> "ab…", at 2 ->
// "a…"). Width 0 gives "".
std::string truncate_to_width(std::string_view utf8, size_t width);

// A table cell: truncate_to_width, then pad_right, so the result is exactly `width` columns.
std::string fit_to_width(std::string_view utf8, size_t width);

// The width of a column holding `cells`: the widest cell's display width, at least
// `min_width` (e.g. the header's) and at most `max_width`.
size_t column_width(const std::vector<std::string>& cells, size_t min_width,
                    size_t max_width = kMaxNameColumns);

}  // namespace cutrain
