#include "kernels/printable.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>

namespace cutrain {
namespace {

// The length of the valid UTF-8 sequence at s[0..n) (RFC 3629: no overlong forms, no
// surrogates, nothing past U+10FFFF), with its code point in *cp; 0 when it is not one.
size_t utf8_sequence(const uint8_t* s, size_t n, uint32_t* cp) {
  const uint8_t b = s[0];
  if (b < 0x80) {
    *cp = b;
    return 1;
  }
  size_t len = 0;
  uint8_t lo = 0x80, hi = 0xBF;  // the second byte's range, narrower after some lead bytes
  if (b >= 0xC2 && b <= 0xDF) {
    len = 2, *cp = b & 0x1Fu;
  } else if (b >= 0xE0 && b <= 0xEF) {
    len = 3, *cp = b & 0x0Fu;
    if (b == 0xE0) lo = 0xA0;  // else overlong
    if (b == 0xED) hi = 0x9F;  // else a UTF-16 surrogate
  } else if (b >= 0xF0 && b <= 0xF4) {
    len = 4, *cp = b & 0x07u;
    if (b == 0xF0) lo = 0x90;  // else overlong
    if (b == 0xF4) hi = 0x8F;  // else past U+10FFFF
  } else {
    return 0;  // a continuation byte, C0/C1 (overlong), F5-FF
  }
  if (n < len) return 0;
  for (size_t i = 1; i < len; i++) {
    const uint8_t c = s[i];
    if (c < (i == 1 ? lo : 0x80) || c > (i == 1 ? hi : 0xBF)) return 0;
    *cp = *cp << 6 | (c & 0x3Fu);
  }
  return len;
}

bool is_bidi_or_separator(uint32_t cp) {
  return cp == 0x061C || cp == 0x200E || cp == 0x200F || (cp >= 0x202A && cp <= 0x202E) ||
         (cp >= 0x2066 && cp <= 0x2069) || cp == 0x2028 || cp == 0x2029;
}

void append_escape(std::string* out, const char* format, unsigned value) {
  char buf[8];
  std::snprintf(buf, sizeof buf, format, value);
  *out += buf;
}

}  // namespace

std::string printable(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  const uint8_t* s = reinterpret_cast<const uint8_t*>(text.data());
  const size_t n = text.size();
  for (size_t i = 0; i < n;) {
    uint32_t cp = 0;
    const size_t len = utf8_sequence(s + i, n - i, &cp);
    if (len == 0 || cp < 0x20 || cp == 0x7F) {  // an invalid byte, a C0 control, DEL
      append_escape(&out, "\\x%02x", s[i]);
      i += 1;
    } else if ((cp >= 0x80 && cp <= 0x9F) || is_bidi_or_separator(cp)) {
      append_escape(&out, "\\u%04x", cp);
      i += len;
    } else {
      out.append(text.data() + i, len);
      i += len;
    }
  }
  return out;
}

std::string printable_message(std::string_view message) {
  std::string out;
  for (size_t b = 0; b <= message.size();) {
    const size_t e = std::min(message.find('\n', b), message.size());
    out += printable(message.substr(b, e - b));
    if (e < message.size()) out += '\n';
    b = e + 1;
  }
  return out;
}

bool is_printable_message(std::string_view message) {
  for (size_t at = message.find('\n'); at != std::string_view::npos; at = message.find('\n', at + 1))
    if (message.compare(at + 1, 2, "  ") != 0) return false;
  return printable_message(message) == message;
}

}  // namespace cutrain
