#include "io/fileio.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <utility>

#include "util/check.h"

namespace mxdp {

namespace fs = std::filesystem;

std::string errno_text() { return std::strerror(errno); }

File File::create(const std::string& path, bool append) {
  File f;
  f.path_ = path;
  f.fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | (append ? O_APPEND : O_TRUNC), 0644);
  if (f.fd_ < 0) MXDP_FAIL("cannot create '", path, "': ", errno_text());
  return f;
}

File File::open_read(const std::string& path) {
  File f;
  f.path_ = path;
  f.fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (f.fd_ < 0) MXDP_FAIL("cannot open '", path, "': ", errno_text());
  return f;
}

File::File(File&& o) noexcept : fd_(std::exchange(o.fd_, -1)), path_(std::move(o.path_)) {}

File& File::operator=(File&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(o.fd_, -1);
    path_ = std::move(o.path_);
  }
  return *this;
}

File::~File() {
  if (fd_ >= 0) ::close(fd_);
}

void File::write(const void* data, size_t bytes) {
  MXDP_CHECK(fd_ >= 0, "writing '", path_, "': the file is not open");
  const auto* p = static_cast<const uint8_t*>(data);
  size_t done = 0;
  while (done < bytes) {
    const ssize_t w = ::write(fd_, p + done, bytes - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0)
      MXDP_FAIL("writing '", path_, "' failed after ", done, " of ", bytes, " bytes: ",
                w == 0 ? std::string("nothing written") : errno_text());
    done += size_t(w);
  }
}

void File::pwrite(const void* data, size_t bytes, uint64_t offset) {
  MXDP_CHECK(fd_ >= 0, "writing '", path_, "': the file is not open");
  const auto* p = static_cast<const uint8_t*>(data);
  size_t done = 0;
  while (done < bytes) {
    const ssize_t w = ::pwrite(fd_, p + done, bytes - done, off_t(offset + done));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0)
      MXDP_FAIL("writing '", path_, "' at offset ", offset + done, " failed: ",
                w == 0 ? std::string("nothing written") : errno_text());
    done += size_t(w);
  }
}

void File::pread(void* out, size_t bytes, uint64_t offset) const {
  MXDP_CHECK(fd_ >= 0, "reading '", path_, "': the file is not open");
  auto* p = static_cast<uint8_t*>(out);
  size_t done = 0;
  while (done < bytes) {
    const ssize_t r = ::pread(fd_, p + done, bytes - done, off_t(offset + done));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) MXDP_FAIL("reading '", path_, "' at offset ", offset + done, " failed: ", errno_text());
    if (r == 0)
      MXDP_FAIL("'", path_, "' is truncated: reading ", bytes, " bytes at offset ", offset, " found only ", done);
    done += size_t(r);
  }
}

uint64_t File::size() const {
  struct stat st {};
  if (::fstat(fd_, &st) != 0) MXDP_FAIL("cannot stat '", path_, "': ", errno_text());
  if (!S_ISREG(st.st_mode)) MXDP_FAIL("'", path_, "' is not a regular file");
  return uint64_t(st.st_size);
}

void File::sync() {
  // /dev/full and pipes refuse fsync with EINVAL: nothing to make durable there.
  if (::fsync(fd_) != 0 && errno != EINVAL) MXDP_FAIL("flushing '", path_, "' to disk failed: ", errno_text());
}

void File::close() {
  if (fd_ < 0) return;
  const int fd = std::exchange(fd_, -1);
  if (::close(fd) != 0) MXDP_FAIL("closing '", path_, "' failed: ", errno_text());
}

std::string temporary_path(const std::string& path) { return path + ".tmp." + std::to_string(::getpid()); }

bool is_temporary_name(const std::string& name) {
  const size_t at = name.rfind(".tmp.");
  if (at == std::string::npos || at == 0 || at + 5 >= name.size()) return false;
  for (size_t i = at + 5; i < name.size(); ++i)
    if (name[i] < '0' || name[i] > '9') return false;
  return true;
}

void create_directories(const std::string& dir) {
  if (dir.empty()) return;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) MXDP_FAIL("cannot create directory '", dir, "': ", ec.message());
  if (!fs::is_directory(dir, ec)) MXDP_FAIL("'", dir, "' exists and is not a directory");
}

void sync_directory(const std::string& dir) {
  const int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) MXDP_FAIL("cannot open directory '", dir, "' to sync it: ", errno_text());
  const bool ok = ::fsync(fd) == 0 || errno == EINVAL;
  const std::string why = ok ? "" : errno_text();
  ::close(fd);
  if (!ok) MXDP_FAIL("syncing directory '", dir, "' failed: ", why);
}

void rename_path(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0)
    MXDP_FAIL("renaming '", from, "' to '", to, "' failed: ", errno_text());
}

void write_file_atomic(const std::string& path, std::span<const uint8_t> bytes) {
  write_file_atomic(path, {bytes});
}

void write_file_atomic(const std::string& path, std::initializer_list<std::span<const uint8_t>> pieces) {
  const fs::path target(path);
  const std::string dir = target.has_parent_path() ? target.parent_path().string() : ".";
  const std::string tmp = temporary_path(path);
  try {
    File f = File::create(tmp);
    for (std::span<const uint8_t> b : pieces) f.write(b.data(), b.size());
    f.sync();
    f.close();
    rename_path(tmp, path);
  } catch (...) {
    std::remove(tmp.c_str());
    throw;
  }
  sync_directory(dir);
}

void write_file_atomic(const std::string& path, const std::string& text) {
  write_file_atomic(path, std::span(reinterpret_cast<const uint8_t*>(text.data()), text.size()));
}

std::vector<uint8_t> read_file(const std::string& path, uint64_t max_bytes) {
  const File f = File::open_read(path);
  const uint64_t n = f.size();
  MXDP_CHECK(n <= max_bytes, "'", path, "' has ", n, " bytes, more than the ", max_bytes, " expected");
  std::vector<uint8_t> out(static_cast<size_t>(n));
  f.pread(out.data(), out.size(), 0);
  return out;
}

}  // namespace mxdp

namespace mxdp {

uint64_t drop_partial_last_line(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return 0;
    MXDP_FAIL("cannot open '", path, "': ", errno_text());
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  MXDP_CHECK(::fstat(fd, &st) == 0, "cannot stat '", path, "': ", errno_text());
  if (!S_ISREG(st.st_mode) || st.st_size == 0) return 0;  // a pipe, /dev/full, ...: nothing to repair
  const uint64_t size = uint64_t(st.st_size);
  // Back from the end, a block at a time, to the last newline.
  uint64_t keep = 0;
  char buf[4096];
  for (uint64_t end = size; end > 0;) {
    const uint64_t begin = end > sizeof buf ? end - sizeof buf : 0;
    const ssize_t n = ::pread(fd, buf, size_t(end - begin), off_t(begin));
    MXDP_CHECK(n == ssize_t(end - begin), "cannot read '", path, "': ", errno_text());
    if (end == size && buf[n - 1] == '\n') return 0;
    bool found = false;
    for (ssize_t i = n - 1; i >= 0; --i)
      if (buf[i] == '\n') {
        keep = begin + uint64_t(i) + 1;
        found = true;
        break;
      }
    if (found) break;
    end = begin;
  }
  MXDP_CHECK(::ftruncate(fd, off_t(keep)) == 0 && ::fsync(fd) == 0, "cannot truncate '", path,
             "' to its last whole line: ", errno_text());
  return size - keep;
}

}  // namespace mxdp
