// llm.c token shards (llmc_shards.h) in `mxdp train --data`: shards written
// by an independent numpy writer (tests/py/llmc_write.py), GPT-2's (uint16)
// and Llama 3's (uint32), read as one token sequence, windows across shard
// boundaries included; training on them gives bitwise the losses of training
// on the same tokens as mxdp shards; bad headers, tokens past the vocabulary,
// a mix of the two formats and bad --data patterns are refused with their
// reason.
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



// Splits d/mx/train.bin into n llm.c shards d/lc_train_00000K.bin (K = 1..n)
// and d/mx/val.bin into d/lc_val_000000.bin, in llm.c's `format` ("gpt-2",
// "llama-3"), with tests/py/llmc_write.py.
void write_llmc(const TempDir& d, int n, const std::string& format) {
  const RunResult r = run_python(quote(source_path("tests/py/llmc_write.py")) + " " + quote(d / "mx/train.bin") + " " +
                                     quote(d / "lc") + " " + std::to_string(n) + " " + format,
                                 d / "write.log");
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

// d/mx/{train,val}.bin from random byte tokens, and the same tokens as llm.c
// GPT-2 shards (write_llmc).
std::vector<uint16_t> make_shards(const TempDir& d, int n, size_t tokens = 20000) {
  std::mt19937 g(3);
  std::vector<uint16_t> t(tokens), v(4000);
  for (auto& x : t) x = uint16_t(g() % 200);
  for (auto& x : v) x = uint16_t(g() % 200);
  std::filesystem::create_directories(d / "mx");
  write_shard(d / "mx/train.bin", t);
  write_shard(d / "mx/val.bin", v);
  write_llmc(d, n, "gpt-2");
  return t;
}

// The same with random Llama 3 ids (4-byte mxdp shards, vocab 128256) as llm.c
// Llama 3 shards; the first ids are the edges of 16 bits and of the vocabulary.
std::vector<uint32_t> make_llama3_shards(const TempDir& d, int n, size_t tokens = 20000) {
  std::mt19937 g(5);
  std::vector<uint32_t> t(tokens), v(4000);
  for (auto& x : t) x = g() % kLlmcLlama3.vocab_size;
  for (auto& x : v) x = g() % kLlmcLlama3.vocab_size;
  const uint32_t edges[] = {0, 65535, 65536, 65537, 100000, 128255};
  std::copy(std::begin(edges), std::end(edges), t.begin());
  std::filesystem::create_directories(d / "mx");
  write_shard(d / "mx/train.bin", t, kLlmcLlama3.vocab_size);
  write_shard(d / "mx/val.bin", v, kLlmcLlama3.vocab_size);
  write_llmc(d, n, "llama-3");
  return t;
}

std::vector<std::string> train_files(const TempDir& d, int n) {
  std::vector<std::string> files;
  for (int k = 1; k <= n; ++k) files.push_back(d / ("lc_train_00000" + std::to_string(k) + ".bin"));
  return files;
}

// Writes an llm.c shard d/name with header (format's magic, version, count)
// and n tokens (tests/py/llmc_write.py raw).
std::string raw_shard(const TempDir& d, const std::string& name, int version, int count, int n,
                      const std::string& format = "gpt-2") {
  const RunResult r = run_python(quote(source_path("tests/py/llmc_write.py")) + " raw " + quote(d / name) + " " +
                                     std::to_string(version) + " " + std::to_string(count) + " " + std::to_string(n) +
                                     " " + format,
                                 d / (name + ".log"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return d / name;
}

// The file at `path` with the little-endian uint32 token at `index` (after
// llm.c's 1024-byte header) set to `id`, written to `out`.
void write_with_token(const std::string& path, size_t index, uint32_t id, const std::string& out) {
  std::string b = read_file(path);
  for (int i = 0; i < 4; ++i) b[1024 + 4 * index + size_t(i)] = char((id >> (8 * i)) & 0xFF);
  write_file(out, b);
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
  const std::vector<std::string> files = train_files(d, 7);
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
  auto raw = [&](const std::string& name, int version, int count, int n) { return raw_shard(d, name, version, count, n); };
  EXPECT_EQ(error_of([&] { TokenDataset t(raw("ok.bin", 1, 100, 100)); }), "");
  // llm.c writes Llama 3 shards under their own magic (Llama3BadShardsAreRefused), never GPT-2's with another version.
  EXPECT_TRUE(contains(error_of([&] { TokenDataset t(raw("v2.bin", 2, 100, 100)); }),
                       "has magic 20240520 (GPT-2) but version 2; llm.c writes GPT-2 shards as version 1"));
  EXPECT_TRUE(contains(error_of([&] { TokenDataset t(raw("v7.bin", 7, 100, 100)); }), "but version 7"));
  EXPECT_TRUE(contains(error_of([&] { TokenDataset t(raw("short.bin", 1, 100, 99)); }),
                       "but its header says 100 GPT-2 tokens = 1024 + 2*100 bytes"));
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

TEST(LlmcShards, Llama3ShardsReadBackExactly) {
  TempDir d;
  MXDP_REQUIRE_PYTHON(d, "numpy");
  const std::vector<uint32_t> t = make_llama3_shards(d, 5, 3000);
  ASSERT_GT(std::count_if(t.begin(), t.end(), [](uint32_t x) { return x > 65535; }), 1000) << "ids past 16 bits";
  const std::vector<std::string> files = train_files(d, 5);
  const TokenDataset one(files[0]);
  EXPECT_EQ(one.vocab_size(), 128256u) << "llm.c Llama 3 shards: Llama 3's vocabulary";
  EXPECT_EQ(one.token_bytes(), 4u);
  EXPECT_EQ(one.size(), 600u);
  std::vector<uint16_t> scratch;
  EXPECT_TRUE(contains(error_of([&] { one.window(0, 4, scratch); }), "holds 4-byte tokens; read it with read()"));

  const TokenDataset all(files);
  ASSERT_EQ(all.size(), t.size());
  EXPECT_EQ(all.vocab_size(), 128256u);
  std::vector<int32_t> got(t.size());
  all.read(0, t.size(), got.data());
  EXPECT_TRUE(std::equal(got.begin(), got.end(), t.begin(), [](int32_t a, uint32_t b) { return uint32_t(a) == b; }));
  EXPECT_EQ(got[1], 65535);
  EXPECT_EQ(got[2], 65536);
  EXPECT_EQ(got[5], 128255);
  for (size_t n : {1u, 17u, 700u})
    for (size_t s = 0; s + n <= t.size(); s += 13) {
      std::vector<int32_t> w(n);
      all.read(s, n, w.data());
      ASSERT_TRUE(std::equal(w.begin(), w.end(), t.begin() + long(s), [](int32_t a, uint32_t b) { return uint32_t(a) == b; }))
          << "window " << s << " + " << n;
    }

  // The trainer's loader: every row is the window of t it says it starts at, shifted by one for the targets.
  const int B = 3, T = 50;
  DataLoader dl(all, B, T, 0, 1, 7);
  Batch batch;
  for (int step = 0; step < 4; ++step) {
    dl.next(batch);
    for (int b = 0; b < B; ++b) {
      const size_t start = dl.window_start(size_t(step) * B + size_t(b));
      for (int i = 0; i < T; ++i) {
        ASSERT_EQ(uint32_t(batch.inputs[b * T + i]), t[start + size_t(i)]) << "step " << step << " row " << b;
        ASSERT_EQ(uint32_t(batch.targets[b * T + i]), t[start + size_t(i) + 1]) << "step " << step << " row " << b;
      }
    }
  }

  const auto set = find_llmc_shards(d / "lc_*.bin");
  ASSERT_TRUE(set.has_value());
  EXPECT_EQ(set->train, files);
  EXPECT_EQ(set->val, std::vector<std::string>{d / "lc_val_000000.bin"});
}

TEST(LlmcShards, Llama3BadShardsAreRefused) {
  TempDir d;
  MXDP_REQUIRE_PYTHON(d, "numpy");
  auto raw = [&](const std::string& name, int version, int count, int n) {
    return raw_shard(d, name, version, count, n, "llama-3");
  };
  const std::string ok = raw("ok.bin", 7, 100, 100);
  EXPECT_EQ(error_of([&] { TokenDataset t(ok); }), "");
  const std::string short_bin = raw("short.bin", 7, 100, 99);
  const std::string cut = error_of([&] { TokenDataset t(short_bin); });
  EXPECT_TRUE(contains(cut, "'" + short_bin + "' is 1420 bytes, but its header says 100 Llama 3 tokens = 1024 + 4*100 bytes"))
      << cut;
  const std::string odd = raw("odd.bin", 7, 100, 100);
  write_file(odd, read_file(odd).substr(0, 1024 + 399));  // the last token cut in the middle
  EXPECT_TRUE(contains(error_of([&] { TokenDataset t(odd); }), "is 1423 bytes, but its header says 100 Llama 3 tokens"));
  EXPECT_TRUE(contains(error_of([&] { TokenDataset t(raw("v2.bin", 2, 100, 100)); }),
                       "has magic 20240801 (Llama 3) but version 2; llm.c writes Llama 3 shards as version 7"));
  EXPECT_TRUE(contains(error_of([&] { TokenDataset t(raw("neg.bin", 7, -5, 10)); }), "negative token count"));

  // A token past Llama 3's vocabulary is refused on open, as a GPT-2 shard's past GPT-2's is.
  write_with_token(ok, 7, 128256, d / "big.bin");
  EXPECT_TRUE(contains(error_of([&] { TokenDataset t(d / "big.bin"); }),
                       "llm.c shard '" + (d / "big.bin") + "': token 128256 at position 7 is >= Llama 3's vocab_size 128256"));
  write_with_token(ok, 99, 0xFFFFFFFFu, d / "huge.bin");
  EXPECT_TRUE(contains(error_of([&] { TokenDataset t(d / "huge.bin"); }), "token 4294967295 at position 99 is >="));
  write_with_token(ok, 7, 128255, d / "last.bin");
  EXPECT_EQ(error_of([&] { TokenDataset t(d / "last.bin"); }), "") << "128255 is Llama 3's last id";
}

TEST(LlmcShards, Gpt2AndLlama3ShardsAreNotMixed) {
  TempDir d;
  MXDP_REQUIRE_PYTHON(d, "numpy");
  const std::string g_train = raw_shard(d, "a_train_000001.bin", 1, 100, 100, "gpt-2");
  const std::string l_train = raw_shard(d, "a_train_000002.bin", 7, 100, 100, "llama-3");
  const std::string l_val = raw_shard(d, "a_val_000000.bin", 7, 100, 100, "llama-3");
  const std::string e = error_of([&] { find_llmc_shards(d / "a_*.bin"); });
  EXPECT_TRUE(contains(e, "'" + g_train + "' holds llm.c GPT-2 tokens but '" + l_train + "' Llama 3 tokens")) << e;
  const std::string e2 = error_of([&] { find_llmc_shards(g_train + "," + l_val); });
  EXPECT_TRUE(contains(e2, "'" + g_train + "' holds llm.c GPT-2 tokens but '" + l_val + "' Llama 3 tokens"))
      << "GPT-2 training data with Llama 3 validation data: " << e2;
  std::filesystem::remove(g_train);
  const auto set = find_llmc_shards(d.path.string());
  ASSERT_TRUE(set.has_value()) << "a directory of Llama 3 shards only";
  EXPECT_EQ(set->train, std::vector<std::string>{l_train});
  EXPECT_EQ(set->val, std::vector<std::string>{l_val});
}

TEST(LlmcShards, TrainingOnLlama3ShardsEqualsTrainingOnTheSameTokens) {
  TempDir d;
  MXDP_REQUIRE_PYTHON(d, "numpy");
  make_llama3_shards(d, 4);
  const std::string common =
      " --n-layer 1 --d-model 32 --n-head 2 --seq-len 16 --batch-size 2 --steps 6 --eval-every 3 "
      "--eval-batches 2 --threads 1 --progress lines --lr 1e-2 --warmup-steps 2 --sample-tokens 0 ";
  // The model's vocabulary is checked against the data's where it is for GPT-2 shards: before the first step.
  const RunResult small = run_mxdp("train --device cpu --data " + quote(d / "lc_*.bin") + " --vocab 50257" + common, d / "small.log");
  EXPECT_NE(small.exit_code, 0);
  EXPECT_TRUE(contains(small.output, "the data's vocab (128256) is larger than the model's (50257): pass --vocab 128256"))
      << small.output;
  const RunResult a = run_mxdp("train --device cpu --data " + quote(d / "mx") + " --vocab 128256" + common + "--metrics " +
                                   quote(d / "a.jsonl"),
                               d / "a.log");
  ASSERT_EQ(a.exit_code, 0) << a.output;
  const RunResult b = run_mxdp("train --device cpu --data " + quote(d / "lc_*.bin") + " --vocab 128256" + common +
                                   "--metrics " + quote(d / "b.jsonl"),
                               d / "b.log");
  ASSERT_EQ(b.exit_code, 0) << b.output;
  const std::vector<std::string> la = train_losses(d / "a.jsonl"), lb = train_losses(d / "b.jsonl");
  ASSERT_EQ(la.size(), 6u + 2u);
  EXPECT_EQ(la, lb) << "the same Llama 3 ids in 4 llm.c shards give bitwise the same losses";
  EXPECT_TRUE(contains(b.output, "train 20000 tokens, val 4000 tokens")) << b.output;
}
