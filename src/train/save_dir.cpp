#include "train/save_dir.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <ctime>
#include <filesystem>
#include <fmt/format.h>
#include <functional>
#include <vector>

#include "io/checkpoint.h"
#include "io/fileio.h"
#include "util/check.h"

namespace mxdp {

namespace fs = std::filesystem;

namespace {

std::string host_name() {
  char h[256] = {0};
  if (::gethostname(h, sizeof h - 1) != 0) return "?";
  return h;
}

std::string now_text() {
  const std::time_t t = std::time(nullptr);
  std::tm tm {};
  ::localtime_r(&t, &tm);
  char b[64];
  std::strftime(b, sizeof b, "%Y-%m-%d %H:%M:%S %z", &tm);
  return b;
}

// The holder a lock file names, as one line ("pid 123 on host h, started ...").
std::string holder_of(int fd) {
  std::string text(4096, '\0');
  const ssize_t n = ::pread(fd, text.data(), text.size(), 0);
  text.resize(n > 0 ? size_t(n) : 0);
  std::string out;
  for (char c : text) out += c == '\n' ? ' ' : c;
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out.empty() ? "a job that has not written its name yet" : out;
}

}  // namespace

SaveDirLock SaveDirLock::acquire(const std::string& dir) {
  const std::string path = (fs::path(dir) / kSaveDirLockName).string();
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  MXDP_CHECK(fd >= 0, "cannot open the lock file '", path, "' of --save-dir: ", errno_text());
  SaveDirLock lock;
  lock.fd_ = fd;
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int e = errno;
    MXDP_CHECK(e == EWOULDBLOCK, "cannot lock '", path, "': ", std::strerror(e));
    MXDP_FAIL("--save-dir '", dir, "' is in use by another job (", holder_of(fd), "; lock file ", path,
              "). One job at a time per save directory: wait for it to end, stop it, or pass another --save-dir");
  }
  // Ours: say who holds it.
  const std::string text = ::fmt::format("pid {} on host {}, started {}\n", ::getpid(), host_name(), now_text());
  MXDP_CHECK(::ftruncate(fd, 0) == 0 && ::pwrite(fd, text.data(), text.size(), 0) == ssize_t(text.size()) &&
                 ::fsync(fd) == 0,
             "cannot write the lock file '", path, "': ", errno_text());
  return lock;
}

SaveDirLock& SaveDirLock::operator=(SaveDirLock&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

SaveDirLock::~SaveDirLock() {
  if (fd_ >= 0) ::close(fd_);  // closing the last descriptor releases the flock
}

void probe_save_dir(const std::string& dir) {
  try {
    create_directories(dir);
    const std::string probe =
        (fs::path(dir) / ::fmt::format(".mxdp-probe.{}.{}", host_name(), ::getpid())).string();
    File f = File::create(probe);
    const char bytes[] = "mxdp checks that it can write here\n";
    f.write(bytes, sizeof bytes - 1);
    f.sync();
    f.close();
    MXDP_CHECK(::unlink(probe.c_str()) == 0, "cannot remove '", probe, "': ", errno_text());
    sync_directory(dir);
  } catch (const Error& e) {
    MXDP_FAIL("--save-dir '", dir, "' is not usable, so no checkpoint could be saved: ", e.what());
  }
}

std::string newest_checkpoint_in(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return "";
  if (fs::exists(fs::path(dir) / "latest", ec)) {
    const std::vector<uint8_t> b = read_file((fs::path(dir) / "latest").string(), 4096);
    std::string name(b.begin(), b.end());
    while (!name.empty() && (name.back() == '\n' || name.back() == '\r' || name.back() == ' ')) name.pop_back();
    if (!name.empty()) return name;
  }
  std::string best;
  int64_t best_step = -1;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    const int64_t s = checkpoint_step(name);
    if (s > best_step) best_step = s, best = name;
  }
  return best;
}

}  // namespace mxdp
