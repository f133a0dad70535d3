// Tokenizer, shard files, prepare, DataLoader / EvalLoader and `mxdp prepare`.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <set>

#include <nlohmann/json.hpp>

#include "util/check.h"
#include "data/data.h"
#include "tmpdir_util.h"

using namespace mxdp;
using namespace mxdp::testing;

namespace {


#define EXPECT_ERROR(expr, needle)                                              \
  do {                                                                          \
    const std::string _msg = error_of([&] { (void)(expr); });                   \
    EXPECT_TRUE(contains(_msg, needle)) << "error was: '" << _msg << "'";       \
  } while (0)

// Random bytes from a fixed generator: windows of 16+ tokens are unique in a
// few thousand, so a batch row can be located in the shard by searching.
std::vector<uint16_t> random_tokens(size_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::vector<uint16_t> t(n);
  for (auto& x : t) x = uint16_t(g() & 0xFF);
  return t;
}

std::vector<int32_t> rows(const Batch& b) { return std::vector<int32_t>(b.inputs, b.inputs + size_t(b.B) * b.T); }
std::vector<int32_t> targets(const Batch& b) {
  return std::vector<int32_t>(b.targets, b.targets + size_t(b.B) * b.T);
}

// Where row `r` of `b` starts in `tok` (searched, not computed), or -1.
int64_t find_row(const std::vector<uint16_t>& tok, const Batch& b, int r) {
  std::vector<uint16_t> row(b.inputs + size_t(r) * b.T, b.inputs + size_t(r + 1) * b.T);
  auto it = std::search(tok.begin(), tok.end(), row.begin(), row.end());
  if (it == tok.end()) return -1;
  // Unique, or the search tells us nothing.
  EXPECT_EQ(std::search(it + 1, tok.end(), row.begin(), row.end()), tok.end()) << "row is not unique";
  return it - tok.begin();
}

}  // namespace

// ---- tokenizer and checksum -------------------------------------------------

TEST(ByteTokenizer, RoundTripsAllBytes) {
  std::string all;
  for (int i = 0; i < 256; ++i) all.push_back(char(i));
  all += all;
  const auto tok = ByteTokenizer::encode(all);
  ASSERT_EQ(tok.size(), 512u);
  for (size_t i = 0; i < tok.size(); ++i) EXPECT_EQ(tok[i], i % 256) << i;
  EXPECT_EQ(ByteTokenizer::decode(tok), all);
  std::vector<int32_t> t32(tok.begin(), tok.end());
  EXPECT_EQ(ByteTokenizer::decode(t32), all);
  EXPECT_EQ(ByteTokenizer::decode(std::vector<uint16_t>{}), "");
}

TEST(ByteTokenizer, RejectsTokensOutsideVocab) {
  EXPECT_ERROR(ByteTokenizer::decode(std::vector<uint16_t>{65, 256}), "token 256 at position 1");
  EXPECT_ERROR(ByteTokenizer::decode(std::vector<int32_t>{-1}), "token -1 at position 0");
}

TEST(Fnv1a64, PublishedTestVectors) {
  // From the FNV reference test suite (Fowler/Noll/Vo, isthe.com/chongo/tech/comp/fnv).
  EXPECT_EQ(fnv1a64("", 0), 0xcbf29ce484222325ull);
  EXPECT_EQ(fnv1a64("a", 1), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(fnv1a64("foobar", 6), 0x85944171f73967e8ull);
}

// ---- shard files ------------------------------------------------------------

TEST(Shard, ByteLayoutIsAsDocumented) {
  TempDir d;
  const std::string p = d / "s.bin";
  write_shard(p, std::vector<uint16_t>{0, 255, 65, 10});
  const std::string f = read_file(p);
  ASSERT_EQ(f.size(), 64u + 8u);
  EXPECT_EQ(f.substr(0, 8), "MXDPTOK1");
  auto u8 = [&](size_t i) { return unsigned(static_cast<unsigned char>(f[i])); };
  EXPECT_EQ(u8(8), 1u);  // version 1, LE
  EXPECT_EQ(u8(9) | u8(10) | u8(11), 0u);
  EXPECT_EQ(u8(12), 0u);  // vocab 256 = 00 01 00 00
  EXPECT_EQ(u8(13), 1u);
  EXPECT_EQ(u8(16), 2u);  // token_bytes
  EXPECT_EQ(u8(24), 4u);  // count
  for (size_t i = 25; i < 32; ++i) EXPECT_EQ(u8(i), 0u) << i;
  const unsigned char payload[8] = {0, 0, 255, 0, 65, 0, 10, 0};
  EXPECT_EQ(std::memcmp(f.data() + 64, payload, 8), 0);
  uint64_t sum = 0;
  for (int i = 7; i >= 0; --i) sum = (sum << 8) | u8(32 + i);
  EXPECT_EQ(sum, fnv1a64(payload, 8));
  for (size_t i = 40; i < 64; ++i) EXPECT_EQ(u8(i), 0u) << i;
  EXPECT_FALSE(fs::exists(p + ".tmp"));

  TokenDataset ds(p);
  EXPECT_EQ(ds.size(), 4u);
  EXPECT_EQ(ds.vocab_size(), 256u);
  EXPECT_EQ(std::vector<uint16_t>(ds.tokens().begin(), ds.tokens().end()), (std::vector<uint16_t>{0, 255, 65, 10}));
}

TEST(Shard, CorruptOrTruncatedFilesAreClearErrors) {
  TempDir d;
  const std::string good = d / "good.bin";
  write_shard(good, random_tokens(1000, 1));
  const std::string bytes = read_file(good);
  ASSERT_NO_THROW(TokenDataset{good});

  auto variant = [&](const std::string& name, std::string b) {
    const std::string p = d / name;
    write_file(p, b);
    return p;
  };
  std::string flipped = bytes;
  flipped[64 + 777] ^= 0x01;
  EXPECT_ERROR(TokenDataset(variant("flip.bin", flipped)), "corrupt: payload checksum");
  EXPECT_ERROR(TokenDataset(variant("short.bin", bytes.substr(0, bytes.size() - 1))), "truncated or padded");
  EXPECT_ERROR(TokenDataset(variant("half.bin", bytes.substr(0, 64 + 1000))), "header says 1000 tokens");
  EXPECT_ERROR(TokenDataset(variant("long.bin", bytes + "xx")), "truncated or padded");
  EXPECT_ERROR(TokenDataset(variant("tiny.bin", bytes.substr(0, 10))), "smaller than the 64-byte header");
  EXPECT_ERROR(TokenDataset(variant("empty.bin", "")), "smaller than the 64-byte header");
  std::string magic = bytes;
  magic[3] = 'X';
  EXPECT_ERROR(TokenDataset(variant("magic.bin", magic)), "not an mxdp token shard");
  std::string version = bytes;
  version[8] = 2;
  EXPECT_ERROR(TokenDataset(variant("version.bin", version)), "has version 2");
  std::string dtype = bytes;
  dtype[16] = 3;
  EXPECT_ERROR(TokenDataset(variant("dtype.bin", dtype)), "token_bytes 3, this build reads 2 (uint16) and 4 (uint32)");
  dtype[16] = 4;  // 4-byte tokens are read (larger vocabularies), but this payload is 2 bytes a token
  EXPECT_ERROR(TokenDataset(variant("dtype4.bin", dtype)), "tokens = 64 + 4*");
  EXPECT_ERROR(TokenDataset(d / "missing.bin"), "cannot open token shard");
  EXPECT_ERROR(TokenDataset(d.path.string()), "not a regular file");

  // A token >= vocab_size with a correct checksum: vocab 16, token 20.
  std::string v = bytes.substr(0, 64) + std::string("\x05\x00\x14\x00", 4);
  v[12] = 16, v[13] = 0;
  v[24] = 2;
  for (int i = 25; i < 32; ++i) v[i] = 0;
  const uint64_t sum = fnv1a64(v.data() + 64, 4);
  for (int i = 0; i < 8; ++i) v[32 + i] = char((sum >> (8 * i)) & 0xFF);
  EXPECT_ERROR(TokenDataset(variant("vocab.bin", v)), "token 20 at position 1 is >= vocab_size 16");
  EXPECT_ERROR(write_shard(d / "w.bin", std::vector<uint16_t>{1, 300}), "token 300 at position 1");
}

// ---- prepare ----------------------------------------------------------------

TEST(Prepare, ShardsDecodeToTheExactSplit) {
  TempDir d;
  std::string text;
  std::mt19937 g(7);
  for (int i = 0; i < 1001; ++i) text.push_back(char(g() & 0xFF));  // every byte value, NULs included
  write_file(d / "in.txt", text);
  const auto r = prepare(d / "in.txt", d / "nested/out", 0.1, nullptr);
  // floor(0.1 * 1001) = 100 bytes of validation, taken from the end.
  EXPECT_EQ(r.bytes_read, 1001u);
  EXPECT_EQ(r.train_tokens, 901u);
  EXPECT_EQ(r.val_tokens, 100u);
  TokenDataset train(d / "nested/out/train.bin"), val(d / "nested/out/val.bin");
  EXPECT_EQ(ByteTokenizer::decode(train.tokens()), text.substr(0, 901));
  EXPECT_EQ(ByteTokenizer::decode(val.tokens()), text.substr(901));
  EXPECT_EQ(fs::file_size(d / "nested/out/train.bin"), 64u + 2 * 901);
  for (auto& e : fs::directory_iterator(d / "nested/out"))
    EXPECT_TRUE(e.path().filename() == "train.bin" || e.path().filename() == "val.bin") << e.path();

  // Preparing again over existing shards replaces them.
  write_file(d / "in2.txt", "hello, world");
  prepare(d / "in2.txt", d / "nested/out", 0.25, nullptr);  // 12 bytes: 3 for validation
  EXPECT_EQ(ByteTokenizer::decode(TokenDataset(d / "nested/out/train.bin").tokens()), "hello, wo");
  EXPECT_EQ(ByteTokenizer::decode(TokenDataset(d / "nested/out/val.bin").tokens()), "rld");
}

TEST(Prepare, BadInputsAreClearErrors) {
  TempDir d;
  write_file(d / "in.txt", "0123456789");
  write_file(d / "empty.txt", "");
  EXPECT_ERROR(prepare(d / "nope.txt", d / "o", 0.1, nullptr), "cannot read input");
  EXPECT_ERROR(prepare(d / "empty.txt", d / "o", 0.1, nullptr), "is empty");
  EXPECT_ERROR(prepare(d.path.string(), d / "o", 0.1, nullptr), "is a directory");
  for (double f : {0.0, 1.0, -0.5, 1.5, double(NAN)})
    EXPECT_ERROR(prepare(d / "in.txt", d / "o", f, nullptr), "val fraction must be in (0, 1)");
  EXPECT_ERROR(prepare(d / "in.txt", d / "o", 0.05, nullptr), "leaves no validation bytes");
  EXPECT_ERROR(prepare(d / "in.txt", d / "in.txt", 0.5, nullptr), "exists and is not a directory");
  EXPECT_FALSE(fs::exists(d / "o"));  // nothing written on error
}

// ---- DataLoader -------------------------------------------------------------

TEST(DataLoader, RowsAreShiftedWindowsCoveringAnEpoch) {
  TempDir d;
  const auto tok = random_tokens(4003, 2);
  write_shard(d / "t.bin", tok);
  TokenDataset ds(d / "t.bin");
  const int B = 4, T = 16;
  DataLoader dl(ds, B, T, 0, 1, 42);
  // K = (4003-1)/16 = 250 windows, 62 steps of 4 (2 windows left over).
  ASSERT_EQ(dl.num_windows(), 250u);
  ASSERT_EQ(dl.steps_per_epoch(), 62u);
  for (int epoch = 0; epoch < 3; ++epoch) {
    std::set<int64_t> starts;
    for (int s = 0; s < 62; ++s) {
      EXPECT_EQ(dl.state().epoch, uint64_t(epoch));
      EXPECT_EQ(dl.state().step, uint64_t(s));
      Batch b;
      dl.next(b);
      ASSERT_EQ(b.B, B);
      ASSERT_EQ(b.T, T);
      for (int r = 0; r < B; ++r) {
        const int64_t at = find_row(tok, b, r);
        ASSERT_GE(at, 0);
        ASSERT_LE(at + T + 1, int64_t(tok.size()));
        for (int t = 0; t < T; ++t) ASSERT_EQ(b.targets[r * T + t], tok[at + t + 1]);
        starts.insert(at);
      }
    }
    // 248 distinct windows, all on one grid of stride T.
    ASSERT_EQ(starts.size(), 248u);
    for (int64_t s : starts) EXPECT_EQ(s % T, *starts.begin() % T);
    EXPECT_LE(*starts.begin() % T, int64_t(4003 - 1 - 250 * 16));  // offset within the slack (2)
  }
  EXPECT_EQ(dl.state().epoch, 3u);
}

TEST(DataLoader, DeterministicPerSeedAndEpoch) {
  TempDir d;
  write_shard(d / "t.bin", random_tokens(5000, 3));
  TokenDataset ds(d / "t.bin");
  DataLoader a(ds, 3, 32, 0, 1, 7), b(ds, 3, 32, 0, 1, 7), c(ds, 3, 32, 0, 1, 8);
  const size_t spe = a.steps_per_epoch();
  std::vector<std::vector<int32_t>> epoch0, epoch1;
  bool seed_differs = false;
  for (size_t s = 0; s < 2 * spe; ++s) {
    Batch ba, bb, bc;
    a.next(ba);
    b.next(bb);
    c.next(bc);
    ASSERT_EQ(rows(ba), rows(bb)) << s;
    ASSERT_EQ(targets(ba), targets(bb)) << s;
    seed_differs |= rows(ba) != rows(bc);
    (s < spe ? epoch0 : epoch1).push_back(rows(ba));
  }
  EXPECT_TRUE(seed_differs);
  EXPECT_EQ(epoch0.size(), epoch1.size());
  EXPECT_NE(epoch0, epoch1) << "epoch 1 repeats epoch 0's order";
}

TEST(DataLoader, RankSlicesPartitionTheGlobalBatch) {
  TempDir d;
  write_shard(d / "t.bin", random_tokens(3000, 4));
  TokenDataset ds(d / "t.bin");
  const int W = 3, B = 2, T = 20;
  DataLoader global(ds, W * B, T, 0, 1, 11);
  std::vector<DataLoader> ranks;
  for (int r = 0; r < W; ++r) ranks.emplace_back(ds, B, T, r, W, 11);
  ASSERT_EQ(global.steps_per_epoch(), ranks[0].steps_per_epoch());
  const auto tok = std::vector<uint16_t>(ds.tokens().begin(), ds.tokens().end());
  for (size_t s = 0; s < 2 * global.steps_per_epoch() + 3; ++s) {
    Batch g;
    global.next(g);
    std::vector<int32_t> in, tg;
    std::set<int64_t> starts;
    for (int r = 0; r < W; ++r) {
      Batch br;
      ranks[r].next(br);
      ASSERT_EQ(br.B, B);
      in.insert(in.end(), br.inputs, br.inputs + B * T);
      tg.insert(tg.end(), br.targets, br.targets + B * T);
      for (int row = 0; row < B; ++row) starts.insert(find_row(tok, br, row));
    }
    ASSERT_EQ(in, rows(g)) << "step " << s;  // rank r = rows r*B..r*B+B-1, in order
    ASSERT_EQ(tg, targets(g)) << "step " << s;
    ASSERT_EQ(starts.size(), size_t(W * B)) << "ranks' rows overlap at step " << s;
  }
}

TEST(DataLoader, StateRestoreContinuesExactly) {
  TempDir d;
  write_shard(d / "t.bin", random_tokens(2000, 5));
  TokenDataset ds(d / "t.bin");
  DataLoader a(ds, 2, 16, 1, 2, 99);
  const size_t spe = a.steps_per_epoch();
  EXPECT_EQ(a.state(), (DataLoaderState{0, 0, 99, 16, 4, 2000}));
  Batch b;
  for (size_t s = 0; s < spe + 5; ++s) a.next(b);
  EXPECT_EQ(a.state().epoch, 1u);
  EXPECT_EQ(a.state().step, 5u);
  // Through JSON text, as a checkpoint would store it.
  const std::string saved = nlohmann::json(a.state()).dump();
  DataLoader r(ds, 2, 16, 1, 2, 99);
  r.set_state(nlohmann::json::parse(saved).get<DataLoaderState>());
  // Same global batch from another (world_size, B): rank 0 of 1 with B=4 sees
  // rows 2..3 of it as rows 2..3 of its own.
  DataLoader other(ds, 4, 16, 0, 1, 99);
  other.set_state(nlohmann::json::parse(saved).get<DataLoaderState>());
  for (size_t s = 0; s < 2 * spe; ++s) {
    Batch x, y, z;
    a.next(x);
    r.next(y);
    other.next(z);
    ASSERT_EQ(rows(x), rows(y)) << s;
    ASSERT_EQ(targets(x), targets(y)) << s;
    ASSERT_TRUE(std::equal(x.inputs, x.inputs + 2 * 16, z.inputs + 2 * 16)) << s;
  }
  EXPECT_EQ(a.state(), r.state());

  DataLoaderState s = a.state();
  DataLoader wrong_seed(ds, 2, 16, 1, 2, 98), wrong_T(ds, 2, 17, 1, 2, 99), wrong_G(ds, 3, 16, 1, 2, 99);
  EXPECT_ERROR(wrong_seed.set_state(s), "saved with seed 99, this loader has seed 98");
  EXPECT_ERROR(wrong_T.set_state(s), "saved with T=16");
  EXPECT_ERROR(wrong_G.set_state(s), "global batch world_size*B = 4, this loader has 6");
  s.step = spe;
  EXPECT_ERROR(a.set_state(s), "an epoch has only");
  s = a.state();
  s.dataset_tokens = 1999;
  EXPECT_ERROR(a.set_state(s), "shard of 1999 tokens");
  EXPECT_ERROR(nlohmann::json::parse(R"({"epoch": 1, "step": 2})").get<DataLoaderState>(), "needs integer \"seed\"");
}

TEST(DataLoader, GeometryErrors) {
  TempDir d;
  write_shard(d / "t.bin", random_tokens(65, 6));
  TokenDataset ds(d / "t.bin");
  // 65 tokens = exactly one window of 64+1: fine.
  EXPECT_EQ(error_of([&] { DataLoader(ds, 1, 64, 0, 1, 0); }), "");
  EXPECT_ERROR(DataLoader(ds, 1, 65, 0, 1, 0), "has 65 tokens; one sequence of T=65 needs T+1 = 66");
  EXPECT_ERROR(DataLoader(ds, 1, 64, 0, 2, 0), "fewer than one global batch of world_size*B = 2*1 = 2");
  EXPECT_ERROR(DataLoader(ds, 0, 8, 0, 1, 0), "batch size B must be >= 1");
  EXPECT_ERROR(DataLoader(ds, 1, 0, 0, 1, 0), "sequence length T must be >= 1");
  EXPECT_ERROR(DataLoader(ds, 1, 8, 2, 2, 0), "rank 2 is outside [0, world_size=2)");
}

// ---- EvalLoader -------------------------------------------------------------

TEST(EvalLoader, SameBatchesEveryPassInFixedWindows) {
  TempDir d;
  const auto tok = random_tokens(1000, 8);
  write_shard(d / "v.bin", tok);
  TokenDataset ds(d / "v.bin");
  const int W = 2, B = 2, T = 10, E = 3;
  // (1000-1)/10 = 99 windows, 24 batches of 4.
  EXPECT_EQ(EvalLoader::max_batches(1000, B, T, W), 24);
  EXPECT_EQ(EvalLoader::max_batches(10, B, T, W), 0);
  for (int r = 0; r < W; ++r) {
    EvalLoader ev(ds, B, T, r, W, E);
    std::vector<std::vector<int32_t>> pass1;
    Batch b;
    for (int i = 0; i < E; ++i) {
      ASSERT_TRUE(ev.next(b));
      for (int row = 0; row < B; ++row) {
        const size_t start = size_t((i * W + r) * B + row) * T;  // window i*G + r*B + row
        for (int t = 0; t < T; ++t) {
          ASSERT_EQ(b.inputs[row * T + t], tok[start + t]);
          ASSERT_EQ(b.targets[row * T + t], tok[start + t + 1]);
        }
      }
      pass1.push_back(rows(b));
    }
    EXPECT_FALSE(ev.next(b));
    EXPECT_FALSE(ev.next(b));
    ev.reset();
    for (int i = 0; i < E; ++i) {
      ASSERT_TRUE(ev.next(b));
      EXPECT_EQ(rows(b), pass1[i]);
    }
    EXPECT_FALSE(ev.next(b));
  }
  EXPECT_ERROR(EvalLoader(ds, B, T, 0, W, 25), "room for 24 eval batches");
  EXPECT_ERROR(EvalLoader(ds, B, T, 0, W, 0), "eval_batches must be >= 1");
}

// ---- mxdp prepare -----------------------------------------------------------

TEST(PrepareCli, WritesShardsAndReportsErrors) {
  TempDir d;
  write_file(d / "in.txt", "In the beginning God created the heaven and the earth.\n");  // 55 bytes
  write_file(d / "empty.txt", "");
  const std::string out = d / "log.txt";
  auto q = [](const std::string& s) { return "'" + s + "'"; };

  auto r = run_mxdp("prepare --input " + q(d / "in.txt") + " --output " + q(d / "o") + " --val-fraction 0.2", out);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "read 55 bytes")) << r.output;
  EXPECT_TRUE(contains(r.output, "train.bin: 44 tokens")) << r.output;  // 55 - floor(11.0)
  EXPECT_TRUE(contains(r.output, "val.bin: 11 tokens")) << r.output;
  EXPECT_EQ(ByteTokenizer::decode(TokenDataset(d / "o/val.bin").tokens()), "the earth.\n");

  r = run_mxdp("prepare --input " + q(d / "missing.txt") + " --output " + q(d / "o2"), out);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(contains(r.output, "mxdp: error: ") && contains(r.output, "cannot read input")) << r.output;
  r = run_mxdp("prepare --input " + q(d / "empty.txt") + " --output " + q(d / "o2"), out);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(contains(r.output, "is empty")) << r.output;
  r = run_mxdp("prepare --input " + q(d / "in.txt") + " --output " + q(d / "o2") + " --val-fraction 1", out);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(contains(r.output, "val fraction must be in (0, 1), got 1")) << r.output;
  r = run_mxdp("prepare --input " + q(d / "in.txt"), out);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(contains(r.output, "--output is required")) << r.output;
  EXPECT_FALSE(fs::exists(d / "o2"));
}

// The default corpus is in the repository and prepares as documented.
TEST(DefaultCorpus, IsPlainAsciiUnderThreeMegabytes) {
  const std::string p = std::string(MXDP_SOURCE_DIR) + "/data/kjv.txt";
  ASSERT_TRUE(fs::exists(p)) << p;
  const std::string text = read_file(p);
  EXPECT_EQ(text.size(), 2336980u);  // as recorded in data/README.md
  EXPECT_LT(text.size(), 3u << 20);
  EXPECT_TRUE(std::all_of(text.begin(), text.end(), [](char c) { return (unsigned char)c < 128; }));
  EXPECT_EQ(text.rfind("Genesis 1\n\nIn the beginning God created the heaven and the earth.\n", 0), 0u);
}
