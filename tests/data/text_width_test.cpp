// Text measured in terminal columns (data/text_width.h): widths of ASCII, accented names
// precomposed and with combining marks, CJK and emoji; invalid UTF-8 and control characters
// shown as printable()'s escapes (kernels/printable.h), their columns the escape's; truncation
// that never cuts inside a character or a grapheme cluster and never exceeds its width; on
// random bytes, the same promises.
#include <unistr.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "data/text_width.h"
#include "tests/test_util.h"

using namespace cutrain;

namespace {
const std::string kNanduPre = "\u00d1and\u00fa";     // Ñandú, 7 bytes
const std::string kNanduComb = "N\u0303andu\u0301";  // the same with combining marks, 9 bytes
const std::string kBoot = "\u9774";                  // 靴, 3 bytes, 2 columns
const std::string kGrin = "\U0001F600";              // 😀, 4 bytes, 2 columns

bool valid_utf8(const std::string& s) {
  return u8_check(reinterpret_cast<const uint8_t*>(s.data()), s.size()) == nullptr;
}
std::string repeat(const std::string& s, int n) {
  std::string r;
  for (int i = 0; i < n; i++) r += s;
  return r;
}
}  // namespace

TEST_CASE("display_width: columns, not bytes: ASCII, accents, CJK, emoji") {
  REQUIRE(display_width("") == 0);
  REQUIRE(display_width("cat") == 3);
  REQUIRE(display_width("Ankle boot") == 10);
  REQUIRE(kNanduPre.size() == 7);
  REQUIRE(display_width(kNanduPre) == 5);
  REQUIRE(kNanduComb.size() == 9);
  REQUIRE(display_width(kNanduComb) == 5);  // combining marks take no column
  REQUIRE(display_width(kBoot) == 2);
  REQUIRE(display_width(kBoot + "cat") == 5);
  REQUIRE(display_width(kGrin) == 2);
  REQUIRE(display_width("\u2026") == 1);  // the truncation marker
}

TEST_CASE("display_width: an invalid byte or a control character takes its escape's columns") {
  REQUIRE(display_width("\xff") == 4);                 // \xff
  REQUIRE(display_width("a\x80" "b") == 6);            // a stray continuation byte
  REQUIRE(display_width("\xe9\x9d") == 8);             // 靴 cut short: two bytes, two escapes
  REQUIRE(display_width("x\xe9\x9d") == 9);
  REQUIRE(display_width("\xc0\x80") == 8);             // an overlong NUL
  REQUIRE(display_width("\xed\xa0\x80") == 12);        // a UTF-16 surrogate
  REQUIRE(display_width("a\tb") == 6);
  REQUIRE(display_width("\x1b[31m") == 8);            // an escape sequence cannot recolour
  REQUIRE(display_width(std::string("a\0b", 3)) == 6);  // a NUL does not end the text
  REQUIRE(display_width("\u202e") == 6);               // a bidi control: \u202e
  REQUIRE(display_width("\uFFFD") == 1);               // U+FFFD itself is a character

  REQUIRE(printable(kNanduPre) == kNanduPre);  // valid text comes back as it was
  REQUIRE(printable(kNanduComb + kBoot + kGrin) == kNanduComb + kBoot + kGrin);
  REQUIRE(pad_right("a\x1b" "b", 8) == "a\\x1bb  ");
}

TEST_CASE("pad_right: spaces up to the width in columns; a wider text is left whole") {
  REQUIRE(pad_right("cat", 8) == "cat     ");
  REQUIRE(pad_right(kNanduPre, 8) == kNanduPre + "   ");
  REQUIRE(pad_right(kNanduComb, 8) == kNanduComb + "   ");
  REQUIRE(pad_right(kBoot, 8) == kBoot + "      ");
  REQUIRE(pad_right(kGrin, 3) == kGrin + " ");
  REQUIRE(pad_right("\xff", 6) == "\\xff  ");
  REQUIRE(pad_right("cat", 2) == "cat");
  for (const std::string& s : {std::string("cat"), kNanduPre, kNanduComb, kBoot, kGrin})
    REQUIRE(display_width(pad_right(s, 12)) == 12);
}

TEST_CASE("truncate_to_width: whole characters and clusters, then '…', never wider") {
  REQUIRE(truncate_to_width(kNanduPre, 5) == kNanduPre);  // fits: unchanged
  REQUIRE(truncate_to_width(kNanduPre, 4) == "\u00d1an\u2026");
  REQUIRE(truncate_to_width(kNanduComb, 5) == kNanduComb);
  REQUIRE(truncate_to_width(kNanduComb, 4) == "N\u0303an\u2026");  // the tilde stays on its N
  REQUIRE(truncate_to_width(kNanduComb, 2) == "N\u0303\u2026");
  REQUIRE(truncate_to_width("cat", 1) == "\u2026");
  REQUIRE(truncate_to_width("cat", 0) == "");
  REQUIRE(truncate_to_width("", 0) == "");
  // A wide character that would straddle the edge goes whole, the cell one column short.
  REQUIRE(truncate_to_width("ab" + kBoot, 4) == "ab" + kBoot);
  REQUIRE(truncate_to_width("ab" + kBoot, 3) == "ab\u2026");
  REQUIRE(truncate_to_width("ab" + kBoot, 2) == "a\u2026");
  REQUIRE(truncate_to_width(repeat(kBoot, 3), 5) == repeat(kBoot, 2) + "\u2026");
  REQUIRE(truncate_to_width(repeat(kBoot, 3), 4) == kBoot + "\u2026");  // 3 columns
  REQUIRE(truncate_to_width(repeat(kGrin, 3), 4) == kGrin + "\u2026");
  REQUIRE(truncate_to_width("abc\xff\xfe", 4) == "abc\u2026");
  REQUIRE(truncate_to_width("\xff\xfe" "abc", 9) == "\\xff\\xfe\u2026");
  // A flag is two regional indicators, one cluster: never half a flag.
  const std::string fr = "\U0001F1EB\U0001F1F7", de = "\U0001F1E9\U0001F1EA";
  for (size_t w = 0; w <= display_width(fr + de + "x"); w++) {
    const std::string t = truncate_to_width(fr + de + "x", w);
    INFO("width " << w << ": " << t);
    REQUIRE((t.empty() || t == "\u2026" || t.rfind(fr, 0) == 0));
    REQUIRE(t.find("\U0001F1EB\u2026") == std::string::npos);
    REQUIRE(t.find("\U0001F1E9\u2026") == std::string::npos);
  }

  REQUIRE(fit_to_width(kNanduComb, 8) == kNanduComb + "   ");
  REQUIRE(fit_to_width(repeat(kBoot, 3), 4) == kBoot + "\u2026 ");
  for (size_t w = 0; w < 12; w++)
    for (const std::string& s : {repeat("cat", 3), kNanduPre, kNanduComb, repeat(kBoot, 4)})
      REQUIRE(display_width(fit_to_width(s, w)) == w);
}

TEST_CASE("column_width: the widest cell in columns, between the floor and the cap") {
  const std::vector<std::string> names = {"cat", kNanduPre, kBoot};
  REQUIRE(column_width(names, 4) == 5);
  REQUIRE(column_width({"cat", kNanduComb, kBoot}, 4) == 5);
  REQUIRE(column_width(names, 20) == 20);
  REQUIRE(column_width({repeat(kBoot, 30)}, 5) == kMaxNameColumns);
  REQUIRE(column_width({repeat(kBoot, 30)}, 5, 12) == 12);
  REQUIRE(column_width({}, 5) == 5);
}

TEST_CASE("text_width on random bytes: valid output, widths kept, cuts within bounds") {
  std::mt19937 rng(3);
  // Bytes drawn from pieces that mix valid and broken sequences, and plain random bytes.
  const std::vector<std::string> pieces = {"a", " ", kNanduPre, kNanduComb, kBoot, kGrin,
                                           "\u0301", "\xe9", "\x9d", "\xff", "\t", "\xf0\x9f"};
  for (int trial = 0; trial < 400; trial++) {
    std::string s;
    const int n = int(rng() % 12);
    for (int i = 0; i < n; i++)
      s += trial % 2 ? pieces[rng() % pieces.size()] : std::string(1, char(rng() & 0xff));
    const std::string p = printable(s);
    INFO("trial " << trial);
    REQUIRE(valid_utf8(p));
    REQUIRE(printable(p) == p);
    REQUIRE(display_width(p) == display_width(s));
    for (size_t w = 0; w <= display_width(s) + 1; w++) {
      const std::string t = truncate_to_width(s, w);
      REQUIRE(valid_utf8(t));
      REQUIRE(display_width(t) <= w);
      if (w == 0 && display_width(s) > 0) REQUIRE(t.empty());
      if (t != p && w > 0) {  // cut: a prefix of the printable text, then the marker
        REQUIRE(t.size() >= kEllipsis.size());
        const std::string kept = t.substr(0, t.size() - kEllipsis.size());
        REQUIRE(t.substr(kept.size()) == kEllipsis);
        REQUIRE(p.compare(0, kept.size(), kept) == 0);
      }
      REQUIRE(display_width(fit_to_width(s, w)) == w);
    }
  }
}
