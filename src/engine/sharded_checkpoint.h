// ShardedCheckpoint: the engine's checkpoints (Megatron-LM's sharded state
// dict; the format is io/checkpoint.h). Every rank writes, and reads, only the
// pieces of the shards it owns, a staging buffer at a time; nothing gathers a
// tensor. Each phase ends in an agreement, so that an error on any rank stops
// every rank with that rank's message instead of leaving the others waiting.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "comm/comm.h"
#include "engine/bucket_sync.h"
#include "engine/buffers.h"
#include "engine/engine_ops.h"
#include "engine/layout.h"
#include "engine/options.h"
#include "models/model.h"

namespace mxdp {

struct CheckpointManifest;
struct CheckpointParam;
struct RankFileInfo;

class ShardedCheckpoint {
 public:
  ShardedCheckpoint(Communicator& comm, EngineOps& ops, const DpOptions& opt, const std::vector<ParamSpec>& params,
                    const Layout& layout, EngineBuffers& bufs, BucketSync& sync);

  // Collective; DataParallel::save_checkpoint tells the contract. `updates`
  // and `iteration` are the counts the checkpoint stores.
  void save(const std::string& path, const nlohmann::json& extra, int64_t updates, int64_t iteration);

  // Collective; DataParallel::load_checkpoint tells the contract. The loaded
  // masters and moments replace this rank's; every bucket's chain restarts.
  struct Loaded {
    nlohmann::json extra;
    int64_t updates = 0, iteration = 0;
  };
  Loaded load(const std::string& path);

  // Collective: full fp32 master weights of param p.
  std::vector<float> full_master(int p);

 private:
  std::vector<float> full_bucket(const DeviceArray<float>& local, int f, int b);  // collective, to host
  void check_state_finite(const std::string& path, int64_t iteration);
  RankFileInfo write_rank_file(const std::string& dir);
  void check_params_match(const std::string& path, const std::vector<CheckpointParam>& ps) const;
  void reset_state();
  Loaded load_step_directory(const std::string& path, CheckpointManifest m);
  Loaded load_single_file(const std::string& path, const std::vector<uint8_t>& bytes);

  Communicator& comm_;
  EngineOps& ops_;
  const DpOptions& opt_;
  const std::vector<ParamSpec>& params_;
  const Layout& layout_;
  EngineBuffers& bufs_;
  BucketSync& sync_;
  int rank_, dp_;
};

}  // namespace mxdp
