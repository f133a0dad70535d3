// llm.c token shards (llmc_shards.h) in `mxdp train --data`: shards written
// by an independent numpy writer (tests/py/llmc_write.py) read as one token
// sequence, windows across shard boundaries included; training on them gives
// bitwise the losses of training on the same tokens as mxdp shards; bad
// headers and bad --data patterns are refused with their reason.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>

#include "util/check.h"
#include "data/data.h"
#include "data/llmc_shards.h"
#include "python_util.h"

using namespace mxdp;
using namespace mxdp::testing;

namespace {



// d/mx/{train,val}.bin from random byte tokens, and the same tokens as llm.c
// shards d/lc_train_00000K.bin (K = 1..n) and d/lc_val_000000.bin.
std::vector<uint16_t> make_shards(const TempDir& d, int n, size_t tokens = 20000) {
  std::mt19937 g(3);
  std::vector<uint16_t> t(tokens), v(4000);
  for (auto& x : t) x = uint16_t(g() % 200);
  for (auto& x : v) x = uint16_t(g() % 200);
  std::filesystem::create_directories(d / "mx");
  write_shard(d / "mx/train.bin", t);
  write_shard(d / "mx/val.bin", v);
  const RunResult r = run_python(quote(source_path("tests/py/llmc_write.py")) + " " + quote(d / "mx/train.bin") + " " +
                                     quote(d / "lc") + " " + std::to_string(n),
                                 d / "write.log");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return t;
}

std::vector<std::string> train_losses(const std::string& metrics) {
  std::vector<std::string> out;
  std::istringstream in(read_file(metrics));
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json j = nlohmann::json::parse(line);
    if (j["kind"] == "train" || j["kind"] == "eval") out.push_back(j["kind"].get<std::string>() + " " + j["step"].dump() + " " + j["loss"].dump());
  }
  return out;
}

}  // namespace

TEST(LlmcShards, ReadAsOneSequence) {
  TempDir d;
  MXDP_REQUIRE_PYTHON(d, "numpy");
  const std::vector<uint16_t> t = make_shards(d, 7, 2000);
  std::vector<std::string> files;
  for (int k = 1; k <= 7; ++k) files.push_back(d / ("lc_train_00000" + std::to_string(k) + ".bin"));
  const TokenDataset one(files[2]);
  EXPECT_EQ(one.vocab_size(), 50257u) << "llm.c version 1: GPT-2 tokens";
  EXPECT_EQ(one.size(), 2000u / 7);
  const TokenDataset all(files);
  ASSERT_EQ(all.size(), t.size());
  EXPECT_EQ(all.vocab_size(), 50257u);
  std::vector<uint16_t> scratch;
  for (size_t n : {1u, 33u, 300u})
    for (size_t s = 0; s + n <= t.size(); s += 7) {
      const uint16_t* w = all.window(s, n, scratch);
      ASSERT_TRUE(std::equal(w, w + n, t.begin() + long(s))) << "window " << s << " + " << n;
    }
  EXPECT_TRUE(contains(error_of([&] { all.tokens(); }), "made of 7 files"));
  EXPECT_TRUE(contains(error_of([&] { all.window(t.size() - 2, 3, scratch); }), "outside the 2000 tokens"));

  const auto set = find_llmc_shards(d / "lc_*.bin");
  ASSERT_TRUE(set.has_value());
  EXPECT_EQ(set->train, files) << "glob matches in sorted order";
  EXPECT_EQ(set->val, std::vector<std::string>{d / "lc_val_000000.bin"});
  const auto list = find_llmc_shards(files[1] + "," + files[0] + "," + d / "lc_val_*.bin");
  ASSERT_TRUE(list.has_value());
  EXPECT_EQ(list->train, (std::vector<std::string>{files[1], files[0]})) << "a list keeps its order";
  EXPECT_FALSE(find_llmc_shards(d / "mx").has_value()) << "an mxdp data directory is not llm.c data";
  EXPECT_FALSE(find_llmc_shards(d / "mx/train.bin").has_value());
  EXPECT_FALSE(find_llmc_shards(source_path("data/kjv.txt")).has_value());
}

TEST(LlmcShards, BadShardsAndPatternsAreRefused) {
  TempDir d;
  MXDP_REQUIRE_PYTHON(d, "numpy");
  const std::string w = quote(source_path("tests/py/llmc_write.py"));
  auto raw = [&](const std::string& name, int version, int count, int n) {
    const RunResult r = run_python(w + " raw " + quote(d / name) + " " + std::to_string(version) + " " +
                                       std::to_string(count) + " " + std::to_string(n),
                                   d / (name + ".log"));
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return d / name;
  };
  EXPECT_EQ(error_of([&] { TokenDataset t(raw("ok.bin", 1, 100, 100)); }), "");
  EXPECT_TRUE(contains(error_of([&] { TokenDataset t(raw("v2.bin", 2, 100, 100)); }), "version 2 (uint32 LLaMA-3 tokens)"));
  EXPECT_TRUE(contains(error_of([&] { TokenDataset t(raw("v7.bin", 7, 100, 100)); }), "has version 7"));
  EXPECT_TRUE(contains(error_of([&] { TokenDataset t(raw("short.bin", 1, 100, 99)); }),
                       "but its header says 100 tokens = 1024 + 2*100 bytes"));
  EXPECT_TRUE(contains(error_of([&] { TokenDataset t(raw("neg.bin", 1, -5, 10)); }), "negative token count"));
  std::string head = read_file(d / "ok.bin").substr(0, 500);
  write_file(d / "cut.bin", head);
  EXPECT_TRUE(contains(error_of([&] { TokenDataset t(d / "cut.bin"); }), "smaller than its 1024-byte header"));
  std::string big = read_file(d / "ok.bin");
  big[1024 + 2 * 7] = char(0xFF), big[1024 + 2 * 7 + 1] = char(0xFF);  // token 65535
  write_file(d / "big.bin", big);
  EXPECT_TRUE(contains(error_of([&] { TokenDataset t(d / "big.bin"); }), "token 65535 at position 7 is >= GPT-2's vocab_size 50257"));

  EXPECT_TRUE(contains(error_of([&] { find_llmc_shards(d / "nothing_*.bin"); }), "matches no file"));
  EXPECT_TRUE(contains(error_of([&] { find_llmc_shards(d / "ok.bin"); }), "none of the 1 llm.c shards it names is validation data"));
  raw("x_val.bin", 1, 10, 10);
  EXPECT_TRUE(contains(error_of([&] { find_llmc_shards(d / "x_val.bin"); }), "every llm.c shard it names is validation data"));
  write_file(d / "text.bin", "plain text, not a shard");
  const std::string text_bin = d / "text.bin", list = std::string(d / "ok.bin").append(",").append(text_bin);
  EXPECT_TRUE(contains(error_of([&] { find_llmc_shards(list); }), text_bin)) << "names the file";
  EXPECT_TRUE(contains(error_of([&] { find_llmc_shards(list); }), "is not an llm.c token shard"));
  // A directory of llm.c shards: its *.bin that are shards, split by name.
  std::filesystem::remove(d / "text.bin");
  std::filesystem::remove(d / "big.bin");
  for (const char* f : {"v2.bin", "v7.bin", "short.bin", "neg.bin", "cut.bin"}) std::filesystem::remove(d / f);
  const auto dir = find_llmc_shards(d.path.string());
  ASSERT_TRUE(dir.has_value());
  EXPECT_EQ(dir->train, std::vector<std::string>{d / "ok.bin"});
  EXPECT_EQ(dir->val, std::vector<std::string>{d / "x_val.bin"});
}

TEST(LlmcShards, TrainingOnThemEqualsTrainingOnTheSameTokens) {
  TempDir d;
  MXDP_REQUIRE_PYTHON(d, "numpy");
  make_shards(d, 9);
  const std::string common =
      " --vocab 50257 --n-layer 1 --d-model 32 --n-head 2 --seq-len 16 --batch-size 2 --steps 6 --eval-every 3 "
      "--eval-batches 2 --threads 1 --progress lines --lr 1e-2 --warmup-steps 2 ";
  const RunResult a = run_mxdp("train --device cpu --data " + quote(d / "mx") + common + "--sample-tokens 0 --metrics " + quote(d / "a.jsonl"),
                               d / "a.log");
  ASSERT_EQ(a.exit_code, 0) << a.output;
  const RunResult b = run_mxdp("train --device cpu --data " + quote(d / "lc_*.bin") + common + "--metrics " + quote(d / "b.jsonl"), d / "b.log");
  ASSERT_EQ(b.exit_code, 0) << b.output;
  const std::vector<std::string> la = train_losses(d / "a.jsonl"), lb = train_losses(d / "b.jsonl");
  ASSERT_EQ(la.size(), 6u + 2u);
  EXPECT_EQ(la, lb) << "the same tokens in 9 llm.c shards give bitwise the same losses";
  EXPECT_TRUE(contains(b.output, "train 20000 tokens, val 4000 tokens")) << b.output;
  EXPECT_TRUE(contains(b.output, "sample: skipped: the data's tokens (vocab 50257) need their tokenizer")) << b.output;
}
