// utf8.h: U+FFFD replacement of invalid UTF-8, against Python's own decoder
// (bytes.decode("utf-8", errors="replace"), tests/py/utf8_replace.py).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>

#include "python_util.h"
#include "data/utf8.h"

using namespace mxdp;
using namespace mxdp::testing;

namespace {

std::string frame(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) {
    const uint32_t n = uint32_t(s.size());
    out.append(reinterpret_cast<const char*>(&n), 4);
    out += s;
  }
  return out;
}
std::vector<std::string> unframe(const std::string& b) {
  std::vector<std::string> v;
  for (size_t i = 0; i + 4 <= b.size();) {
    uint32_t n;
    std::memcpy(&n, b.data() + i, 4);
    v.push_back(b.substr(i + 4, n));
    i += 4 + n;
  }
  return v;
}

}  // namespace

TEST(Utf8, KnownCases) {
  const std::string R = "\xEF\xBF\xBD";
  EXPECT_EQ(utf8_replace_invalid("plain ascii\n\t"), "plain ascii\n\t");
  EXPECT_EQ(utf8_replace_invalid(std::string("a\0b", 3)), std::string("a\0b", 3)) << "NUL is valid";
  EXPECT_EQ(utf8_replace_invalid("\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80"), "\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80");
  EXPECT_EQ(utf8_replace_invalid("\x80"), R);
  EXPECT_EQ(utf8_replace_invalid("\xC0\xAF"), R + R) << "overlong: C0 never starts a sequence";
  EXPECT_EQ(utf8_replace_invalid("\xE0\x80\x80"), R + R + R) << "E0 80: the lead alone is the maximal subpart";
  EXPECT_EQ(utf8_replace_invalid("\xED\xA0\x80"), R + R + R) << "surrogate";
  EXPECT_EQ(utf8_replace_invalid("\xE2\x82" "A"), R + "A") << "truncated 3-byte sequence: one U+FFFD";
  EXPECT_EQ(utf8_replace_invalid("\xF4\x90\x80\x80"), R + R + R + R) << "above U+10FFFF";
  EXPECT_EQ(utf8_replace_invalid("x\xF0\x9F\x98"), "x" + R) << "cut at the end";
  EXPECT_TRUE(utf8_valid("\xF4\x8F\xBF\xBF"));
  EXPECT_FALSE(utf8_valid("\xFF"));
}

TEST(Utf8, MatchesPythonsDecoder) {
  TempDir d;
  MXDP_REQUIRE_PYTHON(d, "codecs");
  std::mt19937 g(7);
  std::vector<std::string> cases;
  const std::string pieces[] = {"a", "\xC3\xA9", "\xE2\x82\xAC", "\xF0\x9F\x98\x80", "\xED\x9F\xBF", "\xEE\x80\x80",
                                "\xF4\x8F\xBF\xBF", "\n"};
  for (int i = 0; i < 3000; ++i) {
    std::string s;
    const int n = int(g() % 24);
    for (int k = 0; k < n; ++k) {
      const unsigned r = g() % 4;
      if (r == 0) s += char(g() & 0xFF);                       // any byte
      else if (r == 1) s += char(0x80 | (g() & 0x7F));           // high bytes: leads and continuations
      else s += pieces[g() % (sizeof pieces / sizeof pieces[0])];  // valid characters
    }
    if (i % 3 == 0 && !s.empty()) s.resize(g() % s.size());  // cut anywhere
    cases.push_back(s);
  }
  for (int b = 0; b < 256; ++b)
    for (int c : {0x00, 0x7F, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC0, 0xFF}) cases.push_back(std::string{char(b), char(c), 'z'});
  write_file(d / "in.bin", frame(cases));
  auto q = [](const std::string& p) { return std::string(1, '\'').append(p).append(1, '\''); };
  const RunResult r = run_python(q(source_path("tests/py/utf8_replace.py")).append(" ").append(q(d / "in.bin"))
                                     .append(" ").append(q(d / "out.bin")),
                                 d / "py.log");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::vector<std::string> want = unframe(read_file(d / "out.bin"));
  ASSERT_EQ(want.size(), cases.size());
  int bad = 0, invalid = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    invalid += !utf8_valid(cases[i]);
    if (utf8_replace_invalid(cases[i]) != want[i] && ++bad <= 5) ADD_FAILURE() << "case " << i << " differs from Python";
    EXPECT_EQ(utf8_valid(cases[i]), want[i] == cases[i]) << "case " << i;
  }
  EXPECT_EQ(bad, 0);
  EXPECT_GT(invalid, 1000) << "the cases must exercise invalid input";
}

// utf8_append: one code point's UTF-8 bytes. The worked examples of RFC 3629
// (section 7) and the boundaries of each length written out by hand, then
// every scalar value: valid UTF-8 of the length RFC 3629's table gives.
TEST(Utf8, AppendEncodesEveryScalarValue) {
  const std::pair<char32_t, std::string> known[] = {
      {0x41, "A"},          {0x7F, "\x7F"},          {0x80, "\xC2\x80"},
      {0xE9, "\xC3\xA9"},   {0x7FF, "\xDF\xBF"},     {0x800, "\xE0\xA0\x80"},
      {0x20AC, "\xE2\x82\xAC"}, {0xD55C, "\xED\x95\x9C"}, {0xFFFD, "\xEF\xBF\xBD"},
      {0xFFFF, "\xEF\xBF\xBF"}, {0x10000, "\xF0\x90\x80\x80"}, {0x233B4, "\xF0\xA3\x8E\xB4"},
      {0x10FFFF, "\xF4\x8F\xBF\xBF"}};
  for (const auto& [cp, want] : known) {
    std::string got = "x";
    utf8_append(got, cp);
    EXPECT_EQ(got, "x" + want) << std::hex << uint32_t(cp);
  }
  for (char32_t cp = 0; cp <= 0x10FFFF; ++cp) {
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;  // surrogates are no scalar values
    std::string s;
    utf8_append(s, cp);
    const size_t len = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
    ASSERT_EQ(s.size(), len) << std::hex << uint32_t(cp);
    ASSERT_TRUE(utf8_valid(s)) << std::hex << uint32_t(cp);
  }
}
