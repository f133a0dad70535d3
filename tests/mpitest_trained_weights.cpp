// trained_weights.h against the engine: after training steps under mpirun, on
// every rank, the model's compute weights (what the engine unpacked from its
// per-bucket-shard gathers) are bit for bit what trained_weights() makes from
// the full fp32 masters with one quantize per param. Every format and
// rounding, with one bucket per buffer and with small buckets whose shards cut
// through params (so MXFP8 blocks and NVFP4 tensor scales of a param are
// computed on different ranks; fp8b128's tiles on the rank owning their slab).
// This is what lets `mxdp sample` and
// `mxdp export` rebuild the weights training computed with.
// mpi-ranks: 1 2 3
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <random>

#include "util/check.h"
#include "io/checkpoint.h"
#include "comm/comm.h"
#include "engine/engine.h"
#include "models/gpt2/gpt.h"
#include "train/trained_weights.h"

using namespace mxdp;

namespace {

Communicator& world() {
  static std::unique_ptr<Communicator> c = make_communicator();
  return *c;
}

std::string scratch_file(const std::string& name) {
  static std::string dir = [] {
    char buf[256] = {};
    if (world().rank() == 0) {
      std::string t = (std::filesystem::temp_directory_path() / "mxdp_trained_XXXXXX").string();
      MXDP_CHECK(::mkdtemp(t.data()), "mkdtemp failed");
      std::snprintf(buf, sizeof buf, "%s", t.c_str());
    }
    world().broadcast(buf, sizeof buf, 0);
    return std::string(buf);
  }();
  return dir + "/" + name;
}

struct Case {
  const char* name;
  WeightFormat format;
  ScaleRounding rounding;
  int64_t bucket;
  int d_model = 64;  // fp8b128: 128 (whole 128x128 tiles) or 192 (partial ones at the edges)
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class TrainedWeights : public ::testing::TestWithParam<Case> {};

TEST_P(TrainedWeights, EqualTheEnginesComputeWeights) {
  const Case c = GetParam();
  Communicator& comm = world();
  GptConfig g;
  g.vocab = 200;  // padding rows 200..255 stay zero
  g.padded_vocab = 256;
  g.n_layer = 2;
  g.d_model = c.d_model;
  g.n_head = 4;
  g.max_seq = 32;
  Gpt model(g);
  model.init_weights(5);
  DpOptions o;
  o.weight_format = c.format;
  o.mxfp8_scale_rounding = c.rounding;
  o.bucket_size = c.bucket;
  o.lr = 1e-2;  // large steps: the masters move far from their bf16-exact init
  o.reuse_grad_buf = c.format == WeightFormat::Mxfp8;
  DataParallel engine(model, comm, o);
  std::mt19937 rng(17 + comm.rank());
  std::vector<int32_t> in(2 * 16), tg(2 * 16);
  for (int step = 0; step < 3; ++step) {
    for (auto& t : in) t = int32_t(rng() % 200);
    for (auto& t : tg) t = int32_t(rng() % 200);
    engine.train_step({Batch{in.data(), tg.data(), 2, 16}});
  }
  engine.sync_weights();
  const std::string path = scratch_file(std::string(c.name) + ".ckpt");
  engine.save_checkpoint(path, nlohmann::json::object());
  comm.barrier();
  const CheckpointData ck = read_checkpoint(path);
  ASSERT_EQ(ck.params.size(), model.params().size());
  int64_t mismatches = 0, quantized = 0;
  for (size_t p = 0; p < ck.params.size(); ++p) {
    const ParamSpec& s = model.params()[p];
    std::vector<float> want(size_t(s.numel()));
    trained_weights(s, ck.params[p].master.data(), c.format, c.rounding, want.data());
    const float* got = model.weights(int(p));
    for (int64_t i = 0; i < s.numel(); ++i) {
      mismatches += std::memcmp(&got[i], &want[size_t(i)], 4) != 0;
      quantized += std::memcmp(&want[size_t(i)], &ck.params[p].master[size_t(i)], 4) != 0;
    }
  }
  EXPECT_EQ(mismatches, 0) << c.name << " at dp " << comm.size() << ": compute weights differ from trained_weights()";
  EXPECT_GT(quantized, gpt_num_parameters(g) / 2) << "the format must change most weights, or the check means little";
  comm.barrier();
}

INSTANTIATE_TEST_SUITE_P(
    Formats, TrainedWeights,
    ::testing::Values(Case{"bf16", WeightFormat::Bf16, ScaleRounding::RCeil, 1 << 20},
                      Case{"mxfp8_rceil", WeightFormat::Mxfp8, ScaleRounding::RCeil, 1 << 20},
                      Case{"mxfp8_floor_small_buckets", WeightFormat::Mxfp8, ScaleRounding::Floor, 3000},
                      Case{"nvfp4", WeightFormat::Nvfp4, ScaleRounding::RCeil, 1 << 20},
                      Case{"nvfp4_small_buckets", WeightFormat::Nvfp4, ScaleRounding::RCeil, 3000},
                      Case{"bf16_small_buckets", WeightFormat::Bf16, ScaleRounding::RCeil, 1000},
                      Case{"fp8b128", WeightFormat::Fp8b128, ScaleRounding::RCeil, 1 << 20, 128},
                      Case{"fp8b128_small_buckets", WeightFormat::Fp8b128, ScaleRounding::RCeil, 20000, 128},
                      // d_model 192: every weight ends in a partial tile column or row.
                      Case{"fp8b128_partial_tiles", WeightFormat::Fp8b128, ScaleRounding::RCeil, 1 << 20, 192},
                      Case{"fp8b128_partial_tiles_small_buckets", WeightFormat::Fp8b128, ScaleRounding::RCeil, 20000,
                           192}),
    [](const auto& info) { return std::string(info.param.name); });

}  // namespace
