// ShardedCheckpoint (sharded_checkpoint.h): step directories and version-1
// single files, each rank writing and reading only the pieces of the shards it
// owns; and full_master, the one tensor gather.
#include <algorithm>
#include <cmath>
#include <filesystem>

#include "engine/sharded_checkpoint.h"
#include "io/checkpoint.h"
#include "util/check.h"

namespace mxdp {

ShardedCheckpoint::ShardedCheckpoint(Communicator& comm, EngineOps& ops, const DpOptions& opt,
                                     const std::vector<ParamSpec>& params, const Layout& layout, EngineBuffers& bufs,
                                     BucketSync& sync)
    : comm_(comm),
      ops_(ops),
      opt_(opt),
      params_(params),
      layout_(layout),
      bufs_(bufs),
      sync_(sync),
      rank_(comm.rank()),
      dp_(comm.size()) {}

std::vector<float> ShardedCheckpoint::full_bucket(const DeviceArray<float>& local, int f, int b) {
  const Bucket& bk = layout_.buffers[f].buckets[b];
  DeviceArray<float> full(ops_, bk.numel);
  const float* mine = local.data() + bufs_[f].local_off[b];
  if (!opt_.distributed_optimizer) {
    ops_.copy(full.data(), mine, bk.numel * sizeof(float));
  } else {
    float* slot = full.data() + rank_ * bk.shard_numel;
    ops_.copy(slot, mine, bk.shard_numel * sizeof(float));
    comm_.all_gather(slot, full.data(), bk.shard_numel * sizeof(float), ops_.stream());
  }
  std::vector<float> host(bk.numel);
  ops_.copy_to_host(host.data(), full.data(), full.bytes());
  return host;
}

std::vector<float> ShardedCheckpoint::full_master(int p) {
  MXDP_CHECK(p >= 0 && p < int(params_.size()), "full_master(", p, "): no such param");
  const ParamPlace& pl = layout_.place[p];
  auto full = full_bucket(bufs_[pl.buffer].master, pl.buffer, pl.bucket);
  const int64_t at = pl.offset - layout_.buffers[pl.buffer].buckets[pl.bucket].offset;
  return {full.begin() + at, full.begin() + at + params_[p].numel()};
}

namespace {
constexpr int64_t kStageElems = int64_t(1) << 20;  // host staging: 4 MiB of fp32

// Rank 0's bytes to every rank.
std::vector<uint8_t> broadcast_bytes(Communicator& comm, std::vector<uint8_t> bytes) {
  uint64_t size = bytes.size();
  comm.host_broadcast(&size, sizeof size, 0);
  bytes.resize(size_t(size));
  for (uint64_t off = 0; off < size; off += (1u << 30))
    comm.host_broadcast(bytes.data() + off, size_t(std::min<uint64_t>(1u << 30, size - off)), 0);
  return bytes;
}

}  // namespace

void ShardedCheckpoint::check_state_finite(const std::string& path, int64_t iteration) {
  // The first param (lowest index) with a non-finite master or moment, over all ranks.
  int bad = int(params_.size()), bad_tensor = 0;
  bufs_.for_each_shard_piece(rank_, [&](int f, const Piece& pc, int64_t at) {
    const BufferState& bs = bufs_[f];
    int t = 0;
    for (const float* x : {bs.master.data(), bs.m.data(), bs.v.data()}) {
      if (pc.param < bad && !std::isfinite(ops_.sum_squares(x + at, pc.len))) bad = pc.param, bad_tensor = t;
      ++t;
    }
  });
  std::vector<int32_t> all(2 * size_t(dp_));
  all[2 * rank_] = bad;
  all[2 * rank_ + 1] = bad_tensor;
  comm_.host_all_gather(all.data(), 2 * sizeof(int32_t));
  for (int r = 0; r < dp_; ++r)
    if (all[2 * r] < bad) bad = all[2 * r], bad_tensor = all[2 * r + 1];
  if (bad == int(params_.size())) return;
  static const char* kTensor[] = {"fp32 master weights", "AdamW first moments", "AdamW second moments"};
  MXDP_FAIL("not saving checkpoint '", path, "': the ", kTensor[bad_tensor], " of param '", params_[bad].name,
            "' are not finite (NaN or Inf) after step ", iteration,
            ": the run has diverged, and a checkpoint of it would replace good ones");
}

// Shard rank_ of every bucket, in both modes: the files of a reference run
// hold exactly what a sharded run's do.
RankFileInfo ShardedCheckpoint::write_rank_file(const std::string& dir) {
  std::vector<StoredPiece> pieces;
  bufs_.for_each_shard_piece(rank_,
                             [&](int, const Piece& pc, int64_t) { pieces.push_back({pc.param, pc.param_begin, pc.len}); });
  RankFileWriter w((std::filesystem::path(dir) / rank_file_name(rank_)).string(), rank_, std::move(pieces));
  std::vector<float> host(static_cast<size_t>(kStageElems));
  bufs_.for_each_shard_piece(rank_, [&](int f, const Piece& pc, int64_t at) {
    BufferState& bs = bufs_[f];
    for (const float* src : {bs.master.data() + at, bs.m.data() + at, bs.v.data() + at})
      for (int64_t done = 0; done < pc.len; done += kStageElems) {
        const int64_t n = std::min(kStageElems, pc.len - done);
        ops_.copy_to_host(host.data(), src + done, size_t(n) * sizeof(float));
        w.append(host.data(), size_t(n));
      }
  });
  return w.finish();
}

void ShardedCheckpoint::save(const std::string& path, const nlohmann::json& extra, int64_t updates,
                             int64_t iteration) {
  MXDP_CHECK(extra.is_object() || extra.is_null(), "save_checkpoint: extra must be a JSON object, got a ",
             extra.type_name());
  check_state_finite(path, iteration);
  const auto bcast0 = [&](void* p, size_t n) { comm_.host_broadcast(p, n, 0); };
  // Rank 0 stages the directory beside its final place; every rank learns where.
  std::string staged;
  on_rank0(comm_, [&] {
    staged = temporary_path(path);
    std::error_code ec;
    std::filesystem::remove_all(staged, ec);
    create_directories(staged);
  }, bcast0);
  const std::vector<uint8_t> name = broadcast_bytes(comm_, std::vector<uint8_t>(staged.begin(), staged.end()));
  staged.assign(name.begin(), name.end());
  try {
    RankFileInfo mine;
    on_every_rank(comm_, [&] { mine = write_rank_file(staged); });
    // Every rank's file is complete and synced: rank 0 writes the manifest last.
    std::vector<uint64_t> files(2 * size_t(dp_));
    files[2 * rank_] = mine.bytes;
    files[2 * rank_ + 1] = mine.header_checksum;
    comm_.host_all_gather(files.data(), 2 * sizeof(uint64_t));
    on_rank0(comm_, [&] {
      CheckpointManifest m;
      m.version = updates;
      m.iteration = iteration;
      m.extra = extra.is_null() ? nlohmann::json::object() : extra;
      for (const ParamSpec& p : params_) m.params.push_back({p.name, p.shape, p.numel()});
      for (int r = 0; r < dp_; ++r) m.files.push_back({rank_file_name(r), files[2 * r], files[2 * r + 1]});
      const std::vector<uint8_t> bytes = serialize_manifest(m);
      File f = File::create((std::filesystem::path(staged) / kManifestName).string());
      f.write(bytes.data(), bytes.size());
      f.sync();
      f.close();
      commit_directory(staged, path);
    }, bcast0);
  } catch (const std::exception& e) {
    if (rank_ == 0) {
      std::error_code ec;
      std::filesystem::remove_all(staged, ec);
    }
    MXDP_FAIL("saving checkpoint '", path, "' failed: ", e.what());
  }
}

ShardedCheckpoint::Loaded ShardedCheckpoint::load(const std::string& path) {
  // Rank 0 decides what `path` is and reads the manifest (or a single-file
  // checkpoint); the bytes, or the error, go to every rank.
  std::vector<uint8_t> bytes;
  uint8_t single_file = 0;
  on_rank0(comm_, [&] {
    try {
      if (is_step_directory(path)) {
        bytes = read_file((std::filesystem::path(path) / kManifestName).string(), kMaxManifestBytes);
        parse_manifest(bytes, (std::filesystem::path(path) / kManifestName).string());
      } else {
        std::error_code ec;
        MXDP_CHECK(!std::filesystem::is_directory(path, ec), "'", path, "' is a directory without a ", kManifestName,
                   ": not a checkpoint (an interrupted save?)");
        single_file = 1;
        bytes = read_file(path);
        deserialize_checkpoint(bytes, path);
      }
    } catch (const std::exception& e) {
      MXDP_FAIL("loading checkpoint failed on rank 0: ", e.what());
    }
  }, [&](void* p, size_t n) { comm_.host_broadcast(p, n, 0); });
  comm_.host_broadcast(&single_file, 1, 0);
  bytes = broadcast_bytes(comm_, std::move(bytes));
  return single_file ? load_single_file(path, bytes)
                     : load_step_directory(path, parse_manifest(bytes, (std::filesystem::path(path) / kManifestName).string()));
}

void ShardedCheckpoint::check_params_match(const std::string& path, const std::vector<CheckpointParam>& ps) const {
  MXDP_CHECK(ps.size() == params_.size(), path, ": checkpoint holds ", ps.size(), " params, the model has ",
             params_.size());
  for (size_t p = 0; p < params_.size(); ++p)
    MXDP_CHECK(ps[p].name == params_[p].name && ps[p].shape == params_[p].shape, path, ": param ", p, " is '",
               ps[p].name, "' ", shape_string(ps[p].shape), " in the checkpoint but '", params_[p].name, "' ",
               shape_string(params_[p].shape), " in the model (a checkpoint of another model configuration?)");
}

void ShardedCheckpoint::reset_state() {
  bufs_.zero_state();
  sync_.restart_at(sync_.version());  // nothing derived from the old masters survives
}

ShardedCheckpoint::Loaded ShardedCheckpoint::load_step_directory(const std::string& path, CheckpointManifest m) {
  std::vector<CheckpointParam> ps = m.params;
  check_params_match(path, ps);
  const int64_t version = m.version, iteration = m.iteration;
  nlohmann::json extra = m.extra;
  on_every_rank(comm_, [&] {
    CheckpointReader reader(path, std::move(m));
    reader.prefer(rank_);
    // Every owned range must be stored before any state changes.
    bufs_.for_each_owned_piece([&](int, const Piece& pc, int64_t) {
      if (pc.len > 0) reader.check_stored(pc.param, pc.param_begin, pc.len);
    });
    reset_state();
    std::vector<float> host(static_cast<size_t>(kStageElems));
    bufs_.for_each_owned_piece([&](int f, const Piece& pc, int64_t at) {
      BufferState& bs = bufs_[f];
      int t = 0;
      for (float* dst : {bs.master.data() + at, bs.m.data() + at, bs.v.data() + at}) {
        for (int64_t done = 0; done < pc.len; done += kStageElems) {
          const int64_t n = std::min(kStageElems, pc.len - done);
          reader.read(pc.param, pc.param_begin + done, n, t, host.data());
          ops_.copy_from_host(dst + done, host.data(), size_t(n) * sizeof(float));
        }
        ++t;
      }
    });
  });
  return {std::move(extra), version, iteration};
}

ShardedCheckpoint::Loaded ShardedCheckpoint::load_single_file(const std::string& path, const std::vector<uint8_t>& bytes) {
  // The version-1 format: the whole checkpoint in one file, on every rank.
  CheckpointData c = deserialize_checkpoint(bytes, path);
  std::vector<CheckpointParam> ps;
  for (const ParamState& p : c.params) ps.push_back({p.name, p.shape, int64_t(p.master.size())});
  check_params_match(path, ps);
  reset_state();
  bufs_.for_each_owned_piece([&](int f, const Piece& pc, int64_t at) {
    BufferState& bs = bufs_[f];
    const ParamState& s = c.params[pc.param];
    const size_t n = pc.len * sizeof(float);
    ops_.copy_from_host(bs.master.data() + at, s.master.data() + pc.param_begin, n);
    ops_.copy_from_host(bs.m.data() + at, s.m.data() + pc.param_begin, n);
    ops_.copy_from_host(bs.v.data() + at, s.v.data() + pc.param_begin, n);
  });
  return {std::move(c.extra), c.version, c.iteration};
}

}  // namespace mxdp
