// Checked file I/O (fileio.h): a write that fails is an mxdp::Error naming the
// path and the system's reason, and an atomic write that fails leaves neither a
// partial file nor its temporary behind. /dev/full fails every write with ENOSPC,
// as a full disk does.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "util/check.h"
#include "io/fileio.h"
#include "tmpdir_util.h"

using namespace mxdp;
using mxdp::testing::error_of;
namespace fs = std::filesystem;

TEST(FileIo, FullDiskIsAnErrorWithPathAndReason) {
  const std::string e = error_of([] {
    File f = File::create("/dev/full");
    const std::string line(100, 'x');
    f.write(line.data(), line.size());
    f.close();
  });
  EXPECT_NE(e.find("/dev/full"), std::string::npos) << e;
  EXPECT_NE(e.find("No space left on device"), std::string::npos) << e;
  const std::string a = error_of([] { File::create("/dev/full", /*append=*/true).write("y", 1); });
  EXPECT_NE(a.find("No space left on device"), std::string::npos) << a;
}

TEST(FileIo, AtomicWriteFailureLeavesNothingBehind) {
  mxdp::testing::TempDir d;
  write_file_atomic(d / "a.txt", std::string("old\n"));
  // The target's place is taken by a non-empty directory: the rename fails.
  fs::create_directories(d.path / "b.txt" / "child");
  const std::string e = error_of([&] { write_file_atomic(d / "b.txt", std::string("new\n")); });
  EXPECT_NE(e.find("b.txt"), std::string::npos) << e;
  EXPECT_NE(error_of([&] { write_file_atomic(d / "no/such/dir/c.txt", std::string("x")); }).find("no/such/dir"),
            std::string::npos);
  for (auto& entry : fs::directory_iterator(d.path))
    EXPECT_FALSE(is_temporary_name(entry.path().filename().string())) << entry.path();
  EXPECT_EQ(mxdp::testing::read_file(d / "a.txt"), "old\n");
}

TEST(FileIo, ReadsAreCheckedToo) {
  mxdp::testing::TempDir d;
  write_file_atomic(d / "f.bin", std::string("12345"));
  EXPECT_EQ(read_file(d / "f.bin").size(), 5u);
  EXPECT_NE(error_of([&] { read_file(d / "f.bin", 4); }).find("more than the 4"), std::string::npos);
  EXPECT_NE(error_of([&] { read_file(d.path.string()); }).find("not a regular file"), std::string::npos);
  EXPECT_NE(error_of([&] { read_file(d / "missing"); }).find("No such file"), std::string::npos);
  const File f = File::open_read(d / "f.bin");
  char buf[8];
  EXPECT_NE(error_of([&] { f.pread(buf, 8, 0); }).find("truncated"), std::string::npos);
  EXPECT_TRUE(is_temporary_name("step_000001.ckpt.tmp.123"));
  for (const char* no : {"x.tmp.", "x.tmp.12a", ".tmp.1", "x.tmpx.1", "plain"}) EXPECT_FALSE(is_temporary_name(no)) << no;
}
