// What the Hugging Face adapters of every architecture (models/<arch>/hf_*.cpp)
// share: reading a model's files (config.json, the safetensors: one file or
// the shards an index lists) and writing them (config.json, one
// model.safetensors). Which tensor is which param stays the adapter's.
#pragma once

#include <cstdio>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "io/safetensors.h"

namespace mxdp {

struct InferenceWeights;  // train/trained_weights.h

// The JSON file at `path`; an unreadable file or invalid JSON throws, naming it.
nlohmann::json read_json_file(const std::string& path);

// The tensors of a Hugging Face model at `path`: a .safetensors file, or a
// directory holding model.safetensors or the shards that its
// model.safetensors.index.json ({"weight_map": {tensor: file}}) lists. A
// tensor in two files is an error naming it.
class HfTensors {
 public:
  explicit HfTensors(const std::string& path);

  struct Entry {
    const SafetensorsFile* file;
    const SafeTensorInfo* info;
  };
  // Every tensor by its name in the files.
  const std::map<std::string, Entry>& by_name() const { return by_name_; }
  // A tensor of by_name() as fp32 (SafetensorsFile::read_f32).
  static std::vector<float> read_f32(const Entry& e) { return e.file->read_f32(*e.info); }

 private:
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, Entry> by_name_;
};

// A tensor to write: the prod(shape) floats at x as F32, or (bf16) rounded to
// BF16 (nearest even).
SafeTensorOut hf_tensor(std::string name, std::vector<int64_t> shape, const float* x, bool bf16);

// Writes DIR/model.safetensors (the tensors, in order) and DIR/config.json
// (`config` with "torch_dtype" and, under "mxdp", which checkpoint the
// weights are), creating DIR if missing; prints what it wrote to `log` unless null.
void write_hf_dir(const std::string& dir, const std::vector<SafeTensorOut>& tensors, nlohmann::ordered_json config,
                  const InferenceWeights& w, bool bf16, std::FILE* log);

}  // namespace mxdp
