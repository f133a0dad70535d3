// The GPU GPT against the PyTorch golden file (tests/data/gpt_golden.bin,
// float64; the CPU GPT is held to it in test_gpt.cpp):
//   - one forward/backward of the golden batch from the golden weights: the loss,
//     the logits of every position and every param's gradient, within the bf16
//     tolerances of gpt_golden.h (relative error of the whole tensor: logits 2%,
//     loss 0.5%, each gradient 5%; the GPU rounds weights and activations to bf16);
//   - the golden AdamW trajectory (10 steps on the same batch, no clipping)
//     through the engine: DataParallel on the CUDA ops and NCCL (one rank), bf16
//     gather, the GPU GPT; every step's loss within kBf16TrajectoryTolerance.
// That the checks can fail is tested on the CPU (test_gpt.cpp, GptGolden.Bf16*):
// the same functions accept the CPU GPT with bf16 weights and reject a wrong
// scale, a missing term, a wrong index, a skipped or a mis-sized update.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "compare_util.h"
#include "engine/engine.h"
#include "gpt_golden.h"
#include "gpu_test_util.h"
#include "models/gpt2/spec.h"
#include "train/runtime.h"

using namespace mxdp;
using mxdp::gputest::DevHooks;
using mxdp::testing::Golden;
using mxdp::testing::load_golden;

namespace {

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += "\n  " + x;
  return s;
}

std::unique_ptr<LanguageModel> golden_model(const Golden& g, EngineOps& ops) {
  auto m = make_model(Device::Cuda, gpt2_model_config(g.cfg), ops);
  EXPECT_EQ(m->params().size(), g.shapes.size());
  for (size_t i = 0; i < g.shapes.size() && i < m->params().size(); ++i)
    EXPECT_EQ(m->params()[i].shape, g.shapes[i]) << m->params()[i].name;
  for (size_t i = 0; i < g.params.size(); ++i) m->set_weights(int(i), g.params[i].data());  // bf16 RNE of fp32
  return m;
}

TEST(GpuGptGolden, LogitsLossAndEveryGradientMatchPyTorch) {
  REQUIRE_GPU();
  const Golden g = load_golden();
  auto ops = make_engine_ops(Device::Cuda);
  auto m = golden_model(g, *ops);
  ASSERT_FALSE(::testing::Test::HasFailure());
  DevHooks hooks(m->params());
  const float loss = m->forward({g.inputs.data(), g.targets.data(), g.B, g.T}, hooks);
  m->backward(hooks);
  std::vector<std::vector<float>> grads;
  std::vector<std::string> names;
  for (int p = 0; p < int(m->params().size()); ++p) {
    grads.push_back(hooks.get(p));
    names.push_back(m->params()[p].name);
  }
  // The model keeps only the last position's logits for the host: position t
  // of the full sequence is the last one of its prefix of length t+1 (causal).
  std::vector<float> logits(size_t(g.B) * g.T * g.cfg.vocab);
  mxdp::NullHooks nh;
  for (int t = 0; t < g.T; ++t) {
    std::vector<int32_t> prefix;
    for (int b = 0; b < g.B; ++b)
      prefix.insert(prefix.end(), g.inputs.begin() + size_t(b) * g.T, g.inputs.begin() + size_t(b) * g.T + t + 1);
    m->forward_logits(prefix.data(), g.B, t + 1, nh);
    for (int b = 0; b < g.B; ++b) {
      const std::vector<float> z = m->logits_last(b);
      ASSERT_EQ(z.size(), size_t(g.cfg.vocab));
      std::copy(z.begin(), z.end(), logits.begin() + (size_t(b) * g.T + t) * g.cfg.vocab);
    }
  }
  std::printf("  loss %.6f  torch %.6f\n", loss, g.loss);
  const auto bad = mxdp::testing::golden_mismatches(g, loss, logits, grads, names, mxdp::testing::kBf16GoldenTolerance, true);
  EXPECT_TRUE(bad.empty()) << "the GPU GPT differs from PyTorch beyond bf16 rounding:" << join(bad);
}

TEST(GpuGptGolden, AdamWTrajectoryThroughTheEngineMatchesPyTorch) {
  REQUIRE_GPU();
  if (!cuda_available()) GTEST_SKIP() << "this build cannot run the GPU engine (no NCCL or cuDNN)";
  const Golden g = load_golden();
  ASSERT_GT(g.n_steps, 0) << "the golden file holds no trajectory";
  auto comm = make_job_communicator(Device::Cuda, {});  // one rank: run outside mpirun (or under -np 1)
  ASSERT_EQ(comm->size(), 1) << "run this test as one process";
  auto ops = make_engine_ops(Device::Cuda);
  auto m = golden_model(g, *ops);
  ASSERT_FALSE(::testing::Test::HasFailure());
  // torch.optim.AdamW as gen_gpt_golden.py runs it: constant lr, no clipping,
  // decay on the 2-D params only (ParamSpec::decay).
  DpOptions o;
  o.weight_format = WeightFormat::Bf16;
  o.clip_grad = 0;
  o.lr = o.min_lr = g.lr;
  o.warmup_steps = o.lr_decay_steps = 0;
  o.weight_decay = g.wd;
  o.adam_beta1 = g.beta1;
  o.adam_beta2 = g.beta2;
  o.adam_eps = g.eps;
  DataParallel engine(*m, *comm, o, ops.get());
  std::vector<float> losses;
  for (int s = 0; s < g.n_steps; ++s)
    losses.push_back(float(engine.train_step({Batch{g.inputs.data(), g.targets.data(), g.B, g.T}}).loss));
  const auto bad = mxdp::testing::golden_trajectory_mismatches(g, losses, mxdp::testing::kBf16TrajectoryTolerance, true);
  EXPECT_TRUE(bad.empty()) << "the GPU engine's AdamW trajectory differs from PyTorch's:" << join(bad);
}

}  // namespace
