#include "data/unicode_class.h"

#include <algorithm>
#include <cstdint>
#include <iterator>

#include "util/check.h"

namespace mxdp::unicode {

namespace {
struct CodeRange {
  char32_t lo, hi;
};
#include "data/unicode_class_tables.inc"

template <size_t N>
bool in(const CodeRange (&table)[N], char32_t cp) {
  const auto it = std::upper_bound(std::begin(table), std::end(table), cp,
                                   [](char32_t c, const CodeRange& r) { return c < r.lo; });
  return it != std::begin(table) && cp <= std::prev(it)->hi;
}
}  // namespace

bool is_letter(char32_t cp) { return cp >= 0x80 ? in(kLetterRanges, cp) : ((cp | 0x20) >= 'a' && (cp | 0x20) <= 'z'); }
bool is_number(char32_t cp) { return cp >= 0x80 ? in(kNumberRanges, cp) : (cp >= '0' && cp <= '9'); }

bool is_white_space(char32_t cp) {
  // The White_Space property (PropList.txt), stable since Unicode 6.
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
         cp == 0x3000;
}

char32_t next_code_point(const char* s, size_t n, size_t& i) {
  const auto b = [&](size_t k) { return uint32_t(static_cast<unsigned char>(s[k])); };
  const uint32_t c = b(i);
  int len = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
  MXDP_CHECK(i + len <= n, "truncated UTF-8 sequence at byte ", i);
  uint32_t cp = len == 1 ? c : len == 2 ? c & 0x1F : len == 3 ? c & 0x0F : c & 0x07;
  for (int k = 1; k < len; ++k) cp = (cp << 6) | (b(i + k) & 0x3F);
  i += len;
  return char32_t(cp);
}

}  // namespace mxdp::unicode
