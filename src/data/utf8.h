// UTF-8 for terminals: a byte-level model can emit any bytes, and a terminal
// shown invalid UTF-8 prints garbage or worse. Printed text goes through
// utf8_replace_invalid(); `--raw` writes the bytes as they are.
#pragma once

#include <cstdio>
#include <string>
#include <string_view>

namespace mxdp {

// Appends the UTF-8 bytes of the code point `cp` (<= U+10FFFF; a surrogate
// is encoded as its three bytes, which utf8_valid refuses).
void utf8_append(std::string& out, char32_t cp);

// Valid UTF-8 (RFC 3629: no overlong forms, no surrogates, nothing above U+10FFFF).
bool utf8_valid(std::string_view s);

// `s` with every invalid sequence replaced by U+FFFD (EF BF BD), one per
// maximal subpart of an ill-formed sequence (Unicode 15, section 3.9, "U+FFFD
// Substitution of Maximal Subparts": what Python's
// bytes.decode("utf-8", errors="replace") and the WHATWG decoder do). Valid
// input comes back unchanged; NUL and control characters are valid and kept.
std::string utf8_replace_invalid(std::string_view s);

// Writes `s` to `f` (replaced as above unless `raw`) and flushes; throws
// mxdp::Error naming `what` if a write or the flush fails.
void write_text(std::FILE* f, std::string_view s, bool raw, const char* what = "stdout");

}  // namespace mxdp
