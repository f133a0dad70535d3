// Test helper: a Hugging Face model split into two shards and an index
// (model.safetensors.index.json), as transformers' save_pretrained writes big
// models, made with the plain safetensors writer from a single
// model.safetensors (not by mxdp's exporters). Tensors alternate between the
// shards in file order.
#pragma once

#include <array>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "tmpdir_util.h"

namespace mxdp::testing {

inline std::string shard_name(int s) {
  return s == 0 ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
}

// Writes the two shards of `single` and their index into `dir` (created), and
// returns each shard's tensors (for a test that rewrites one: write_safetensors
// to dir / shard_name(s)).
inline std::array<std::vector<SafeTensorOut>, 2> write_two_shards(const std::string& single, const std::string& dir) {
  std::filesystem::create_directories(dir);
  const SafetensorsFile f(single);
  std::array<std::vector<SafeTensorOut>, 2> shard;
  nlohmann::json map;
  int i = 0;
  for (const SafeTensorInfo& t : f.tensors()) {
    const int s = i++ % 2;
    const uint8_t* b = f.data(t);
    shard[size_t(s)].push_back({t.name, t.dtype, t.shape, std::vector<uint8_t>(b, b + (t.end - t.begin))});
    map[t.name] = shard_name(s);
  }
  for (int s = 0; s < 2; ++s) write_safetensors((std::filesystem::path(dir) / shard_name(s)).string(), shard[size_t(s)], {});
  write_file((std::filesystem::path(dir) / "model.safetensors.index.json").string(),
             nlohmann::json{{"metadata", nlohmann::json::object()}, {"weight_map", map}}.dump());
  return shard;
}

}  // namespace mxdp::testing
