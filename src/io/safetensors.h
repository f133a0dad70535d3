// safetensors files (Hugging Face's tensor container), read and written.
//
// Layout: u64 little-endian N, then N bytes of JSON header, then the byte
// buffer. The header maps each tensor name to
//   {"dtype": "F32" | "BF16" | ..., "shape": [d0, d1, ...], "data_offsets": [begin, end]}
// with offsets relative to the start of the buffer, plus an optional
// "__metadata__" object of strings. Tensors are row-major, little-endian.
//
// Reading treats the file as untrusted: SafetensorsFile checks that N fits in
// the file (and is at most 100 MB, the reference implementation's limit), the
// header is one JSON object without duplicate names, every dtype is known,
// every shape is non-negative and its byte size (checked for overflow) equals
// end - begin, and that the tensors tile the buffer exactly: no overlap, no
// hole, nothing after the last one. Every error names the file and the tensor.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace mxdp {

struct SafeTensorInfo {
  std::string name;
  std::string dtype;            // "F32", "BF16", "F16", "F64", "I64", ...
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // byte range in the buffer
  int64_t numel() const;
};

// Bytes per element of a safetensors dtype; 0 for an unknown one.
int safetensors_dtype_size(const std::string& dtype);

class SafetensorsFile {
 public:
  // Memory-maps and validates `path`.
  explicit SafetensorsFile(const std::string& path);
  // Validates bytes held in memory; `what` names them in errors.
  SafetensorsFile(std::vector<uint8_t> bytes, const std::string& what);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return what_; }
  // In buffer order.
  const std::vector<SafeTensorInfo>& tensors() const { return tensors_; }
  // nullptr when absent.
  const SafeTensorInfo* find(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const uint8_t* data(const SafeTensorInfo& t) const { return buffer_ + t.begin; }
  // The tensor as fp32 (F32 as is; BF16 and F16 exactly widened); other
  // dtypes are an error naming the tensor.
  std::vector<float> read_f32(const SafeTensorInfo& t) const;

 private:
  void parse(const uint8_t* bytes, size_t size);
  std::string what_;
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  std::vector<uint8_t> owned_;
  const uint8_t* buffer_ = nullptr;
  std::vector<SafeTensorInfo> tensors_;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

// One tensor to write: `bytes` holds numel * dtype size bytes, little-endian.
struct SafeTensorOut {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

// Writes a safetensors file atomically (a temporary file in the same
// directory, fsync, rename): tensors in the given order, the header padded
// with spaces so that the buffer starts 8-byte aligned. Every write, the
// flush and the close are checked.
void write_safetensors(const std::string& path, const std::vector<SafeTensorOut>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace mxdp
