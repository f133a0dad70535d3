// Writes seed inputs for the fuzz harnesses with mxdp's own writers (the files
// mxdp really writes, small): version-1 checkpoints, manifests and rank files
// of a step directory, token shards, quantized matrices, metrics lines. Each
// checkpoint seed starts with the harness's mode byte (fuzz_checkpoint.cpp).
//   make_seeds OUT_DIR   ->  OUT_DIR/{checkpoint,shard,quantize,metrics}/seed_*
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "io/checkpoint.h"
#include "data/data.h"
#include "formats/quant.h"

using namespace mxdp;
namespace fs = std::filesystem;

namespace {
void put(const fs::path& dir, const std::string& name, const std::vector<uint8_t>& bytes, int mode = -1) {
  fs::create_directories(dir);
  std::ofstream f(dir / name, std::ios::binary);
  if (mode >= 0) f.put(char(mode));
  f.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
}
std::vector<uint8_t> file_bytes(const fs::path& p) { return read_file(p.string()); }
}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_seeds OUT_DIR\n");
    return 2;
  }
  const fs::path out = argv[1];
  const fs::path ck = out / "checkpoint", tmp = out / "tmp";
  fs::create_directories(tmp);
  // Version 1, and a step directory of two rank files (pieces cut through params).
  CheckpointData c;
  c.version = 3;
  c.iteration = 4;
  c.extra = {{"data", {{"epoch", 0}, {"step", 3}}}, {"model", {{"vocab", 256}}}};
  const std::vector<std::pair<std::string, std::vector<int64_t>>> shapes = {{"w0", {10}}, {"w1", {4, 8}}, {"w2", {3}}};
  for (auto& [name, shape] : shapes) {
    ParamState p{name, shape, {}, {}, {}};
    int64_t n = 1;
    for (auto d : shape) n *= d;
    for (int64_t i = 0; i < n; ++i) {
      p.master.push_back(0.25f * float(i) - 1.0f);
      p.m.push_back(std::ldexp(1.0f, -int(i % 20)));
      p.v.push_back(float(i * i));
    }
    c.params.push_back(p);
  }
  put(ck, "seed_v1", serialize_checkpoint(c), 0);
  CheckpointManifest m;
  m.version = 3;
  m.iteration = 4;
  m.extra = c.extra;
  m.chunk_bytes = 64;
  for (auto& p : c.params) m.params.push_back({p.name, p.shape, int64_t(p.master.size())});
  const std::vector<std::vector<StoredPiece>> files = {{{0, 0, 4}, {1, 20, 12}, {2, 0, 3}}, {{1, 0, 20}, {0, 4, 6}}};
  for (int r = 0; r < 2; ++r) {
    const std::string path = (tmp / rank_file_name(r)).string();
    RankFileWriter w(path, r, files[r], m.chunk_bytes);
    for (const StoredPiece& pc : files[r])
      for (const auto* t : {&c.params[pc.param].master, &c.params[pc.param].m, &c.params[pc.param].v})
        w.append(t->data() + pc.begin, size_t(pc.len));
    m.files.push_back(w.finish());
    put(ck, "seed_rank" + std::to_string(r) + "_header", file_bytes(path), 2);
    put(ck, "seed_rank" + std::to_string(r) + "_dir", file_bytes(path), 3);
  }
  put(ck, "seed_manifest", serialize_manifest(m), 1);
  // Token shards, through prepare.
  {
    std::ofstream t(tmp / "text.txt");
    for (int i = 0; i < 50; ++i) t << "In the beginning God created the heaven and the earth. " << i << "\n";
  }
  prepare((tmp / "text.txt").string(), (tmp / "shards").string(), 0.1, nullptr);
  put(out / "shard", "seed_train", file_bytes(tmp / "shards" / "train.bin"));
  put(out / "shard", "seed_val", file_bytes(tmp / "shards" / "val.bin"));
  // Quantized matrices: the 4-byte selector (format, rows-1, cols-1) then the file.
  std::vector<float> x(5 * 40);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(float(i)) * std::ldexp(1.0f, int(i % 30) - 15);
  x[7] = INFINITY, x[8] = NAN, x[9] = -0.0f, x[10] = 1e-42f;
  for (int format = 0; format < 5; ++format) {
    std::vector<uint8_t> q = {uint8_t(format), 4, 39, 0};
    if (format == 4) {
      std::vector<uint8_t> codes(size_t(nvfp4_code_bytes(5, 40))), scales(size_t(nvfp4_scale_bytes(5, 40)));
      const float am = amax(x.data(), int64_t(x.size()));
      nvfp4_quantize_rowwise(x.data(), 5, 40, am, codes.data(), scales.data());
      const float s_dec = nvfp4_tensor_scale(am).s_dec;
      q.insert(q.end(), codes.begin(), codes.end());
      q.insert(q.end(), scales.begin(), scales.end());
      const auto* s = reinterpret_cast<const uint8_t*>(&s_dec);
      q.insert(q.end(), s, s + 4);
    } else {
      const bool col = format >= 2;
      const Mxfp8Config cfg{format % 2 ? Fp8Kind::E5M2 : Fp8Kind::E4M3, ScaleRounding::RCeil};
      std::vector<uint8_t> codes(200), scales(size_t(col ? mxfp8_scale_bytes_colwise(5, 40) : mxfp8_scale_bytes_rowwise(5, 40)));
      if (col) mxfp8_quantize_colwise(x.data(), 5, 40, cfg, codes.data(), scales.data());
      else mxfp8_quantize_rowwise(x.data(), 5, 40, cfg, codes.data(), scales.data());
      q.insert(q.end(), codes.begin(), codes.end());
      q.insert(q.end(), scales.begin(), scales.end());
    }
    put(out / "quantize", "seed_format" + std::to_string(format), q);
  }
  // Metrics lines as mxdp train writes them.
  const std::string metrics =
      "{\"kind\":\"config\",\"step\":0,\"ranks\":2}\n"
      "{\"kind\":\"train\",\"step\":1,\"loss\":5.5763,\"lr\":0.00015,\"grad_norm\":4.348,\"skipped\":false}\n"
      "{\"kind\":\"eval\",\"step\":1,\"loss\":5.1,\"pass\":1}\n"
      "{\"kind\":\"train\",\"step\":2,\"loss\":null,\"lr\":0.0003,\"grad_norm\":null,\"skipped\":true}\n";
  put(out / "metrics", "seed_metrics", std::vector<uint8_t>(metrics.begin(), metrics.end()));
  fs::remove_all(tmp);
  return 0;
}
