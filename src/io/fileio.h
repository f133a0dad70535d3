// Checked file I/O: every open, write, read, flush, sync, close and rename is
// checked, and a failure is an mxdp::Error naming the path and the system's
// reason ("No space left on device", ...). Everything mxdp writes goes through
// here: metrics, token shards, plots, checkpoints, quantized files.
//
// Atomic replacement: write_file_atomic() writes "<path>.tmp.<pid>" in the same
// directory, fsyncs it, renames it over `path` and fsyncs the directory, so a
// reader sees the old file or the new one, never a mix; a failure removes the
// temporary and leaves the old file untouched. The directory must exist. Temporaries left behind by a
// killed process are named so that is_temporary_name() recognises them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <vector>

namespace mxdp {

// A file descriptor with checked operations. Move-only; the destructor closes
// without checking (an error path is already being reported), so call close()
// when the data matters.
class File {
 public:
  // Creates or truncates `path` for writing (append: open for appending instead).
  static File create(const std::string& path, bool append = false);
  static File open_read(const std::string& path);
  File() = default;
  File(File&& o) noexcept;
  File& operator=(File&& o) noexcept;
  File(const File&) = delete;
  File& operator=(const File&) = delete;
  ~File();

  // All `bytes` or an Error (a short write is retried; EINTR is retried).
  void write(const void* data, size_t bytes);
  void pwrite(const void* data, size_t bytes, uint64_t offset);
  // Exactly `bytes` from `offset`, or an Error saying the file is shorter.
  void pread(void* out, size_t bytes, uint64_t offset) const;
  uint64_t size() const;
  void sync();   // fsync
  void close();  // checked; the File is empty afterwards
  bool is_open() const { return fd_ >= 0; }
  const std::string& path() const { return path_; }

 private:
  int fd_ = -1;
  std::string path_;
};

// The reason of the last failed system call, as text.
std::string errno_text();

// "<path>.tmp.<pid>": where write_file_atomic() and the checkpoint writer stage
// `path` before renaming it into place.
std::string temporary_path(const std::string& path);
// True for a name temporary_path() makes ("<anything>.tmp.<digits>").
bool is_temporary_name(const std::string& file_name);

void write_file_atomic(const std::string& path, std::span<const uint8_t> bytes);
// The same with the file's bytes given as pieces, written one after the other.
void write_file_atomic(const std::string& path, std::initializer_list<std::span<const uint8_t>> pieces);
void write_file_atomic(const std::string& path, const std::string& text);
// The whole file; an Error if it cannot be read or is larger than max_bytes.
std::vector<uint8_t> read_file(const std::string& path, uint64_t max_bytes = UINT64_MAX);

// Creates `dir` and its parents (an Error naming it if that fails).
void create_directories(const std::string& dir);
// fsync of a directory, so that entries created or renamed in it are durable.
void sync_directory(const std::string& dir);
// rename(2), checked.
void rename_path(const std::string& from, const std::string& to);

// A file of lines cut short (a full disk, a kill in the middle of a write)
// ends in a partial line; appending to it would glue the next line onto that
// one. Truncates `path` to its last newline (to empty if it has none) and
// returns the bytes dropped: 0 when it ends in a newline, is empty, or does not exist.
uint64_t drop_partial_last_line(const std::string& path);

}  // namespace mxdp
