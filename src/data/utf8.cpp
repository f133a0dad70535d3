#include "data/utf8.h"

#include <cerrno>
#include <cstring>

#include "util/check.h"

namespace mxdp {

namespace {

// Length of the longest prefix of s[i..] that is a valid UTF-8 sequence or a
// prefix of one (a "maximal subpart"), and whether it is complete.
// Table 3-7 of the Unicode standard: the second byte's range depends on the lead.
struct Seq {
  size_t len;
  bool complete;
};
Seq scan(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  if (c < 0x80) return {1, true};
  int need;
  unsigned char lo = 0x80, hi = 0xBF;  // range of the second byte
  if (c >= 0xC2 && c <= 0xDF) {
    need = 1;
  } else if (c >= 0xE0 && c <= 0xEF) {
    need = 2;
    if (c == 0xE0) lo = 0xA0;   // no overlong 3-byte forms
    if (c == 0xED) hi = 0x9F;   // no surrogates
  } else if (c >= 0xF0 && c <= 0xF4) {
    need = 3;
    if (c == 0xF0) lo = 0x90;   // no overlong 4-byte forms
    if (c == 0xF4) hi = 0x8F;   // nothing above U+10FFFF
  } else {
    return {1, false};  // 80..C1, F5..FF never start a sequence
  }
  size_t k = 1;
  for (; k <= size_t(need); ++k) {
    if (i + k >= s.size()) return {k, false};
    const unsigned char x = b(i + k);
    const unsigned char l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
    if (x < l || x > h) return {k, false};
  }
  return {k, true};
}

}  // namespace

void utf8_append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += char(0xE0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xF0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3F));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  }
}

bool utf8_valid(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const Seq q = scan(s, i);
    if (!q.complete) return false;
    i += q.len;
  }
  return true;
}

std::string utf8_replace_invalid(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const Seq q = scan(s, i);
    if (q.complete)
      out.append(s.substr(i, q.len));
    else
      out.append("\xEF\xBF\xBD");
    i += q.len;
  }
  return out;
}

void write_text(std::FILE* f, std::string_view s, bool raw, const char* what) {
  const std::string fixed = raw ? std::string() : utf8_replace_invalid(s);
  const std::string_view bytes = raw ? s : std::string_view(fixed);
  if (!bytes.empty() && std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size())
    MXDP_FAIL("writing ", bytes.size(), " bytes of text to ", what, " failed: ", std::strerror(errno));
  if (std::fflush(f) != 0) MXDP_FAIL("flushing ", what, " failed: ", std::strerror(errno));
}

}  // namespace mxdp
