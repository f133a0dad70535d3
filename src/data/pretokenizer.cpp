#include "data/pretokenizer.h"

#include <nlohmann/json.hpp>

#include "data/unicode_class.h"
#include "util/check.h"

namespace mxdp {

using nlohmann::json;

namespace {

// The pattern strings exactly as tokenizer.json spells them (JSON-unescaped).
constexpr const char* kGpt2Regex = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr const char* kLlama3Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kQwen2Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

const char* pattern_name(SplitPattern p) {
  return p == SplitPattern::kGpt2 ? "GPT-2" : p == SplitPattern::kLlama3 ? "Llama 3" : "Qwen2";
}

// Text as code points, with the byte offset of each and of the end.
struct CodePoints {
  std::vector<char32_t> cp;
  std::vector<size_t> at;
  explicit CodePoints(std::string_view text) {
    cp.reserve(text.size());
    at.reserve(text.size() + 1);
    for (size_t i = 0; i < text.size();) {
      at.push_back(i);
      cp.push_back(unicode::next_code_point(text.data(), text.size(), i));
    }
    at.push_back(text.size());
  }
  size_t size() const { return cp.size(); }
  bool L(size_t k) const { return k < cp.size() && unicode::is_letter(cp[k]); }
  bool N(size_t k) const { return k < cp.size() && unicode::is_number(cp[k]); }
  bool S(size_t k) const { return k < cp.size() && unicode::is_white_space(cp[k]); }
  bool newline(size_t k) const { return k < cp.size() && (cp[k] == '\r' || cp[k] == '\n'); }
  // [^\s\p{L}\p{N}]
  bool other(size_t k) const { return k < cp.size() && !S(k) && !L(k) && !N(k); }
  // The end of \s+(?!\S) | \s+ from k (cp[k] white space): the run, less its
  // last character when a non-space follows and the run is longer than one.
  size_t space_run(size_t k) const {
    size_t e = k;
    while (S(e)) ++e;
    return (e == cp.size() || e - 1 == k) ? e : e - 1;
  }
};

// 's|'t|'re|'ve|'m|'ll|'d at i: the end, or i. `fold`: case-insensitively, as
// Oniguruma's (?i:...) folds (ASCII, and U+017F LONG S, which folds to s).
size_t contraction(const CodePoints& t, size_t i, bool fold) {
  const size_t n = t.size();
  if (t.cp[i] != '\'' || i + 1 >= n) return i;
  auto low = [&](size_t k) -> char32_t {
    if (k >= n) return 0;
    const char32_t c = t.cp[k];
    if (!fold) return c;
    if (c == 0x17F) return 's';
    return (c >= 'A' && c <= 'Z') ? c + 32 : c;
  };
  const char32_t c1 = low(i + 1), c2 = low(i + 2);
  if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return i + 2;
  if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) return i + 3;
  return i;
}

// GPT-2's pattern: the end of the match at i.
size_t match_gpt2(const CodePoints& t, size_t i) {
  if (size_t e = contraction(t, i, false); e != i) return e;
  const size_t s = t.cp[i] == ' ' ? i + 1 : i;  // the optional leading space of the next three
  size_t e = s;
  if (t.L(s)) {  //  ?\p{L}+
    while (t.L(e)) ++e;
  } else if (t.N(s)) {  //  ?\p{N}+
    while (t.N(e)) ++e;
  } else if (t.other(s)) {  //  ?[^\s\p{L}\p{N}]+
    while (t.other(e)) ++e;
  } else {  // \s+(?!\S) | \s+   (cp[i] is white space here)
    e = t.space_run(i);
  }
  return e;
}

// Llama 3's pattern (max_digits 3) and Qwen2's (max_digits 1): the end of the match at i.
size_t match_cl100k(const CodePoints& t, size_t i, size_t max_digits) {
  if (size_t e = contraction(t, i, true); e != i) return e;
  size_t e = i;
  // [^\r\n\p{L}\p{N}]?\p{L}+
  if (t.L(i) || (!t.newline(i) && !t.N(i) && t.L(i + 1))) {
    e = i + 1;
    while (t.L(e)) ++e;
    return e;
  }
  // \p{N}{1,3} or \p{N}
  if (t.N(i)) {
    while (e < i + max_digits && t.N(e)) ++e;
    return e;
  }
  //  ?[^\s\p{L}\p{N}]+[\r\n]*
  const size_t s = t.cp[i] == ' ' ? i + 1 : i;
  if (t.other(s)) {
    e = s;
    while (t.other(e)) ++e;
    while (t.newline(e)) ++e;
    return e;
  }
  // \s*[\r\n]+ : the white space run up to and with its last \r or \n
  size_t k = i, last_newline = i;
  bool any = false;
  for (; t.S(k); ++k)
    if (t.newline(k)) last_newline = k, any = true;
  if (any) return last_newline + 1;
  // \s+(?!\S) | \s+
  return t.space_run(i);
}

bool json_true(const json& j, const char* key, bool dflt) {
  if (!j.contains(key) || j[key].is_null()) return dflt;
  return j[key].is_boolean() ? j[key].get<bool>() : dflt;
}

}  // namespace

std::vector<std::pair<size_t, size_t>> split_pattern(SplitPattern pattern, std::string_view text) {
  const CodePoints t(text);
  std::vector<std::pair<size_t, size_t>> out;
  for (size_t i = 0; i < t.size();) {
    const size_t e = pattern == SplitPattern::kGpt2     ? match_gpt2(t, i)
                     : pattern == SplitPattern::kLlama3 ? match_cl100k(t, i, 3)
                                                        : match_cl100k(t, i, 1);
    MXDP_CHECK(e > i, "internal: the ", pattern_name(pattern), " pattern matched nothing at byte ", t.at[i]);
    out.emplace_back(t.at[i], t.at[e]);
    i = e;
  }
  return out;
}

PreTokenizer::PreTokenizer(const json& j, const std::string& what) {
  MXDP_CHECK(j.is_object(), "tokenizer '", what, "': pre_tokenizer ", j.dump(),
             " is not supported (mxdp reads byte-level BPE tokenizers: ByteLevel, or a Sequence ending in ByteLevel)");
  if (j.value("type", std::string()) == "Sequence") {
    MXDP_CHECK(j.contains("pretokenizers") && j["pretokenizers"].is_array() && !j["pretokenizers"].empty(),
               "tokenizer '", what, "': pre_tokenizer Sequence has no \"pretokenizers\" list");
    for (const json& s : j["pretokenizers"]) add_step(s, what);
  } else {
    add_step(j, what);
  }
  size_t byte_level = 0;
  for (const Step& s : steps_) byte_level += s.kind == Step::kByteLevel;
  MXDP_CHECK(byte_level == 1 && steps_.back().kind == Step::kByteLevel, "tokenizer '", what, "': pre_tokenizer ",
             j.dump(), " is not supported (mxdp reads byte-level BPE tokenizers: one ByteLevel step, the last)");
}

void PreTokenizer::add_step(const json& j, const std::string& what) {
  const std::string type = j.is_object() ? j.value("type", std::string()) : std::string();
  Step s{Step::kByteLevel};
  if (type == "ByteLevel") {
    s.add_prefix_space = json_true(j, "add_prefix_space", false);
    s.use_regex = json_true(j, "use_regex", true);
  } else if (type == "Digits") {
    s.kind = Step::kDigits;
    s.individual_digits = json_true(j, "individual_digits", false);
  } else if (type == "Split") {
    s.kind = Step::kSplit;
    const json p = j.value("pattern", json());
    MXDP_CHECK(p.is_object() && p.contains("Regex") && p["Regex"].is_string(), "tokenizer '", what,
               "': Split pre-tokenizer pattern ", p.dump(), " is not supported (only the known regexes)");
    const std::string re = p["Regex"].get<std::string>();
    if (re == kLlama3Regex)
      s.pattern = SplitPattern::kLlama3;
    else if (re == kQwen2Regex)
      s.pattern = SplitPattern::kQwen2;
    else if (re == kGpt2Regex)
      s.pattern = SplitPattern::kGpt2;
    else
      MXDP_FAIL("tokenizer '", what, "': Split pre-tokenizer regex ", json(re).dump(),
                " is not one mxdp knows (it matches GPT-2's, Llama 3's and Qwen2's patterns exactly, without a regex "
                "library)");
    const std::string behavior = j.value("behavior", std::string());
    MXDP_CHECK(behavior == "Isolated" && !json_true(j, "invert", false), "tokenizer '", what,
               "': Split pre-tokenizer with behavior '", behavior, "'", json_true(j, "invert", false) ? " inverted" : "",
               " is not supported (only Isolated, not inverted)");
  } else {
    MXDP_FAIL("tokenizer '", what, "': pre-tokenizer ", j.dump(),
              " is not supported (only ByteLevel, Split with a known regex, Digits, and a Sequence of them)");
  }
  steps_.push_back(s);
}

void PreTokenizer::apply(const Step& s, std::string_view piece, std::vector<std::string>& out) {
  switch (s.kind) {
    case Step::kSplit:
      for (auto [b, e] : split_pattern(s.pattern, piece)) out.emplace_back(piece.substr(b, e - b));
      return;
    case Step::kDigits: {
      const CodePoints t(piece);
      for (size_t i = 0; i < t.size();) {
        size_t e = i + 1;
        if (t.N(i)) {
          if (!s.individual_digits)
            while (t.N(e)) ++e;
        } else {
          while (e < t.size() && !t.N(e)) ++e;
        }
        out.emplace_back(piece.substr(t.at[i], t.at[e] - t.at[i]));
        i = e;
      }
      return;
    }
    case Step::kByteLevel: {
      std::string spaced;
      if (s.add_prefix_space && (piece.empty() || piece[0] != ' ')) {
        spaced = " ";
        spaced += piece;
        piece = spaced;
      }
      if (!s.use_regex) {
        out.emplace_back(piece);
        return;
      }
      for (auto [b, e] : split_pattern(SplitPattern::kGpt2, piece)) out.emplace_back(piece.substr(b, e - b));
      return;
    }
  }
}

void PreTokenizer::split(std::string_view text, std::vector<std::string>& out) const {
  if (text.empty()) return;
  std::vector<std::string> cur{std::string(text)}, next;
  for (const Step& s : steps_) {
    next.clear();
    for (const std::string& p : cur) apply(s, p, next);
    cur.swap(next);
  }
  for (std::string& p : cur) out.push_back(std::move(p));
}

bool PreTokenizer::adds_prefix_space() const {
  for (const Step& s : steps_)
    if (s.kind == Step::kByteLevel && s.add_prefix_space) return true;
  return false;
}

std::string PreTokenizer::describe() const {
  std::string d;
  for (const Step& s : steps_) {
    if (!d.empty()) d += " + ";
    if (s.kind == Step::kSplit) d += std::string(pattern_name(s.pattern)) + " split";
    if (s.kind == Step::kDigits) d += s.individual_digits ? "digits (single)" : "digits";
    if (s.kind == Step::kByteLevel) d += s.use_regex ? "ByteLevel (GPT-2 split)" : "ByteLevel";
  }
  return d;
}

}  // namespace mxdp
