#include "data/unicode_nfc.h"

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <unordered_map>
#include <vector>

#include "data/unicode_class.h"
#include "data/utf8.h"

namespace mxdp::unicode {

namespace {

struct CombiningRange {
  char32_t lo, hi;
  uint8_t cls;
};
struct Decomposition {
  char32_t cp, first, second;
  bool composes;
};
#include "data/unicode_nfc_tables.inc"

// Hangul syllables decompose and compose by arithmetic (Unicode 3.12).
constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr char32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

int combining_class(char32_t c) {
  if (c < 0x300) return 0;
  const auto it = std::upper_bound(std::begin(kCombiningClass), std::end(kCombiningClass), c,
                                   [](char32_t x, const CombiningRange& r) { return x < r.lo; });
  return (it != std::begin(kCombiningClass) && c <= std::prev(it)->hi) ? std::prev(it)->cls : 0;
}

const Decomposition* find_decomposition(char32_t c) {
  const auto it = std::lower_bound(std::begin(kDecomposition), std::end(kDecomposition), c,
                                   [](const Decomposition& d, char32_t x) { return d.cp < x; });
  return (it != std::end(kDecomposition) && it->cp == c) ? &*it : nullptr;
}

void decompose(char32_t c, std::vector<char32_t>& out) {
  if (c >= kSBase && c < kSBase + kSCount) {
    const char32_t s = c - kSBase;
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount) out.push_back(kTBase + s % kTCount);
    return;
  }
  const Decomposition* d = c < 0xC0 ? nullptr : find_decomposition(c);
  if (!d) {
    out.push_back(c);
    return;
  }
  decompose(d->first, out);
  if (d->second) decompose(d->second, out);
}

uint64_t pair_key(char32_t a, char32_t b) { return (uint64_t(a) << 21) | b; }

// The primary composite of (a, b), or 0.
char32_t compose(char32_t a, char32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount)
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase && b < kTBase + kTCount)
    return a + (b - kTBase);
  static const std::unordered_map<uint64_t, char32_t> table = [] {
    std::unordered_map<uint64_t, char32_t> t;
    for (const Decomposition& d : kDecomposition)
      if (d.composes) t.emplace(pair_key(d.first, d.second), d.cp);
    return t;
  }();
  const auto it = table.find(pair_key(a, b));
  return it == table.end() ? 0 : it->second;
}

}  // namespace

std::string nfc(std::string_view text) {
  // A code point from U+0300 up has a lead byte from 0xCC up; below it, every
  // character has class 0 and is its own NFC.
  if (std::none_of(text.begin(), text.end(), [](char b) { return uint8_t(b) >= 0xCC; })) return std::string(text);
  std::vector<char32_t> d;
  d.reserve(text.size());
  for (size_t i = 0; i < text.size();) decompose(next_code_point(text.data(), text.size(), i), d);
  // Canonical ordering: each run of non-starters, stably sorted by class.
  for (size_t i = 0; i < d.size();) {
    if (combining_class(d[i]) == 0) {
      ++i;
      continue;
    }
    size_t e = i;
    while (e < d.size() && combining_class(d[e]) != 0) ++e;
    std::stable_sort(d.begin() + i, d.begin() + e,
                     [](char32_t a, char32_t b) { return combining_class(a) < combining_class(b); });
    i = e;
  }
  // Canonical composition: a character joins the last starter unless a
  // character between them has class 0 or a class >= its own (blocked).
  std::vector<char32_t> r;
  r.reserve(d.size());
  size_t starter = SIZE_MAX;
  for (char32_t c : d) {
    const int cc = combining_class(c);
    if (starter != SIZE_MAX) {
      const bool adjacent = r.size() - 1 == starter;
      const int last = combining_class(r.back());
      if (adjacent || (last != 0 && last < cc)) {
        if (const char32_t k = compose(r[starter], c)) {
          r[starter] = k;
          continue;
        }
      }
    }
    if (cc == 0) starter = r.size();
    r.push_back(c);
  }
  std::string out;
  out.reserve(text.size());
  for (char32_t c : r) utf8_append(out, c);
  return out;
}

}  // namespace mxdp::unicode
