// The Llama 3, Qwen2 and SmolLM2 tokenizers (bpe.h, pretokenizer.h,
// unicode_nfc.h) against the `tokenizers` package (Hugging Face). The fixtures
// in tests/data/tokenizers/ are small BPE models that
// scripts/make_tokenizer_fixtures.py trains with the package, each with its
// family's exact normalizer, pre-tokenizer and special tokens; cases.json holds
// ~250 varied strings (many scripts, marks, numbers, digit runs, white space
// and newline runs, contractions in mixed case, emoji, the special tokens) and
// the package's ids for them. Checked: those golden ids; the package itself,
// live, on the same strings and on the whole shipped corpus; the pattern
// matchers by hand; NFC against Python's unicodedata; refusals;
// `mxdp prepare --tokenizer` with each fixture; llama-tiny trained on Llama 3
// tokens and `mxdp sample --tokenizer`.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <unordered_map>
#include <nlohmann/json.hpp>

#include "data/bpe.h"
#include "data/data.h"
#include "data/pretokenizer.h"
#include "data/unicode_nfc.h"
#include "python_util.h"
#include "util/check.h"

using namespace mxdp;
using namespace mxdp::testing;
using nlohmann::json;

namespace {

const char* const kFamilies[] = {"llama3", "qwen2", "smollm2"};

std::string fixture(const std::string& family) { return source_path("tests/data/tokenizers/" + family + "/tokenizer.json"); }

const json& golden() {
  static const json g = json::parse(read_file(source_path("tests/data/tokenizers/cases.json")));
  return g;
}

std::vector<int32_t> read_ids(const std::string& path) {
  const std::string b = read_file(path);
  std::vector<int32_t> v(b.size() / 4);
  std::memcpy(v.data(), b.data(), v.size() * 4);
  return v;
}

// Compares mxdp's ids and decoded text for every case with `want` ({"ids": [...], "decoded": [...]}).
void expect_cases(const BpeTokenizer& tok, const json& texts, const json& ids, const json& decoded,
                  const std::string& family) {
  ASSERT_EQ(texts.size(), ids.size());
  int bad = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    const std::string s = texts[i].get<std::string>();
    const std::vector<int32_t> got = tok.encode(s);
    if (got != ids[i].get<std::vector<int32_t>>() && ++bad <= 3)
      ADD_FAILURE() << family << ": ids differ for case " << i << " " << texts[i].dump() << "\n  mxdp " << json(got).dump()
                    << "\n  want " << ids[i].dump();
    EXPECT_EQ(tok.decode(got), decoded[i].get<std::string>()) << family << ": decode, case " << i;
  }
  EXPECT_EQ(bad, 0) << family << ": cases whose ids differ";
}

std::vector<std::string> split(SplitPattern p, const std::string& s) {
  std::vector<std::string> out;
  for (auto [b, e] : split_pattern(p, s)) out.push_back(s.substr(b, e - b));
  return out;
}

}  // namespace

TEST(Tokenizers, GoldenIdsOfEachFamily) {
  const json& g = golden();
  ASSERT_GT(g["texts"].size(), 200u);
  const char* const want_pre[] = {"merges, Llama 3 split + ByteLevel)", "merges, NFC, Qwen2 split + ByteLevel)",
                                  "merges, digits (single) + ByteLevel (GPT-2 split))"};
  for (int f = 0; f < 3; ++f) {
    const BpeTokenizer tok(fixture(kFamilies[f]));
    EXPECT_TRUE(contains(tok.describe(), want_pre[f])) << tok.describe();
    expect_cases(tok, g["texts"], g["ids"][kFamilies[f]], g["decoded"][kFamilies[f]], kFamilies[f]);
  }
  // The special tokens are cut out before pre-tokenization, with their own ids.
  const BpeTokenizer llama(fixture("llama3")), qwen(fixture("qwen2")), smol(fixture("smollm2"));
  EXPECT_EQ(llama.encode("<|begin_of_text|>"), (std::vector<int32_t>{1000}));
  EXPECT_EQ(qwen.encode("<|im_start|><|im_end|>"), (std::vector<int32_t>{1001, 1002}));
  EXPECT_EQ(smol.encode("<|endoftext|>"), (std::vector<int32_t>{0}));
}

TEST(Tokenizers, SameIdsAsTheTokenizersPackageLive) {
  TempDir d;
  MXDP_REQUIRE_PYTHON(d, "tokenizers");
  // The shipped corpus, then every case and newlines between visible characters, spaces and
  // letters (where a long text may be cut in chunks, bpe.cpp): 2.5 MB as one text.
  const json& g = golden();
  std::string corpus = read_file(source_path("data/kjv.txt"));
  for (int r = 0; r < 3; ++r)
    for (const json& t : g["texts"]) corpus += t.get<std::string>() + (r == 0 ? "\nAnd" : r == 1 ? "  \nA" : "!\n\nb");
  const std::string corpus_path = d / "corpus.txt";
  write_file(corpus_path, corpus);
  for (const char* family : kFamilies) {
    const std::string out = d / (std::string(family) + ".json"), bin = d / (std::string(family) + ".bin");
    const RunResult r = run_python(quote(source_path("tests/py/tokenizers_encode.py")) + " " + quote(fixture(family)) +
                                       " " + quote(source_path("tests/data/tokenizers/cases.json")) + " " + quote(out) +
                                       " " + quote(corpus_path) + " " + quote(bin),
                                   d / "py.log");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const BpeTokenizer tok(fixture(family));
    const json live = json::parse(read_file(out));
    expect_cases(tok, g["texts"], live["ids"], live["decoded"], family);
    const std::vector<int32_t> want = read_ids(bin), got = tok.encode(corpus);
    ASSERT_EQ(got.size(), want.size()) << family;
    size_t first = got.size();
    for (size_t i = 0; i < got.size() && first == got.size(); ++i)
      if (got[i] != want[i]) first = i;
    EXPECT_EQ(first, got.size()) << family << ": corpus ids differ from position " << first;
    EXPECT_LT(want.size(), corpus.size() / 2) << "the merges must compress the corpus";
    EXPECT_GT(corpus.size(), size_t(2) << 20);
    EXPECT_EQ(tok.decode(got), read_file(bin + ".txt")) << family;
  }
}

TEST(Tokenizers, PatternSplitsByHand) {
  using V = std::vector<std::string>;
  const SplitPattern L = SplitPattern::kLlama3, Q = SplitPattern::kQwen2;
  // Contractions case-insensitively (U+017F LONG S folds to s); a letter run
  // takes one leading non-letter, non-digit, non-newline character.
  EXPECT_EQ(split(L, "I'M you'Re DON'T it\xC5\xBF"), (V{"I", "'M", " you", "'Re", " DON", "'T", " it\xC5\xBF"}));
  EXPECT_EQ(split(L, "x'\xC5\xBF" "a"), (V{"x", "'\xC5\xBF", "a"}));
  EXPECT_EQ(split(L, "x'Sa y'LLb"), (V{"x", "'S", "a", " y", "'LL", "b"}));
  EXPECT_EQ(split(L, "(hello) \tworld"), (V{"(hello", ")", " ", "\tworld"}));
  // Numbers in runs of at most three (Llama 3) or one (Qwen2), with no leading space.
  EXPECT_EQ(split(L, "1234567 89"), (V{"123", "456", "7", " ", "89"}));
  EXPECT_EQ(split(Q, "1234 x"), (V{"1", "2", "3", "4", " x"}));
  EXPECT_EQ(split(L, "\xE2\x85\xA0\xE2\x85\xA1\xC2\xBD\xC2\xB2"), (V{"\xE2\x85\xA0\xE2\x85\xA1\xC2\xBD", "\xC2\xB2"}))
      << "Nl and No are numbers too";
  // Punctuation with one optional leading space and the newlines after it.
  EXPECT_EQ(split(L, "a !!\n\nb"), (V{"a", " !!\n\n", "b"}));
  EXPECT_EQ(split(L, "a  ?x"), (V{"a", " ", " ?", "x"}));
  // White space: up to and with the last newline; else all but the last space before a word.
  EXPECT_EQ(split(L, "a \n \n  b"), (V{"a", " \n \n", " ", " b"}));
  EXPECT_EQ(split(L, "a\r\n"), (V{"a", "\r\n"}));
  EXPECT_EQ(split(L, "a   b   "), (V{"a", "  ", " b", "   "}));
  EXPECT_EQ(split(L, "x\n1"), (V{"x", "\n", "1"}));
  // A combining mark is not a letter: it starts the next letter run.
  EXPECT_EQ(split(L, "e\xCC\x81t\xC3\xA9"), (V{"e", "\xCC\x81t\xC3\xA9"}));
  // GPT-2's pattern differs: its numbers take a space, contractions are case-sensitive.
  EXPECT_EQ(split(SplitPattern::kGpt2, "I'M 1234"), (V{"I", "'", "M", " 1234"}));
}

TEST(Tokenizers, DigitsAndSequencesByHand) {
  using V = std::vector<std::string>;
  auto pieces = [](const json& config, const std::string& text) {
    std::vector<std::string> out;
    PreTokenizer(config, "t.json").split(text, out);
    return out;
  };
  auto seq = [](bool individual, bool prefix, bool regex) {
    return json{{"type", "Sequence"},
                {"pretokenizers", json::array({{{"type", "Digits"}, {"individual_digits", individual}},
                                               {{"type", "ByteLevel"}, {"add_prefix_space", prefix}, {"use_regex", regex}}})}};
  };
  const std::string text = "ab 123c\xD9\xA3\xD9\xA4 x";  // U+0663 U+0664: Arabic-Indic digits
  EXPECT_EQ(pieces(seq(true, false, false), text), (V{"ab ", "1", "2", "3", "c", "\xD9\xA3", "\xD9\xA4", " x"}));
  EXPECT_EQ(pieces(seq(false, false, false), text), (V{"ab ", "123", "c", "\xD9\xA3\xD9\xA4", " x"}));
  // ByteLevel's prefix space goes on every piece it is given, then GPT-2's regex splits each.
  EXPECT_EQ(pieces(seq(true, true, true), "ab 12 x"), (V{" ab", " ", " 1", " 2", " x"}));
}

TEST(Tokenizers, NfcAgainstPythonUnicodedata) {
  // By hand first: composition, a singleton, Hangul, reordering by class.
  EXPECT_EQ(unicode::nfc("e\xCC\x81"), "\xC3\xA9");                       // e + U+0301 -> U+00E9
  EXPECT_EQ(unicode::nfc("\xE2\x84\xAB"), "\xC3\x85");                    // U+212B ANGSTROM -> U+00C5
  EXPECT_EQ(unicode::nfc("\xE1\x84\x80\xE1\x85\xA1\xE1\x86\xA8"), "\xEA\xB0\x81");  // jamo -> U+AC01
  EXPECT_EQ(unicode::nfc("a\xCC\x87\xCC\xA3"), "\xE1\xBA\xA1\xCC\x87");   // a U+0307 U+0323 -> U+1EA1 U+0307
  EXPECT_EQ(unicode::nfc("plain ASCII"), "plain ASCII");

  TempDir d;
  MXDP_REQUIRE_PYTHON(d, "unicodedata");
  const RunResult r = run_python(quote(source_path("tests/py/nfc_reference.py")) + " " + quote(d / "nfc.json"), d / "py.log");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const json ref = json::parse(read_file(d / "nfc.json"));
  std::unordered_map<uint64_t, std::string> changed;
  for (const json& c : ref["changed"]) changed[c[0].get<uint64_t>() << 32 | c[1].get<uint64_t>()] = c[2].get<std::string>();
  ASSERT_GT(changed.size(), 1000u);
  auto utf8 = [](char32_t c) {
    std::string s;
    if (c < 0x80) {
      s += char(c);
    } else if (c < 0x800) {
      s += char(0xC0 | (c >> 6)), s += char(0x80 | (c & 0x3F));
    } else if (c < 0x10000) {
      s += char(0xE0 | (c >> 12)), s += char(0x80 | ((c >> 6) & 0x3F)), s += char(0x80 | (c & 0x3F));
    } else {
      s += char(0xF0 | (c >> 18)), s += char(0x80 | ((c >> 12) & 0x3F)), s += char(0x80 | ((c >> 6) & 0x3F));
      s += char(0x80 | (c & 0x3F));
    }
    return s;
  };
  int bad = 0;
  size_t checked = 0;
  for (char32_t cp = 0; cp < 0xE1000; ++cp) {
    if ((cp >= 0xD800 && cp <= 0xDFFF) || (cp >= 0x30000 && cp < 0xE0000)) continue;
    const std::string c = utf8(cp);
    const std::string probes[] = {c, c + "\xCC\x81", "a" + c, c + "\xE1\x85\xA1\xE1\x86\xA8"};
    for (uint64_t k = 0; k < 4; ++k, ++checked) {
      const auto it = changed.find(k << 32 | cp);
      const std::string& want = it == changed.end() ? probes[k] : it->second;
      if (unicode::nfc(probes[k]) != want && ++bad <= 5)
        ADD_FAILURE() << "NFC differs from Python's (Unicode " << ref["unicode"].get<std::string>() << ") for probe " << k
                      << " of U+" << std::hex << uint32_t(cp);
    }
  }
  EXPECT_EQ(bad, 0);
  EXPECT_GT(checked, 790000u);
}

TEST(Tokenizers, UnknownConfigurationsAreRefused) {
  const json good = json::parse(read_file(fixture("llama3")));
  auto err = [&](const std::function<void(json&)>& change) {
    json j = good;
    change(j);
    return error_of([&] { BpeTokenizer t(j.dump(), "t.json"); });
  };
  EXPECT_EQ(err([](json&) {}), "");
  const std::string other = R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,2}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  const std::string e1 = err([&](json& j) { j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = other; });
  EXPECT_TRUE(contains(e1, "is not one mxdp knows")) << e1;
  EXPECT_TRUE(contains(e1, json(other).dump())) << "the error names the pattern: " << e1;
  EXPECT_TRUE(contains(err([](json& j) { j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Removed"; }),
                       "behavior 'Removed'"));
  EXPECT_TRUE(contains(err([](json& j) { j["pre_tokenizer"]["pretokenizers"][0]["invert"] = true; }), "inverted"));
  EXPECT_TRUE(contains(err([](json& j) { j["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {{"String", " "}}; }),
                       "pattern {\"String\":\" \"} is not supported"));
  EXPECT_TRUE(contains(err([](json& j) { j["pre_tokenizer"]["pretokenizers"].erase(1); }), "one ByteLevel step, the last"));
  EXPECT_TRUE(contains(err([](json& j) { j["pre_tokenizer"]["pretokenizers"].push_back({{"type", "Metaspace"}}); }),
                       "Metaspace"));
  EXPECT_TRUE(contains(err([](json& j) { j["normalizer"] = {{"type", "NFKC"}}; }), "normalizer {\"type\":\"NFKC\"}"));
  EXPECT_TRUE(contains(err([](json& j) { j["model"]["byte_fallback"] = true; }), "byte_fallback"));
  EXPECT_TRUE(contains(err([](json& j) {
                         j["normalizer"] = {{"type", "NFC"}};
                         j["added_tokens"][0]["normalized"] = true;
                       }),
                       "normalized"));
  // Malformed files: each error names the field and the value.
  EXPECT_TRUE(contains(err([](json& j) { j["model"]["merges"][0] = "a b c"; }),
                       "merge 0 'a b c' is not two tokens separated by one space"));
  EXPECT_TRUE(contains(err([](json& j) { j["model"]["merges"][1] = json::array({"a"}); }),
                       "merge 1 [\"a\"] is not a pair of strings"));
  EXPECT_TRUE(contains(err([](json& j) { j["model"].erase("merges"); }), "model.merges is not an array"));
  EXPECT_TRUE(contains(err([](json& j) { j["model"]["vocab"]["x"] = "7"; }), "vocab entry 'x' has id \"7\", not an integer"));
  EXPECT_TRUE(contains(err([](json& j) { j["model"]["vocab"]["x"] = int64_t(1) << 24; }), "vocab entry 'x' has id 16777216"));
  EXPECT_TRUE(contains(err([](json& j) { j["model"]["vocab"] = json::object(); }), "the vocabulary is empty"));
  EXPECT_TRUE(contains(err([](json& j) { j["model"]["unk_token"] = "<nope>"; }), "unk_token '<nope>' is not in the vocabulary"));
  EXPECT_TRUE(contains(err([](json& j) { j["decoder"] = {{"type", "WordPiece"}}; }), "decoder {\"type\":\"WordPiece\"}"));
  EXPECT_TRUE(contains(err([](json& j) { j["added_tokens"] = json::object(); }), "added_tokens is not an array"));
  EXPECT_TRUE(contains(err([](json& j) { j["added_tokens"][0]["content"] = ""; }), "is empty"));
  EXPECT_TRUE(contains(err([](json& j) { j["added_tokens"][0].erase("id"); }), "needs an integer id and a string content"));
  EXPECT_TRUE(contains(err([](json& j) { j["model"]["continuing_subword_prefix"] = "##"; }), "continuing_subword_prefix"));
  EXPECT_TRUE(contains(err([](json& j) { j.erase("pre_tokenizer"); }), "has no pre_tokenizer"));
  EXPECT_TRUE(contains(err([](json& j) { j.erase("model"); }), "no \"model\" object"));
}

TEST(Tokenizers, PrepareWithEachFamily) {
  TempDir d;
  const std::string text = read_file(source_path("data/kjv.txt")).substr(0, 60000) + golden()["texts"][7].get<std::string>() +
                           "<|endoftext|><|im_start|>The end 1234<|im_end|>";
  write_file(d / "in.txt", text);
  for (const char* family : kFamilies) {
    const std::string out = d / family;
    const RunResult p = run_mxdp("prepare --input " + quote(d / "in.txt") + " --output " + quote(out) + " --tokenizer " +
                                     quote(fixture(family)),
                                 d / "prepare.log");
    ASSERT_EQ(p.exit_code, 0) << p.output;
    const BpeTokenizer tok(fixture(family));
    const TokenDataset tr(out + "/train.bin"), va(out + "/val.bin");
    EXPECT_EQ(tr.vocab_size(), uint32_t(tok.vocab_size())) << family;
    std::vector<int32_t> all(tr.tokens().begin(), tr.tokens().end());
    all.insert(all.end(), va.tokens().begin(), va.tokens().end());
    EXPECT_EQ(all, tok.encode(text)) << family << ": train.bin + val.bin = the ids of the text";
    EXPECT_EQ(read_file(out + "/tokenizer.json"), read_file(fixture(family)));
  }
  // A real Llama 3 / Qwen2 vocabulary (ids past 65535): the shards hold 4-byte tokens.
  // (Filler vocabulary entries up to 128254, as the real file's added tokens follow 128000 entries.)
  json big = json::parse(read_file(fixture("llama3")));
  big["added_tokens"] = json::array();
  for (int id = 1000; id < 128255; ++id) big["model"]["vocab"]["\xC2\xA7" + std::to_string(id)] = id;
  big["added_tokens"].push_back({{"id", 128255}, {"content", "<|reserved_special_token_250|>"}, {"special", true}});
  write_file(d / "big.json", big.dump());
  const BpeTokenizer t(d / "big.json");
  EXPECT_EQ(t.vocab_size(), 128256);
  const std::string big_text = text + "<|reserved_special_token_250|>x";
  const std::vector<int32_t> ids = t.encode(big_text);
  ASSERT_EQ(ids.end()[-2], 128255);
  EXPECT_EQ(t.decode(std::vector<int32_t>{128255}), "<|reserved_special_token_250|>");
  write_file(d / "big.txt", big_text);
  const RunResult p = run_mxdp("prepare --input " + quote(d / "big.txt") + " --output " + quote(d / "big") +
                                   " --tokenizer " + quote(d / "big.json") + " --val-fraction 0.5",
                               d / "big.log");
  ASSERT_EQ(p.exit_code, 0) << p.output;
  // The format by hand: token_bytes 4 at offset 16, 64 + 4*count bytes, little-endian uint32 tokens.
  const std::string raw = read_file(d / "big/val.bin");
  auto u32 = [&](size_t at) {
    uint32_t v = 0;
    for (int k = 0; k < 4; ++k) v |= uint32_t(uint8_t(raw[at + k])) << (8 * k);
    return v;
  };
  const size_t n_val = ids.size() / 2, n_train = ids.size() - n_val;
  EXPECT_EQ(u32(12), 128256u);
  EXPECT_EQ(u32(16), 4u);
  ASSERT_EQ(raw.size(), 64 + 4 * n_val);
  for (size_t i = 0; i < n_val; ++i) ASSERT_EQ(int32_t(u32(64 + 4 * i)), ids[n_train + i]) << i;
  const TokenDataset tr(d / "big/train.bin"), va(d / "big/val.bin");
  EXPECT_EQ(va.token_bytes(), 4u);
  std::vector<int32_t> got(n_train);
  tr.read(0, n_train, got.data());
  EXPECT_EQ(got, std::vector<int32_t>(ids.begin(), ids.begin() + long(n_train)));
  EXPECT_TRUE(contains(error_of([&] { (void)va.tokens(); }), "holds 4-byte tokens"));
  // Read as one dataset of two files, a window across both.
  const TokenDataset both(std::vector<std::string>{d / "big/train.bin", d / "big/val.bin"});
  std::vector<int32_t> across(10);
  both.read(n_train - 5, 10, across.data());
  EXPECT_EQ(across, std::vector<int32_t>(ids.begin() + long(n_train) - 5, ids.begin() + long(n_train) + 5));
  // The loader's batches: inputs and targets are the ids at the window's start.
  DataLoader loader(va, 2, 8, 0, 1, 7);
  Batch b;
  loader.next(b);
  const size_t s0 = loader.window_start(0);
  for (int k = 0; k < 8; ++k) {
    EXPECT_EQ(b.inputs[k], ids[n_train + s0 + size_t(k)]);
    EXPECT_EQ(b.targets[k], ids[n_train + s0 + size_t(k) + 1]);
  }
}

TEST(Tokenizers, LlamaTinyTrainsAndSamplesWithTheLlama3Tokenizer) {
  TempDir d;
  write_file(d / "in.txt", read_file(source_path("data/kjv.txt")).substr(0, 100000));
  const std::string tj = fixture("llama3");
  const RunResult p = run_mxdp("prepare --input " + quote(d / "in.txt") + " --output " + quote(d / "data") +
                                   " --tokenizer " + quote(tj),
                               d / "prepare.log");
  ASSERT_EQ(p.exit_code, 0) << p.output;
  EXPECT_TRUE(contains(p.output, "Llama 3 split + ByteLevel")) << p.output;
  const RunResult t = run_mxdp("train --device cpu --data " + quote(d / "data") + " --model llama-tiny --vocab 1008 "
                               "--seq-len 32 --batch-size 4 --steps 10 --lr 1e-2 --warmup-steps 2 --eval-every 0 "
                               "--threads 1 --progress lines --sample-tokens 20 --sample-prompt 'And God said' --save-dir " +
                                   quote(d / "ck"),
                               d / "train.log");
  ASSERT_EQ(t.exit_code, 0) << t.output;
  const size_t h = t.output.find("sample (20 tokens");
  ASSERT_NE(h, std::string::npos) << t.output;
  const std::string want = t.output.substr(t.output.find('\n', h) + 1);
  EXPECT_EQ(want.rfind("And God said", 0), 0u) << want;
  const RunResult s = run_mxdp("sample --device cpu --load " + quote(d / "ck") + " --tokenizer " + quote(tj) +
                                   " --prompt 'And God said' --tokens 20 --seed 1337 --threads 1",
                               d / "s.log");
  ASSERT_EQ(s.exit_code, 0) << s.output;
  EXPECT_EQ(s.output, want) << "mxdp sample decodes with the tokenizer, as the end-of-run sample (from data/tokenizer.json) did";
}

// tokenizers gives added tokens their ids itself when it loads a file: the
// vocabulary's id for a token in it, else the next id after the vocabulary
// and the added tokens before it, whatever "id" the file says.
TEST(Tokenizers, AddedTokenIdsAsThePackageGivesThem) {
  TempDir d;
  MXDP_REQUIRE_PYTHON(d, "tokenizers");
  json j = json::parse(read_file(fixture("llama3")));
  const json flags = {{"single_word", false}, {"lstrip", false}, {"rstrip", false}, {"normalized", false}, {"special", true}};
  json gap = flags, known = flags;
  gap["id"] = 128255, gap["content"] = "<|reserved_special_token_250|>";
  known["id"] = 5, known["content"] = "and";  // a vocabulary token, with another id in the file
  ASSERT_TRUE(j["model"]["vocab"].contains("and"));
  const int32_t and_id = j["model"]["vocab"]["and"].get<int32_t>();
  ASSERT_NE(and_id, 5);
  j["added_tokens"].push_back(gap);
  j["added_tokens"].push_back(known);
  write_file(d / "t.json", j.dump());
  const std::vector<std::string> texts = {"x<|reserved_special_token_250|>y", "sand and <|eot_id|>"};
  write_file(d / "cases.json", json{{"texts", texts}}.dump());
  write_file(d / "c.txt", texts[0] + texts[1]);
  const RunResult r = run_python(quote(source_path("tests/py/tokenizers_encode.py")) + " " + quote(d / "t.json") + " " +
                                     quote(d / "cases.json") + " " + quote(d / "out.json") + " " + quote(d / "c.txt") +
                                     " " + quote(d / "c.bin"),
                                 d / "py.log");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const json live = json::parse(read_file(d / "out.json"));
  const BpeTokenizer tok(d / "t.json");
  for (size_t i = 0; i < texts.size(); ++i)
    EXPECT_EQ(tok.encode(texts[i]), live["ids"][i].get<std::vector<int32_t>>()) << texts[i];
  EXPECT_EQ(tok.encode("<|reserved_special_token_250|>"), (std::vector<int32_t>{1008})) << "after 1000..1007";
  EXPECT_EQ(tok.encode("and"), (std::vector<int32_t>{and_id}));
  EXPECT_EQ(tok.vocab_size(), 1009);
}

// bpe.cpp encodes a long text in chunks, cut at newlines where every pattern
// ends a piece. With merges over white space and a newline ("ĠĠ", "ĠĠĊ"), a
// cut after "  \n" would change the ids (GPT-2's pattern splits "x  \nA" as
// "x", "  ", "\n", "A", but the chunk "x  \n" as "x", "  \n"): the package
// encodes a 300 kB text of such lines as mxdp does.
TEST(Tokenizers, LongTextsInChunksAsThePackage) {
  TempDir d;
  MXDP_REQUIRE_PYTHON(d, "tokenizers");
  json j = json::parse(read_file(fixture("smollm2")));
  const std::string sp = "\xC4\xA0", nl = "\xC4\x8A";  // the byte characters of ' ' and '\n'
  j["model"]["vocab"][sp + sp] = 1000;
  j["model"]["vocab"][sp + sp + nl] = 1001;
  j["model"]["merges"].push_back({sp, sp});
  j["model"]["merges"].push_back({sp + sp, nl});
  write_file(d / "t.json", j.dump());
  std::string text;
  while (text.size() < 300000) text += "And it was so  \nAnd God saw  \nthat it was good.  \n";
  write_file(d / "long.txt", text);
  write_file(d / "cases.json", json{{"texts", {"x  \nA", "x  \n"}}}.dump());
  const RunResult r = run_python(quote(source_path("tests/py/tokenizers_encode.py")) + " " + quote(d / "t.json") + " " +
                                     quote(d / "cases.json") + " " + quote(d / "out.json") + " " + quote(d / "long.txt") +
                                     " " + quote(d / "long.bin"),
                                 d / "py.log");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const BpeTokenizer tok(d / "t.json");
  const json live = json::parse(read_file(d / "out.json"));
  EXPECT_EQ(live["ids"][0].size(), 4u) << "x, ĠĠ, Ċ, A: " << live["ids"][0].dump();
  EXPECT_EQ(live["ids"][1].size(), 2u) << "x, ĠĠĊ: " << live["ids"][1].dump();
  EXPECT_EQ(tok.encode("x  \nA"), live["ids"][0].get<std::vector<int32_t>>());
  EXPECT_EQ(tok.encode("x  \n"), live["ids"][1].get<std::vector<int32_t>>());
  EXPECT_EQ(tok.encode(text), read_ids(d / "long.bin"));
}
