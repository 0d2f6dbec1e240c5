#include "text_escape.h"

#include <cstdint>
#include <cstdio>

namespace lockstep {
namespace {

// Length of the well-formed UTF-8 sequence at s[i] (RFC 3629: no overlongs, no surrogates,
// at most U+10FFFF), or 0 when the bytes there are not one.
size_t utf8_len(std::string_view s, size_t i, uint32_t& cp) {
  auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  unsigned char c = b(i);
  size_t n;
  if (c < 0x80) return cp = c, 1;
  if (c >= 0xC2 && c <= 0xDF) n = 2, cp = c & 0x1F;
  else if (c >= 0xE0 && c <= 0xEF) n = 3, cp = c & 0x0F;
  else if (c >= 0xF0 && c <= 0xF4) n = 4, cp = c & 0x07;
  else return 0;
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((b(i + k) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (b(i + k) & 0x3F);
  }
  if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10FFFF)) || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return n;
}

// Control characters, and the format characters that reorder or hide what a terminal or a
// browser shows (Trojan Source, CVE-2021-42574): the bidirectional embeddings, overrides and
// isolates (U+202A..U+202E, U+2066..U+2069), the marks (U+200E, U+200F, U+061C), and the line
// and paragraph separators (U+2028, U+2029), which some viewers break lines at.
bool control(uint32_t cp) {
  return cp < 0x20 || cp == 0x7F || (cp >= 0x80 && cp <= 0x9F) || (cp >= 0x202A && cp <= 0x202E) ||
         (cp >= 0x2066 && cp <= 0x2069) || cp == 0x200E || cp == 0x200F || cp == 0x061C || cp == 0x2028 ||
         cp == 0x2029;
}

}  // namespace

bool is_printable(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7F) {
      ++i;
      continue;
    }
    uint32_t cp = 0;
    size_t n = utf8_len(s, i, cp);
    if (n == 0 || control(cp)) return false;
    i += n;
  }
  return true;
}

std::string printable(std::string_view s) {
  if (is_printable(s)) return std::string(s);
  std::string out;
  out.reserve(s.size() + 16);
  char buf[16];
  for (size_t i = 0; i < s.size();) {
    uint32_t cp = 0;
    size_t n = utf8_len(s, i, cp);
    if (n == 0) {
      std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned char>(s[i]));
      out += buf;
      ++i;
      continue;
    }
    if (control(cp)) {
      switch (cp) {
        case '\n': out += "\\n"; break;
        case '\r': out += "\\r"; break;
        case '\t': out += "\\t"; break;
        default:
          std::snprintf(buf, sizeof buf, cp < 0x80 ? "\\x%02x" : "\\u%04x", static_cast<unsigned>(cp));
          out += buf;
      }
    } else {
      out.append(s.substr(i, n));
    }
    i += n;
  }
  return out;
}

std::string printable_lines(std::string_view s) {
  std::string out;
  size_t at = 0;
  while (at <= s.size()) {
    size_t nl = s.find('\n', at);
    if (nl == std::string_view::npos) nl = s.size();
    out += printable(s.substr(at, nl - at));
    if (nl < s.size()) out += '\n';
    at = nl + 1;
  }
  return out;
}

}  // namespace lockstep
