// Checkpoint files: round trip, and every way a file can be bad is a clear error;
// a failed save leaves the previous checkpoint intact.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "check.h"
#include "checkpoint.h"

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
  EXPECT_EQ(deserialize_checkpoint(read_file(path), path).version, 8);
  EXPECT_THROW(read_file((d.p / "missing.ckpt").string()), Error);
}
