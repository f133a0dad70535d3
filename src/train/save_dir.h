// A job's save directory (--save-dir), issue 21: found usable before the
// first step, and one job's alone for the job's whole life.
//
//   probe: create it, write, fsync and remove a probe file, on every rank (each
//          writes its pieces of a checkpoint there), so that a read-only mount or
//          a path under a regular file stops the job at start, not at its final save.
//   lock:  rank 0 holds an flock(2) on <dir>/.mxdp-lock from start to exit; the
//          file says who holds it (host, pid, start time). A second job on the
//          same directory is refused with a message naming the holder. The kernel
//          releases the lock when its process ends however it ends (kill -9
//          included), so holding it also proves that no writer of the temporaries
//          an interrupted save left is still alive: only then are they removed.
#pragma once

#include <string>

#include "util/check.h"

namespace mxdp {

// Name of the lock file in a save directory.
inline constexpr const char* kSaveDirLockName = ".mxdp-lock";

class SaveDirLock {
 public:
  SaveDirLock() = default;
  // Takes the lock of `dir` (which must exist), or throws an Error naming the
  // job that holds it.
  static SaveDirLock acquire(const std::string& dir);
  SaveDirLock(SaveDirLock&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  SaveDirLock& operator=(SaveDirLock&& o) noexcept;
  SaveDirLock(const SaveDirLock&) = delete;
  SaveDirLock& operator=(const SaveDirLock&) = delete;
  ~SaveDirLock();  // releases it (the file stays, naming its last holder)
  bool held() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

// Creates `dir` and writes, syncs and removes a probe file in it; an Error
// saying what failed otherwise.
void probe_save_dir(const std::string& dir);

// The checkpoint a save directory's `latest` names, else its newest
// step_NNNNNN.ckpt entry, else "" (no checkpoint there, or no directory).
std::string newest_checkpoint_in(const std::string& dir);

}  // namespace mxdp
