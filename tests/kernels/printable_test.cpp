// printable() (kernels/printable.h): each kind of byte a terminal would obey (C0 controls, DEL,
// C1 controls, invalid UTF-8, bidi controls) shown as its escape, everything else kept;
// printable_message keeps cutrain's line breaks; is_printable_message's rule; on random bytes,
// the output is valid UTF-8 holding none of them, and printable is idempotent.
#include <unistr.h>

#include <random>
#include <string>

#include "kernels/printable.h"
#include "tests/test_util.h"

using namespace cutrain;

namespace {

// Whether `s` holds anything printable() escapes: what must never reach a terminal raw.
bool holds_raw(const std::string& s) {
  const uint8_t* b = reinterpret_cast<const uint8_t*>(s.data());
  if (u8_check(b, s.size()) != nullptr) return true;  // invalid UTF-8
  for (size_t i = 0; i < s.size();) {
    ucs4_t uc;
    i += size_t(u8_mbtouc(&uc, b + i, s.size() - i));
    if (uc < 0x20 || (uc >= 0x7F && uc <= 0x9F) || uc == 0x061C || uc == 0x200E || uc == 0x200F ||
        (uc >= 0x202A && uc <= 0x202E) || (uc >= 0x2066 && uc <= 0x2069) || uc == 0x2028 ||
        uc == 0x2029)
      return true;
  }
  return false;
}

}  // namespace

TEST_CASE("printable: controls, invalid UTF-8 and bidi controls escaped, the rest kept") {
  // Valid text, whatever its script, comes back as it was (U+FFFD is a character too).
  for (const std::string s : {"", "cat", "Ankle boot", "\u00d1and\u00fa", "N\u0303andu\u0301",
                              "\u9774 \U0001F600", "caf\u00e9 \\x41", "\uFFFD", "\u00a0\u00a1"})
    REQUIRE(printable(s) == s);
  // The crafted name of issue 47: a title, a bell, a clear screen.
  REQUIRE(printable("\x1b]0;owned\x07\x1b[2J") == "\\x1b]0;owned\\x07\\x1b[2J");
  // The damaged one: one byte of "momentum" flipped, not UTF-8.
  REQUIRE(printable("conv1.w.\x92omentum") == "conv1.w.\\x92omentum");
  REQUIRE(printable(std::string("a\0b", 3)) == "a\\x00b");
  REQUIRE(printable("tab\there\r\nback\bspace\x7f") == "tab\\x09here\\x0d\\x0aback\\x08space\\x7f");
  REQUIRE(printable("\xc2\x85\xc2\x9b") == "\\u0085\\u009b");  // C1: NEL, CSI
  REQUIRE(printable("\xe9\x9d") == "\\xe9\\x9d");              // 靴 cut short
  REQUIRE(printable("\xc0\x80") == "\\xc0\\x80");              // an overlong NUL
  REQUIRE(printable("\xed\xa0\x80") == "\\xed\\xa0\\x80");     // a UTF-16 surrogate
  REQUIRE(printable("\xf4\x90\x80\x80") == "\\xf4\\x90\\x80\\x80");  // past U+10FFFF
  REQUIRE(printable("\xff\xfe") == "\\xff\\xfe");
  // Bidi controls: "gpj.exe" drawn as "exe.jpg" by U+202E.
  REQUIRE(printable("photo\u202egpj.exe") == "photo\\u202egpj.exe");
  REQUIRE(printable("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u2066\u2067\u2068\u2069") ==
          "\\u061c\\u200e\\u200f\\u202a\\u202b\\u202c\\u202d\\u2066\\u2067\\u2068\\u2069");
  REQUIRE(printable("a\u2028b\u2029") == "a\\u2028b\\u2029");
  REQUIRE(printable("\u200d\u2060") == "\u200d\u2060");  // other format characters are kept
}

TEST_CASE("printable_message: cutrain's line breaks kept, every other control escaped") {
  REQUIRE(printable_message("list.txt: 2 malformed lines:\n  list.txt:1: x\n  list.txt:2: y") ==
          "list.txt: 2 malformed lines:\n  list.txt:1: x\n  list.txt:2: y");
  REQUIRE(printable_message("a\r\n  \x1b[2J\xff\u202e") == "a\\x0d\n  \\x1b[2J\\xff\\u202e");
  REQUIRE(printable_message("\n") == "\n");
  REQUIRE(printable_message("") == "");

  REQUIRE(is_printable_message("one line"));
  REQUIRE(is_printable_message("bad configuration:\n  --batch ...\n  --lr ..."));
  REQUIRE(!is_printable_message("name\nforged line"));  // a break without the indent
  REQUIRE(!is_printable_message("ends with a break\n"));
  REQUIRE(!is_printable_message("a \x1b[2J"));
  REQUIRE(!is_printable_message("a\r"));
  REQUIRE(!is_printable_message("\x92omentum"));
  REQUIRE(!is_printable_message("\u202e"));
  REQUIRE(is_printable_message(printable("any\nthing\x1b")));
}

TEST_CASE("printable on random bytes: valid UTF-8, nothing raw, idempotent, the rest kept") {
  std::mt19937 rng(47);
  const std::vector<std::string> pieces = {"a", " ", "\\", "\u00e9", "\u9774", "\U0001F600",
                                           "\x1b", "\x07", "\r", "\n", "\b", "\x7f", "\xc2\x85",
                                           "\u202e", "\u2066", "\xff", "\xe9", "\xf0\x9f", "\x80"};
  for (int trial = 0; trial < 2000; trial++) {
    std::string s;
    const int n = int(rng() % 16);
    for (int i = 0; i < n; i++)
      s += trial % 2 ? pieces[rng() % pieces.size()] : std::string(1, char(rng() & 0xff));
    INFO("trial " << trial);
    const std::string p = printable(s);
    REQUIRE(!holds_raw(p));
    REQUIRE(printable(p) == p);
    REQUIRE(is_printable_message(p));
    if (!holds_raw(s)) REQUIRE(p == s);
    const std::string m = printable_message(s);
    REQUIRE(printable_message(m) == m);
    REQUIRE(m.find_first_of("\r\x1b\x07\b") == std::string::npos);
  }
}
