// Step-directory checkpoints through the engine (issue 12, point 6), under
// mpirun -np 1..4: every rank writes exactly its own shards into its own rank
// file; the directory is complete or absent; any dp, bucket size and mode loads
// it with bitwise the same masters and moments, and training continues bitwise
// as from the saving engine; a damaged rank file read by one rank stops every
// rank with that rank's message; a non-finite state is never saved.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "io/checkpoint.h"
#include "error_of.h"
#include "lifecycle.h"

using namespace mxdp;
using namespace mxdp::testing;
namespace fs = std::filesystem;

namespace {

Communicator& world() {
  static std::unique_ptr<Communicator> c = make_communicator();
  return *c;
}

const std::string& scratch() {
  static std::string dir = [] {
    char buf[256] = {};
    if (world().rank() == 0) {
      std::string t = (fs::temp_directory_path() / "mxdp_ckpt_mpi_XXXXXX").string();
      MXDP_CHECK(::mkdtemp(t.data()), "mkdtemp failed");
      std::snprintf(buf, sizeof buf, "%s", t.c_str());
    }
    world().broadcast(buf, sizeof buf, 0);
    return std::string(buf);
  }();
  return dir;
}

DpOptions options() {
  DpOptions o = base_options();  // bucket 3000 elements: several buckets, shards cut through params
  o.weight_format = WeightFormat::Mxfp8;
  o.reuse_grad_buf = true;
  return o;
}

struct Engine {
  std::unique_ptr<ToyModel> model;
  std::unique_ptr<DataParallel> dp;
  Engine(Communicator& c, const DpOptions& o, uint64_t seed = 7) : model(std::make_unique<ToyModel>()) {
    model->init_weights(seed);
    dp = std::make_unique<DataParallel>(*model, c, o);
  }
  double step() {
    auto d = make_batch(uint64_t(dp->iteration()), 0, dp->comm().rank(), false);
    return dp->train_step({d.batch}).loss;
  }
};


}  // namespace

TEST(StepCheckpoint, EveryRankWritesItsOwnShardsAndAnyDpLoadsThem) {
  const int dp = world().size(), rank = world().rank();
  Engine a(world(), options());
  for (int s = 0; s < 3; ++s) a.step();
  const std::string path = scratch() + "/a.ckpt";
  a.dp->save_checkpoint(path, {{"note", "a"}});

  // The directory: a manifest and one rank file per rank, nothing else, no temporary beside it.
  std::vector<std::string> names;
  for (auto& e : fs::directory_iterator(path)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  std::vector<std::string> want;
  for (int r = 0; r < dp; ++r) want.push_back(rank_file_name(r));
  want.push_back(kManifestName);
  std::sort(want.begin(), want.end());
  EXPECT_EQ(names, want);
  for (auto& e : fs::directory_iterator(scratch()))
    EXPECT_FALSE(is_temporary_name(e.path().filename().string())) << e.path();

  // Rank r's file holds exactly the pieces of shard r of every bucket: together,
  // every element of every param exactly once.
  const CheckpointManifest m = read_manifest(path);
  ASSERT_EQ(int(m.files.size()), dp);
  int64_t stored = 0, mine = 0, expect_mine = 0;
  for (int r = 0; r < dp; ++r) {
    const auto bytes = read_file(path + "/" + m.files[r].name);
    const RankFileHeader h = parse_rank_file_header(bytes, bytes.size(), m.params, m.files[r].name);
    EXPECT_EQ(h.rank, uint32_t(r));
    for (const StoredPiece& pc : h.pieces) stored += pc.len, mine += r == rank ? pc.len : 0;
  }
  for (const GatherBuffer& gb : a.dp->layout().buffers)
    for (const Bucket& b : gb.buckets)
      for (const Piece& pc : b.shards[rank]) expect_mine += pc.len;
  int64_t total = 0;
  for (const ParamSpec& p : a.model->params()) total += p.numel();
  EXPECT_EQ(stored, total);
  EXPECT_EQ(mine, expect_mine);

  // Whole, the checkpoint holds the engine's full masters bitwise.
  const CheckpointData c = read_checkpoint(path);
  EXPECT_EQ(c.iteration, 3);
  EXPECT_EQ(c.extra["note"], "a");
  for (int p = 0; p < int(c.params.size()); ++p) EXPECT_TRUE(same_bits(c.params[p].master, a.dp->full_master(p))) << p;

  // Loaded with another bucket size (other cuts), and in reference mode: the same
  // state, and the next steps give bitwise the same losses as the saving engine's.
  DpOptions tiny = options();
  tiny.bucket_size = 1;
  std::vector<double> cont;
  for (int s = 0; s < 2; ++s) cont.push_back(a.step());
  for (const DpOptions& o : {options(), tiny, options().reference()}) {
    Engine b(world(), o, 99);
    EXPECT_EQ(b.dp->load_checkpoint(path)["note"], "a");
    EXPECT_EQ(b.dp->iteration(), 3);
    for (int p = 0; p < int(c.params.size()); ++p) EXPECT_TRUE(same_bits(b.dp->full_master(p), c.params[p].master)) << p;
    if (o.bucket_size != tiny.bucket_size) {  // another layout sums the grad norm in another order
      for (int s = 0; s < 2; ++s) EXPECT_EQ(b.step(), cont[s]) << "step " << 4 + s;
    }
    // Saved again (another layout, or reference mode): the same content.
    b.dp->save_checkpoint(scratch() + "/b.ckpt", {});
    const CheckpointData c2 = read_checkpoint(scratch() + "/b.ckpt");
    if (o.bucket_size == tiny.bucket_size) {
      for (int p = 0; p < int(c.params.size()); ++p) {
        EXPECT_TRUE(same_bits(c2.params[p].master, c.params[p].master)) << p;
        EXPECT_TRUE(same_bits(c2.params[p].m, c.params[p].m)) << p;
        EXPECT_TRUE(same_bits(c2.params[p].v, c.params[p].v)) << p;
      }
    }
  }

  // dp N -> dp 1 -> dp N: rank 0 alone loads it and saves a one-file checkpoint.
  const std::string one = scratch() + "/one.ckpt";
  if (rank == 0) {
    auto self = make_communicator({Backend::Self});
    Engine s(*self, options(), 5);
    s.dp->load_checkpoint(path);
    s.dp->save_checkpoint(one, {{"note", "one"}});
    EXPECT_EQ(read_manifest(one).files.size(), 1u);
  }
  world().barrier();
  Engine back(world(), options(), 3);
  back.dp->load_checkpoint(one);
  for (int p = 0; p < int(c.params.size()); ++p) EXPECT_TRUE(same_bits(back.dp->full_master(p), c.params[p].master)) << p;
  for (int s = 0; s < 2; ++s) EXPECT_EQ(back.step(), cont[s]);

  // A version-1 single file still loads.
  if (rank == 0) write_file_atomic(scratch() + "/v1.ckpt", serialize_checkpoint(c));
  world().barrier();
  Engine v1(world(), options(), 4);
  EXPECT_EQ(v1.dp->load_checkpoint(scratch() + "/v1.ckpt")["note"], "a");
  for (int p = 0; p < int(c.params.size()); ++p) EXPECT_TRUE(same_bits(v1.dp->full_master(p), c.params[p].master)) << p;
}

TEST(StepCheckpoint, SavingAgainReplacesTheDirectoryWhole) {
  Engine a(world(), options());
  const std::string path = scratch() + "/again.ckpt";
  a.step();
  a.dp->save_checkpoint(path, {{"n", 1}});
  a.step();
  a.dp->save_checkpoint(path, {{"n", 2}});
  const CheckpointData c = read_checkpoint(path);
  EXPECT_EQ(c.extra["n"], 2);
  EXPECT_EQ(c.iteration, 2);
  for (int p = 0; p < int(c.params.size()); ++p) EXPECT_TRUE(same_bits(c.params[p].master, a.dp->full_master(p)));
}

TEST(StepCheckpoint, ADamagedRankFileStopsEveryRankWithItsReason) {
  const int dp = world().size();
  Engine a(world(), options());
  a.step();
  const std::string path = scratch() + "/damaged.ckpt";
  a.dp->save_checkpoint(path, {});
  const int victim = dp - 1;  // read by rank dp-1 alone when dp > 1
  if (world().rank() == 0) {
    const std::string f = path + "/" + rank_file_name(victim);
    std::fstream s(f, std::ios::in | std::ios::out | std::ios::binary);
    s.seekp(std::streamoff(fs::file_size(f) - 7));
    s.put('\x55');
  }
  world().barrier();
  Engine b(world(), options(), 2);
  const std::string e = error_of([&] { b.dp->load_checkpoint(path); });
  EXPECT_NE(e.find("checksum mismatch"), std::string::npos) << e;
  EXPECT_NE(e.find(rank_file_name(victim)), std::string::npos) << e;
  if (dp > 1) {
    EXPECT_NE(e.find("on rank " + std::to_string(victim)), std::string::npos) << e;
  }
}

TEST(StepCheckpoint, ANonFiniteStateIsNeverSaved) {
  ToyModel m;
  m.init_weights(1);
  m.weights(3)[5] = NAN;  // a master of param 3 (W2), owned by one rank
  DataParallel dp(m, world(), options());
  const std::string path = scratch() + "/nan.ckpt";
  const std::string e = error_of([&] { dp.save_checkpoint(path, {}); });
  EXPECT_NE(e.find("not finite"), std::string::npos) << e;
  EXPECT_NE(e.find("'" + m.params()[3].name + "'"), std::string::npos) << e;
  world().barrier();
  EXPECT_FALSE(fs::exists(path));
  for (auto& entry : fs::directory_iterator(scratch()))
    EXPECT_FALSE(is_temporary_name(entry.path().filename().string())) << entry.path();
}

TEST(StepCheckpoint, AFailedSaveIsAnErrorOnEveryRank) {
  Engine a(world(), options());
  // The parent of the step directory is a file: rank 0 cannot stage it.
  if (world().rank() == 0) std::ofstream(scratch() + "/blocker") << "x";
  world().barrier();
  const std::string e = error_of([&] { a.dp->save_checkpoint(scratch() + "/blocker/s.ckpt", {}); });
  EXPECT_NE(e.find("blocker"), std::string::npos) << e;
}

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  world();
  scratch();
  int rc = RUN_ALL_TESTS();
  world().barrier();
  if (world().rank() == 0) fs::remove_all(scratch());
  return rc;
}
