// Checkpoint files: round trip, and every way a file can be bad is a clear error;
// a failed save leaves the previous checkpoint intact.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>

#include "util/check.h"
#include "io/checkpoint.h"

using namespace mxdp;
namespace fs = std::filesystem;

namespace {
CheckpointData sample() {
  CheckpointData c;
  c.version = 7;
  c.iteration = 9;
  c.extra = {{"data", {{"epoch", 1}}}, {"seed", 5}};
  for (int p = 0; p < 3; ++p) {
    ParamState s{"p" + std::to_string(p), {2, int64_t(3 + p)}, {}, {}, {}};
    for (int i = 0; i < 2 * (3 + p); ++i) {
      s.master.push_back(0.5f * i + p);
      s.m.push_back(-1.0f * i);
      s.v.push_back(0.25f * i * i);
    }
    c.params.push_back(s);
  }
  return c;
}
std::string error_of(const std::vector<uint8_t>& b) {
  try {
    deserialize_checkpoint(b, "x.ckpt");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}
struct TmpDir {
  fs::path p = fs::temp_directory_path() / ("mxdp_ckpt_test_" + std::to_string(::getpid()));
  TmpDir() { fs::create_directories(p); }
  ~TmpDir() { fs::remove_all(p); }
};
}  // namespace

TEST(Checkpoint, RoundTrip) {
  auto c = sample();
  auto d = deserialize_checkpoint(serialize_checkpoint(c), "mem");
  EXPECT_EQ(d.version, 7);
  EXPECT_EQ(d.iteration, 9);
  EXPECT_EQ(d.extra, c.extra);
  ASSERT_EQ(d.params.size(), 3u);
  for (int p = 0; p < 3; ++p) {
    EXPECT_EQ(d.params[p].name, c.params[p].name);
    EXPECT_EQ(d.params[p].shape, c.params[p].shape);
    EXPECT_EQ(d.params[p].master, c.params[p].master);
    EXPECT_EQ(d.params[p].m, c.params[p].m);
    EXPECT_EQ(d.params[p].v, c.params[p].v);
  }
}

TEST(Checkpoint, CorruptTruncatedAndForeignFilesAreClearErrors) {
  auto good = serialize_checkpoint(sample());
  auto flipped = good;
  flipped[good.size() / 2] ^= 0x10;
  EXPECT_NE(error_of(flipped).find("checksum mismatch"), std::string::npos) << error_of(flipped);
  for (size_t keep : {size_t(0), size_t(10), size_t(40), good.size() / 2, good.size() - 1}) {
    std::vector<uint8_t> t(good.begin(), good.begin() + keep);
    std::string e = error_of(t);
    EXPECT_NE(e, "") << "truncated to " << keep;
    EXPECT_NE(e.find("x.ckpt"), std::string::npos) << e;
  }
  auto foreign = good;
  foreign[0] = 'Z';
  EXPECT_NE(error_of(foreign).find("not an mxdp checkpoint"), std::string::npos);
  auto newer = good;
  newer[8] = 99;  // format version
  EXPECT_NE(error_of(newer).find("format version"), std::string::npos);
}

TEST(Checkpoint, AtomicWriteAndFailedSaveKeepsPrevious) {
  TmpDir d;
  const std::string path = (d.p / "step.ckpt").string();
  auto first = serialize_checkpoint(sample());
  write_file_atomic(path, first);
  EXPECT_EQ(read_file(path), first);
  // A save that cannot complete (the target's place is taken by a non-empty
  // directory, so rename fails) reports an error and leaves no temporary file.
  const std::string blocked = (d.p / "blocked.ckpt").string();
  fs::create_directories(fs::path(blocked) / "child");
  EXPECT_THROW(write_file_atomic(blocked, first), Error);
  for (auto& e : fs::directory_iterator(d.p))
    EXPECT_EQ(e.path().string().find(".tmp."), std::string::npos) << e.path();
  // Overwriting keeps the file whole at every moment: old or new, never mixed.
  auto c2 = sample();
  c2.version = 8;
  write_file_atomic(path, serialize_checkpoint(c2));
  EXPECT_EQ(read_checkpoint(path).version, 8);
  EXPECT_THROW(read_file((d.p / "missing.ckpt").string()), Error);
}

// ---- untrusted files (issue 12, point 7) ------------------------------------------
// Inputs built here byte by byte, with a valid checksum, so that the reader gets
// past the checksum to the lengths, counts and shapes it must not trust.

namespace {
template <class T>
void put_le(std::vector<uint8_t>& b, T x) {
  for (size_t i = 0; i < sizeof(T); ++i) b.push_back(uint8_t(uint64_t(x) >> (8 * i)));
}
// A container: magic, version, reserved, meta_len (as given), meta, tail, checksum.
std::vector<uint8_t> container_bytes(uint32_t version, uint64_t meta_len, const std::string& meta,
                                     const std::vector<uint8_t>& tail = {}) {
  std::vector<uint8_t> b = {'M', 'X', 'D', 'P', 'C', 'K', 'P', 'T'};
  put_le<uint32_t>(b, version);
  put_le<uint32_t>(b, 0);
  put_le<uint64_t>(b, meta_len);
  b.insert(b.end(), meta.begin(), meta.end());
  b.insert(b.end(), tail.begin(), tail.end());
  put_le<uint64_t>(b, fnv1a64(b.data(), b.size()));
  return b;
}
// The message of the mxdp::Error deserializing `b` throws; fails the test on any other exception.
std::string v1_error(const std::vector<uint8_t>& b) {
  try {
    deserialize_checkpoint(b, "x.ckpt");
  } catch (const Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not an mxdp::Error: " << e.what();
    return e.what();
  }
  return "";
}
void expect_clear(const std::string& e, const std::string& about) {
  EXPECT_NE(e, "") << about << ": accepted";
  EXPECT_NE(e.find("x.ckpt"), std::string::npos) << about << ": the message should name the file: " << e;
  EXPECT_EQ(e.find("json.exception"), std::string::npos) << about << ": library text in: " << e;
}
}  // namespace

TEST(CheckpointUntrusted, MetadataLengthNear2To64IsRefused) {
  // 38 bytes: a metadata length of 2^64 - 10 would wrap `pos + len <= size`.
  const auto b = container_bytes(1, ~uint64_t(0) - 9, "{\"a\":1");
  ASSERT_EQ(b.size(), 38u);
  const std::string e = v1_error(b);
  expect_clear(e, "huge meta_len");
  EXPECT_NE(e.find("metadata length"), std::string::npos) << e;
  EXPECT_EQ(e.find("{\"a\":1"), std::string::npos) << "no bytes of (or beyond) the file quoted: " << e;
}

TEST(CheckpointUntrusted, OverflowingOrNegativeShapesAreRefused) {
  for (const char* shape : {"[4294967296, 4294967296]", "[-1]", "[4611686018427387904]", "[0]", "[]", "[2.5]",
                            "[\"x\"]", "[1,1,1,1,1,1,1,1,1]", "5"}) {
    const std::string meta =
        std::string("{\"version\":1,\"iteration\":1,\"extra\":{},\"params\":[{\"name\":\"w\",\"shape\":") + shape + "}]}";
    const std::string e = v1_error(container_bytes(1, meta.size(), meta));
    expect_clear(e, shape);
  }
  // A shape that fits but whose tensors are not in the file.
  const std::string meta = R"({"version":1,"iteration":1,"extra":{},"params":[{"name":"w","shape":[1000,1000]}]})";
  const std::string e = v1_error(container_bytes(1, meta.size(), meta, std::vector<uint8_t>(64, 0)));
  expect_clear(e, "missing tensors");
  EXPECT_NE(e.find("truncated"), std::string::npos) << e;
}

TEST(CheckpointUntrusted, WrongJsonTypesAndSyntaxAreMxdpErrors) {
  for (const std::string& meta : {std::string(R"({"version":"seven","iteration":1,"params":[]})"),
                                 std::string(R"({"version":1,"iteration":-3,"params":[]})"),
                                 std::string(R"({"version":1,"iteration":1,"params":5})"),
                                 std::string(R"({"version":1,"iteration":1,"params":[{"name":3,"shape":[1]}]})"),
                                 std::string(R"({"version":1,"iteration":1,"params":[7]})"),
                                 std::string(R"({"version":1,"iteration":1,"params":[],"extra":[1]})"),
                                 std::string(R"([1,2,3])"), std::string(R"({"version":1,)"), std::string("\xff\xfe"),
                                 std::string(R"({"version":1e999})"), std::string(20000, '[')})
    expect_clear(v1_error(container_bytes(1, meta.size(), meta)), meta.substr(0, 40));
}

// ---- step directories ---------------------------------------------------------------
// Written here with RankFileWriter as two ranks would (pieces cut through params
// at arbitrary places), read back whole and by arbitrary ranges, then damaged.

namespace {
// Element e of tensor t of param p: distinct everywhere, exact in fp32.
float value(int p, int t, int64_t e) { return float(p * 100000 + t * 10000 + e) * 0.5f; }

struct StepDir {
  std::string dir;
  CheckpointManifest m;
};

// Params {10}, {4, 8}, {3}; file 0 holds w0[0,4) w1[20,32) w2[0,3); file 1 holds w1[0,20) w0[4,10).
StepDir write_step_dir(const fs::path& root, const std::string& name, float scale = 1.0f,
                       std::vector<std::vector<StoredPiece>> files = {}) {
  StepDir s;
  s.dir = (root / name).string();
  fs::create_directories(s.dir);
  s.m.version = 5;
  s.m.iteration = 6;
  s.m.extra = {{"data", {{"epoch", 2}}}, {"note", name}};
  s.m.params = {{"w0", {10}, 10}, {"w1", {4, 8}, 32}, {"w2", {3}, 3}};
  s.m.chunk_bytes = 64;  // many chunks, so that ranges cross chunk boundaries
  if (files.empty()) files = {{{0, 0, 4}, {1, 20, 12}, {2, 0, 3}}, {{1, 0, 20}, {0, 4, 6}}};
  for (int r = 0; r < int(files.size()); ++r) {
    RankFileWriter w((fs::path(s.dir) / rank_file_name(r)).string(), r, files[r], s.m.chunk_bytes);
    for (const StoredPiece& pc : files[r])
      for (int t = 0; t < 3; ++t)
        for (int64_t e = pc.begin; e < pc.begin + pc.len; ++e) {
          const float x = value(int(pc.param), t, e) * scale;
          w.append(&x, 1);
        }
    s.m.files.push_back(w.finish());
  }
  const auto bytes = serialize_manifest(s.m);
  write_file_atomic((fs::path(s.dir) / kManifestName).string(), bytes);
  return s;
}

std::string dir_error(const std::string& dir) {
  try {
    read_checkpoint(dir);
  } catch (const Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not an mxdp::Error: " << e.what();
  }
  return "";
}

void flip_byte(const std::string& path, uint64_t at) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(std::streamoff(at));
  char c = 0;
  f.read(&c, 1);
  c ^= 0x20;
  f.seekp(std::streamoff(at));
  f.write(&c, 1);
}
}  // namespace

TEST(StepDirectory, RoundTripWholeAndByRanges) {
  TmpDir d;
  const StepDir s = write_step_dir(d.p, "a.ckpt");
  EXPECT_TRUE(is_step_directory(s.dir));
  const CheckpointData c = read_checkpoint(s.dir);
  EXPECT_EQ(c.version, 5);
  EXPECT_EQ(c.iteration, 6);
  EXPECT_EQ(c.extra, s.m.extra);
  ASSERT_EQ(c.params.size(), 3u);
  for (int p = 0; p < 3; ++p) {
    EXPECT_EQ(c.params[p].name, s.m.params[p].name);
    EXPECT_EQ(c.params[p].shape, s.m.params[p].shape);
    int t = 0;
    for (const auto* v : {&c.params[p].master, &c.params[p].m, &c.params[p].v}) {
      ASSERT_EQ(int64_t(v->size()), s.m.params[p].numel);
      for (int64_t e = 0; e < s.m.params[p].numel; ++e) EXPECT_EQ((*v)[e], value(p, t, e)) << p << " " << t << " " << e;
      ++t;
    }
  }
  EXPECT_TRUE(read_checkpoint(s.dir, /*moments=*/false).params[1].m.empty());
  // Every range of w1 (which two files share, cut at 20), every tensor.
  CheckpointReader r(s.dir, read_manifest(s.dir));
  for (int64_t b = 0; b < 32; ++b)
    for (int64_t n = 0; b + n <= 32; n += 5)
      for (int t = 0; t < 3; ++t) {
        std::vector<float> out(size_t(n), -1.0f);
        r.read(1, b, n, t, out.data());
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(out[i], value(1, t, b + i)) << b << "+" << i;
      }
  EXPECT_EQ(read_checkpoint_info(s.dir).iteration, 6);
}

TEST(StepDirectory, DamagedOrForeignFilesAreClearErrors) {
  TmpDir d;
  const StepDir good = write_step_dir(d.p, "good.ckpt");
  const StepDir other = write_step_dir(d.p, "other.ckpt", 2.0f);
  auto copy = [&](const std::string& name) {
    const std::string to = (d.p / name).string();
    fs::copy(good.dir, to);
    return to;
  };
  struct Case {
    std::string name, expect;
    std::function<void(const std::string&)> damage;
  };
  const std::vector<Case> cases = {
      {"flipped", "checksum mismatch in data chunk",
       [](const std::string& c) { flip_byte(c + "/rank_00001.bin", fs::file_size(c + "/rank_00001.bin") - 5); }},
      {"header", "header checksum mismatch", [](const std::string& c) { flip_byte(c + "/rank_00000.bin", 40 + 3 * 24 + 1); }},  // a chunk checksum
      {"truncated", "truncated",
       [](const std::string& c) { fs::resize_file(c + "/rank_00001.bin", fs::file_size(c + "/rank_00001.bin") - 4); }},
      {"missing", "cannot open", [](const std::string& c) { fs::remove(c + "/rank_00000.bin"); }},
      {"foreign", "another checkpoint",
       [&](const std::string& c) { fs::copy_file(other.dir + "/rank_00001.bin", c + "/rank_00001.bin",
                                                 fs::copy_options::overwrite_existing); }},
      {"manifest", "checksum mismatch", [](const std::string& c) { flip_byte(c + "/manifest", 40); }},
      {"no_manifest", "without a manifest", [](const std::string& c) { fs::remove(c + "/manifest"); }},
  };
  for (const Case& k : cases) {
    const std::string c = copy(k.name + ".ckpt");
    k.damage(c);
    const std::string e = dir_error(c);
    EXPECT_NE(e.find(k.expect), std::string::npos) << k.name << ": " << e;
    EXPECT_NE(e.find(c), std::string::npos) << k.name << ": the message should name the file: " << e;
  }
}

TEST(StepDirectory, ManifestAndPiecesAreNotTrusted) {
  TmpDir d;
  // A file name from the manifest is never a path.
  StepDir s = write_step_dir(d.p, "names.ckpt");
  s.m.files[1].name = "../good.ckpt/rank_00001.bin";
  write_file_atomic(s.dir + "/manifest", serialize_manifest(s.m));
  EXPECT_NE(dir_error(s.dir).find("expected 'rank_00001.bin'"), std::string::npos) << dir_error(s.dir);
  // Pieces that overlap, and pieces that leave a gap.
  const StepDir overlap = write_step_dir(d.p, "overlap.ckpt", 1.0f, {{{0, 0, 6}, {1, 0, 32}, {2, 0, 3}}, {{0, 4, 6}}});
  EXPECT_NE(dir_error(overlap.dir).find("also held by another piece"), std::string::npos) << dir_error(overlap.dir);
  const StepDir gap = write_step_dir(d.p, "gap.ckpt", 1.0f, {{{0, 0, 4}, {1, 0, 32}, {2, 0, 3}}, {{0, 5, 5}}});
  EXPECT_NE(dir_error(gap.dir).find("incomplete"), std::string::npos) << dir_error(gap.dir);
  // A piece beyond its param, in a header whose checksum is valid.
  std::string e;
  try {
    RankFileWriter w((d.p / "bad.bin").string(), 0, {{0, 8, 4}}, 64);
    for (int i = 0; i < 12; ++i) {
      const float x = 0;
      w.append(&x, 1);
    }
    w.finish();
    const auto bytes = read_file((d.p / "bad.bin").string());
    parse_rank_file_header(bytes, bytes.size(), {{"w0", {10}, 10}}, "bad.bin");
  } catch (const Error& err) {
    e = err.what();
  }
  EXPECT_NE(e.find("which has 10"), std::string::npos) << e;
  // Counts near 2^64 in a header with a valid checksum.
  for (int field : {16, 24, 32}) {
    std::vector<uint8_t> h = {'M', 'X', 'D', 'P', 'S', 'H', 'R', 'D'};
    put_le<uint32_t>(h, 1);
    put_le<uint32_t>(h, 0);
    for (int f = 16; f <= 32; f += 8) put_le<uint64_t>(h, f == field ? ~uint64_t(0) / (f == 24 ? 1 : 3) : 1);
    put_le<uint64_t>(h, fnv1a64(h.data(), h.size()));
    std::string msg;
    try {
      parse_rank_file_header(h, h.size(), {{"w0", {10}, 10}}, "h.bin");
    } catch (const Error& err) {
      msg = err.what();
    }
    EXPECT_NE(msg.find("h.bin"), std::string::npos) << "field at " << field << ": " << msg;
  }
}

TEST(StepDirectory, CommitReplacesAtomicallyAndSaveDirHousekeeping) {
  TmpDir d;
  const StepDir a = write_step_dir(d.p, "staged_a");
  commit_directory(a.dir, (d.p / "step_000001.ckpt").string());
  EXPECT_FALSE(fs::exists(a.dir));
  EXPECT_EQ(read_checkpoint((d.p / "step_000001.ckpt").string()).extra["note"], "staged_a");
  const StepDir b = write_step_dir(d.p, "staged_b");
  commit_directory(b.dir, (d.p / "step_000001.ckpt").string());  // replaces the older one
  EXPECT_EQ(read_checkpoint((d.p / "step_000001.ckpt").string()).extra["note"], "staged_b");
  EXPECT_FALSE(fs::exists(b.dir));
  EXPECT_EQ(checkpoint_name(12), "step_000012.ckpt");
  EXPECT_EQ(checkpoint_step("step_000012.ckpt"), 12);
  EXPECT_EQ(checkpoint_step("step_12.ckpt"), 12);
  for (const char* no : {"step_.ckpt", "step_1x.ckpt", "latest", "step_000012.ckpt.tmp.5", "xstep_1.ckpt"})
    EXPECT_EQ(checkpoint_step(no), -1) << no;
  fs::create_directories(d.p / "step_000002.ckpt.tmp.77");
  std::ofstream(d.p / "latest.tmp.9") << "x";
  std::ofstream(d.p / "mine.tmp.9") << "x";   // not ours: kept
  std::ofstream(d.p / "step_3.ckpt.tmp.x") << "x";  // no pid: kept
  EXPECT_EQ(remove_stale_temporaries(d.p.string()), (std::vector<std::string>{"latest.tmp.9", "step_000002.ckpt.tmp.77"}));
  EXPECT_TRUE(fs::exists(d.p / "mine.tmp.9"));
  EXPECT_TRUE(fs::exists(d.p / "step_3.ckpt.tmp.x"));
  for (int s : {3, 10, 7}) fs::create_directories(d.p / checkpoint_name(s));
  EXPECT_EQ(remove_old_checkpoints(d.p.string(), 2, "step_000003.ckpt"),
            (std::vector<std::string>{"step_000001.ckpt"}));  // 1 goes; 3 is protected; 7 and 10 are the newest
  EXPECT_EQ(remove_old_checkpoints(d.p.string(), 0, ""), std::vector<std::string>{}) << "0 keeps all";
}
