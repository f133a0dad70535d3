// bpe.h against the `tokenizers` package (Hugging Face): a GPT-2 style
// byte-level BPE trained here on the shipped corpus (tests/py/bpe_reference.py,
// vocab 512) encodes the whole corpus to the same ids in mxdp and in the
// package, and decode(encode(text)) == text; so do ~300 strings of mixed
// scripts, digits, white space, contractions and special tokens. Then
// `mxdp prepare --tokenizer`, a model trained on its shards, and `mxdp sample`
// decoding with the tokenizer.
#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>

#include "data/bpe.h"
#include "util/check.h"
#include "data/data.h"
#include "python_util.h"

using namespace mxdp;
using namespace mxdp::testing;
using nlohmann::json;

namespace {



// Trains the reference tokenizer into d/ref (quick: without encoding the corpus).
void train_reference(const TempDir& d, bool quick = false) {
  const RunResult r = run_python(quote(source_path("tests/py/bpe_reference.py")) + " train " +
                                     quote(source_path("data/kjv.txt")) + " 512 " + quote(d / "ref") + (quick ? " quick" : ""),
                                 d / "ref.log");
  ASSERT_EQ(r.exit_code, 0) << r.output;
}

std::vector<int32_t> read_ids(const std::string& path) {
  const std::string b = read_file(path);
  std::vector<int32_t> v(b.size() / 4);
  std::memcpy(v.data(), b.data(), v.size() * 4);
  return v;
}

}  // namespace

TEST(Bpe, SameIdsAsTheTokenizersPackage) {
  TempDir d;
  MXDP_REQUIRE_PYTHON(d, "tokenizers");
  train_reference(d);
  const BpeTokenizer tok(d / "ref/tokenizer.json");
  EXPECT_EQ(tok.vocab_size(), 512);
  const std::string text = read_file(source_path("data/kjv.txt"));
  const std::vector<int32_t> want = read_ids(d / "ref/corpus_ids.bin");
  const std::vector<int32_t> got = tok.encode(text);
  ASSERT_EQ(got.size(), want.size());
  size_t first = got.size();
  for (size_t i = 0; i < got.size() && first == got.size(); ++i)
    if (got[i] != want[i]) first = i;
  EXPECT_EQ(first, got.size()) << "ids differ from position " << first;
  EXPECT_LT(want.size(), text.size() / 2) << "the merges must compress the text";
  EXPECT_EQ(tok.decode(got), text) << "decode(encode(text)) == text over the whole corpus";

  const json cases = json::parse(read_file(d / "ref/cases.json"));
  ASSERT_GT(cases.size(), 200u);
  int bad = 0;
  for (const json& c : cases) {
    const std::string s = c["text"].get<std::string>();
    const std::vector<int32_t> ids = tok.encode(s);
    if (ids != c["ids"].get<std::vector<int32_t>>() && ++bad <= 3) ADD_FAILURE() << "ids differ for " << c["text"].dump();
    EXPECT_EQ(tok.decode(ids), c["decoded"].get<std::string>()) << c["text"].dump();
    EXPECT_EQ(tok.decode(ids), s) << c["text"].dump();
  }
  EXPECT_EQ(bad, 0);
  EXPECT_EQ(tok.encode("<|endoftext|>"), (std::vector<int32_t>{0})) << "the special token is cut out first";
  EXPECT_TRUE(contains(error_of([&] { tok.encode("bad \xFF byte"); }), "not valid UTF-8"));
  EXPECT_TRUE(contains(error_of([&] { tok.decode(std::vector<int32_t>{512}); }), "token 512 at position 0"));
}

TEST(Bpe, Gpt2PreTokenizerSplits) {
  auto split = [](const std::string& s) {
    std::vector<std::string> out;
    for (auto [b, e] : split_pattern(SplitPattern::kGpt2, s)) out.push_back(s.substr(b, e - b));
    return out;
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(split("Hello world's  end!!\n\n x"), (V{"Hello", " world", "'s", " ", " end", "!!", "\n\n", " x"}));
  EXPECT_EQ(split(" 'll 12ab"), (V{" '", "ll", " 12", "ab"}));
  EXPECT_EQ(split("a   "), (V{"a", "   "}));
  EXPECT_EQ(split("\xC3\xA9t\xC3\xA9 \xE2\x85\xA0\xE2\x85\xA1"), (V{"\xC3\xA9t\xC3\xA9", " \xE2\x85\xA0\xE2\x85\xA1"}))
      << "letters and numbers beyond ASCII (U+2160 is a number, Nl)";
}

TEST(Bpe, UnsupportedTokenizersAreRefused) {
  TempDir d;
  MXDP_REQUIRE_PYTHON(d, "tokenizers");
  train_reference(d, true);
  const json good = json::parse(read_file(d / "ref/tokenizer.json"));
  auto err = [&](const std::function<void(json&)>& change) {
    json j = good;
    change(j);
    return error_of([&] { BpeTokenizer t(j.dump(), "t.json"); });
  };
  EXPECT_EQ(err([](json&) {}), "");
  EXPECT_TRUE(contains(err([](json& j) { j["normalizer"] = {{"type", "NFKC"}}; }), "normalizer"));
  EXPECT_TRUE(contains(err([](json& j) { j["pre_tokenizer"] = {{"type", "Metaspace"}}; }), "pre-tokenizer {\"type\":\"Metaspace\"} is not supported"));
  EXPECT_TRUE(contains(err([](json& j) { j["model"]["type"] = "WordPiece"; }), "model type 'WordPiece'"));
  EXPECT_TRUE(contains(err([](json& j) { j["model"]["dropout"] = 0.1; }), "dropout"));
  EXPECT_TRUE(contains(err([](json& j) { j["model"]["merges"].push_back({"zz", "qq"}); }), "not in the vocabulary"));
  EXPECT_TRUE(contains(err([](json& j) { j["added_tokens"][0]["lstrip"] = true; }), "lstrip"));
  EXPECT_TRUE(contains(err([](json& j) { j["model"]["vocab"]["dup"] = 5; }), "id 5 is given to two"));
  EXPECT_TRUE(contains(err([](json& j) { j["post_processor"] = {{"type", "RobertaProcessing"}}; }), "post_processor"));
  EXPECT_TRUE(contains(error_of([] { BpeTokenizer t("{", "t.json"); }), "not valid JSON"));
  // Merges in the older "a b" string form read the same.
  json old = good;
  for (auto& m : old["model"]["merges"]) m = m[0].get<std::string>() + " " + m[1].get<std::string>();
  const BpeTokenizer a(good.dump(), "new"), b(old.dump(), "old");
  EXPECT_EQ(a.encode("And God said, Let there be light"), b.encode("And God said, Let there be light"));
}

TEST(Bpe, PrepareTrainAndSampleWithTheTokenizer) {
  TempDir d;
  MXDP_REQUIRE_PYTHON(d, "tokenizers");
  train_reference(d, true);  // SameIdsAsTheTokenizersPackage holds BpeTokenizer to the package
  const RunResult p = run_mxdp("prepare --input " + quote(source_path("data/kjv.txt")) + " --output " + quote(d / "bpe") +
                                   " --tokenizer " + quote(d / "ref/tokenizer.json"),
                               d / "prepare.log");
  ASSERT_EQ(p.exit_code, 0) << p.output;
  const TokenDataset tr(d / "bpe/train.bin"), va(d / "bpe/val.bin");
  EXPECT_EQ(tr.vocab_size(), 512u);
  std::vector<int32_t> all(tr.tokens().begin(), tr.tokens().end());
  all.insert(all.end(), va.tokens().begin(), va.tokens().end());
  EXPECT_EQ(all, BpeTokenizer(d / "ref/tokenizer.json").encode(read_file(source_path("data/kjv.txt"))))
      << "train.bin + val.bin = the ids of the whole corpus";
  EXPECT_EQ(va.size(), all.size() / 10);
  EXPECT_EQ(read_file(d / "bpe/tokenizer.json"), read_file(d / "ref/tokenizer.json"));

  const RunResult t = run_mxdp("train --device cpu --data " + quote(d / "bpe") + " --vocab 512 --n-layer 1 --d-model 64 --seq-len 32 "
                               "--batch-size 4 --steps 15 --lr 1e-2 --warmup-steps 2 --eval-every 0 --threads 1 "
                               "--progress lines --sample-tokens 30 --sample-prompt 'And God said' --save-dir " +
                                   quote(d / "ck"),
                               d / "train.log");
  ASSERT_EQ(t.exit_code, 0) << t.output;
  const size_t h = t.output.find("sample (30 tokens");
  ASSERT_NE(h, std::string::npos) << t.output;
  const std::string want = t.output.substr(t.output.find('\n', h) + 1);
  EXPECT_EQ(want.rfind("And God said", 0), 0u) << want;
  const RunResult s = run_mxdp("sample --device cpu --load " + quote(d / "ck") + " --tokenizer " + quote(d / "ref/tokenizer.json") +
                                   " --prompt 'And God said' --tokens 30 --seed 1337 --threads 1",
                               d / "s.log");
  ASSERT_EQ(s.exit_code, 0) << s.output;
  EXPECT_EQ(s.output, want) << "mxdp sample decodes with the tokenizer, as the end-of-run sample did";
  const RunResult no = run_mxdp("sample --device cpu --load " + quote(d / "ck") + " --tokens 3 --threads 1", d / "no.log");
  EXPECT_NE(no.exit_code, 0);
  EXPECT_TRUE(contains(no.output, "vocabulary of 512 tokens; pass --tokenizer")) << no.output;
}
