// The Hugging Face adapters' shared file handling (declared in hf_files.h).
#include "models/hf_files.h"

#include <cstring>
#include <filesystem>
#include <set>

#include "formats/codec.h"
#include "io/fileio.h"
#include "train/trained_weights.h"
#include "util/check.h"

namespace mxdp {

namespace fs = std::filesystem;
using nlohmann::json;

json read_json_file(const std::string& path) {
  const std::vector<uint8_t> b = read_file(path);
  try {
    return json::parse(b.begin(), b.end());
  } catch (const std::exception& e) {
    MXDP_FAIL("'", path, "' is not valid JSON: ", e.what());
  }
}

namespace {

// The shard files model.safetensors.index.json at `index` lists, in `dir`.
std::vector<std::string> shard_paths(const fs::path& dir, const fs::path& index) {
  const json j = read_json_file(index.string());
  MXDP_CHECK(j.is_object() && j.contains("weight_map") && j["weight_map"].is_object(), "'", index.string(),
             "' has no weight_map object");
  std::set<std::string> shards;
  for (const auto& [name, file] : j["weight_map"].items()) {
    MXDP_CHECK(file.is_string(), "'", index.string(), "': the shard of '", name, "' is not a file name");
    shards.insert(file.get<std::string>());
  }
  std::vector<std::string> paths;
  for (const std::string& s : shards) {
    MXDP_CHECK(fs::path(s).filename() == fs::path(s), "'", index.string(), "': shard '", s,
               "' is not a file name in the directory");
    paths.push_back((dir / s).string());
  }
  return paths;
}

// The safetensors files of the model at `path` (HfTensors).
std::vector<std::string> safetensors_paths(const std::string& path) {
  std::error_code ec;
  if (!fs::is_directory(path, ec)) return {path};
  const fs::path single = fs::path(path) / "model.safetensors";
  if (fs::is_regular_file(single, ec)) return {single.string()};
  const fs::path index = fs::path(path) / "model.safetensors.index.json";
  MXDP_CHECK(fs::is_regular_file(index, ec), "--init-from '", path,
             "' holds neither model.safetensors nor model.safetensors.index.json");
  return shard_paths(path, index);
}

}  // namespace

HfTensors::HfTensors(const std::string& path) {
  for (const std::string& p : safetensors_paths(path)) {
    files_.push_back(std::make_unique<SafetensorsFile>(p));
    for (const SafeTensorInfo& t : files_.back()->tensors())
      MXDP_CHECK(by_name_.emplace(t.name, Entry{files_.back().get(), &t}).second, "--init-from '", path,
                 "': tensor '", t.name, "' appears in two files");
  }
}

SafeTensorOut hf_tensor(std::string name, std::vector<int64_t> shape, const float* x, bool bf16) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  SafeTensorOut o{std::move(name), bf16 ? "BF16" : "F32", std::move(shape), {}};
  if (bf16) {
    o.bytes.resize(size_t(2 * n));
    for (int64_t i = 0; i < n; ++i) {
      const uint16_t u = codec::bf16_from_f32(x[i]);
      o.bytes[size_t(2 * i)] = uint8_t(u);
      o.bytes[size_t(2 * i + 1)] = uint8_t(u >> 8);
    }
  } else {
    o.bytes.resize(size_t(4 * n));
    std::memcpy(o.bytes.data(), x, size_t(4 * n));
  }
  return o;
}

void write_hf_dir(const std::string& dir, const std::vector<SafeTensorOut>& tensors, nlohmann::ordered_json config,
                  const InferenceWeights& w, bool bf16, std::FILE* log) {
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec)) MXDP_FAIL("--output '", dir, "' exists and is not a directory");
  fs::create_directories(dir, ec);
  MXDP_CHECK(!ec, "cannot create '", dir, "': ", ec.message());
  const std::string st = (fs::path(dir) / "model.safetensors").string();
  write_safetensors(st, tensors, {{"format", "pt"}, {"producer", "mxdp export"}});
  config["torch_dtype"] = bf16 ? "bfloat16" : "float32";
  config["mxdp"] = {{"checkpoint", w.path}, {"iteration", w.iteration}, {"weights", w.describe}};
  const std::string cj = (fs::path(dir) / "config.json").string();
  write_file_atomic(cj, config.dump(2) + "\n");
  if (log) {
    int64_t params = 0;
    for (const SafeTensorOut& t : tensors) params += int64_t(t.bytes.size()) / (bf16 ? 2 : 4);
    std::fprintf(log, "export: %s (step %lld), weights %s\n", w.path.c_str(), (long long)w.iteration,
                 w.describe.c_str());
    std::fprintf(log, "export: wrote %s (%zu tensors, %lld params, %s) and %s\n", st.c_str(), tensors.size(),
                 (long long)params, bf16 ? "bf16" : "fp32", cj.c_str());
  }
}

}  // namespace mxdp
