// Checkpoint files: the full (unsharded) fp32 master weights and AdamW moments
// of every param, the optimizer step, and a JSON object of whatever else the
// trainer needs back (RNG states, data position, options).
//
// Because tensors are stored whole, per param, a checkpoint loads into any dp
// size (resharding is just re-cutting the full tensors).
//
// File layout (little-endian):
//   "MXDPCKPT"           8 bytes magic
//   u32 format version   (kCheckpointVersion)
//   u32 reserved (0)
//   u64 meta_len         length of the JSON metadata that follows
//   meta                 {"version", "iteration", "params":[{"name","shape"}...], "extra"}
//   tensors              per param in order: master, m, v (fp32, numel each)
//   u64 checksum         FNV-1a 64 of every byte before it
// Writes are atomic: a temporary file in the same directory, fsync, rename,
// fsync of the directory; a failed save leaves any previous file untouched.
// A corrupt, truncated or mismatched file is a clear error.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "hash.h"

namespace mxdp {

inline constexpr uint32_t kCheckpointVersion = 1;

struct ParamState {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> master, m, v;
};

struct CheckpointData {
  int64_t version = 0;    // optimizer updates applied
  int64_t iteration = 0;  // optimizer steps taken (applied + skipped): the LR schedule's clock
  std::vector<ParamState> params;
  nlohmann::json extra = nlohmann::json::object();
};

std::vector<uint8_t> serialize_checkpoint(const CheckpointData& c);
// `what` names the source in error messages.
CheckpointData deserialize_checkpoint(const std::vector<uint8_t>& bytes, const std::string& what);

void write_file_atomic(const std::string& path, const std::vector<uint8_t>& bytes);
std::vector<uint8_t> read_file(const std::string& path);


}  // namespace mxdp
