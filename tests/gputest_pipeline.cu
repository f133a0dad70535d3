// The host runs ahead of the GPU: an optimizer step makes no host wait
// (issue 9, point 3). A gate kernel holds the stream, spinning on a flag in
// mapped host memory, in front of step N; the host then submits steps N and
// N+1 whole (forward, backward, launch_step each). Anything in them that waited
// for the GPU would hang there until the watchdog opens the gate (after 60 s)
// and the test fails; the test also checks that step N's work had not ended
// when the submission returned. Then the gate opens, and the results, read
// back late, are bitwise those of the same steps run one at a time with the
// host waiting for each (a second engine from the same seed).
//
// And the CUDA graphs (src/models/cuda/stream_graphs.h) change no bit: an engine whose
// GPU GPT replays graphs trains, evaluates at another batch shape and trains
// on, bitwise as one whose GPT runs every kernel eagerly.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "compare_util.h"
#include "engine/engine.h"
#include "gpu_test_util.h"
#include "models/gpt2/cuda/gpt_cuda.h"
#include "train/runtime.h"

using namespace mxdp;

namespace {

__global__ void gate_kernel(const volatile int* open) {
  while (*open == 0) __nanosleep(1000);
}

struct Rig {
  std::unique_ptr<Communicator> comm;
  std::unique_ptr<EngineOps> ops;
  std::unique_ptr<GptModel> model;
  std::unique_ptr<DataParallel> engine;
};

Rig make_rig(WeightFormat f, bool cuda_graphs = true) {
  Rig s;
  s.comm = make_job_communicator(Device::Cuda, {});
  s.ops = make_engine_ops(Device::Cuda);
  const GptConfig cfg{.vocab = 250, .padded_vocab = 256, .max_seq = 64, .n_layer = 2, .n_head = 4, .d_model = 64};
  s.model = cuda::make_gpt(cfg, static_cast<cudaStream_t>(s.ops->stream()), {.cuda_graphs = cuda_graphs});
  s.model->init_weights(5);
  DpOptions o;
  o.weight_format = f;
  o.reuse_grad_buf = f == WeightFormat::Mxfp8;
  o.clip_grad = 0.5;  // clipped steps: the coefficient is read on the device
  o.lr = 3e-3;
  o.warmup_steps = 0;
  s.engine = std::make_unique<DataParallel>(*s.model, *s.comm, o, s.ops.get());
  return s;
}

struct Batches {
  std::vector<std::vector<int32_t>> in, tg;
  explicit Batches(int n) {
    std::mt19937 g(11);
    for (int i = 0; i < n; ++i) {
      in.emplace_back(4 * 32);
      tg.emplace_back(4 * 32);
      for (auto& t : in.back()) t = int32_t(g() % 250);
      for (auto& t : tg.back()) t = int32_t(g() % 250);
    }
  }
  Batch at(int i, int B = 4) const { return Batch{in[i].data(), tg[i].data(), B, 128 / B}; }
};

TEST(GpuPipeline, HostSubmitsTheNextStepWhileTheGpuIsHeldInThisOne) {
  REQUIRE_GPU();
  if (!cuda_available()) GTEST_SKIP() << "this build cannot run the GPU engine (no NCCL or cuDNN)";
  for (WeightFormat f : {WeightFormat::Bf16, WeightFormat::Mxfp8, WeightFormat::Nvfp4}) {
    const int kSteps = 6, kGated = 3;
    const Batches data(kSteps);
    // Reference: one step at a time, the host waiting for each result.
    std::vector<StepResult> want;
    {
      Rig s = make_rig(f);
      for (int i = 0; i < kSteps; ++i) want.push_back(s.engine->train_step({data.at(i)}));
    }
    Rig s = make_rig(f);
    cudaStream_t st = static_cast<cudaStream_t>(s.ops->stream());
    int* open = nullptr;
    int* dopen = nullptr;
    ASSERT_EQ(cudaHostAlloc(&open, sizeof(int), cudaHostAllocMapped), cudaSuccess);
    *reinterpret_cast<volatile int*>(open) = 0;
    ASSERT_EQ(cudaHostGetDevicePointer(reinterpret_cast<void**>(&dopen), open, 0), cudaSuccess);
    std::vector<StepResult> got;
    for (int i = 0; i < kGated; ++i) {  // steady state: results read one step late
      s.engine->forward_backward(data.at(i));
      s.engine->launch_step();
      while (s.engine->results_pending() > 1) got.push_back(*s.engine->take_result(true));
    }
    gate_kernel<<<1, 1, 0, st>>>(dopen);
    ASSERT_EQ(cudaGetLastError(), cudaSuccess);
    std::atomic<bool> submitted{false}, watchdog_opened{false};
    std::thread watchdog([&] {
      const auto t0 = std::chrono::steady_clock::now();
      while (!submitted && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(60))
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      if (!submitted) {
        watchdog_opened = true;
        *reinterpret_cast<volatile int*>(open) = 1;
      }
    });
    const int64_t waits0 = s.ops->host_waits();
    cudaEvent_t end_of_n;
    ASSERT_EQ(cudaEventCreateWithFlags(&end_of_n, cudaEventDisableTiming), cudaSuccess);
    for (int i = kGated; i < kGated + 2; ++i) {  // steps N and N+1, submitted whole
      s.engine->forward_backward(data.at(i));
      s.engine->launch_step();
      if (i == kGated) ASSERT_EQ(cudaEventRecord(end_of_n, st), cudaSuccess);
      while (auto r = s.engine->take_result(false)) got.push_back(*r);  // never blocks
    }
    const bool n_still_running = cudaEventQuery(end_of_n) == cudaErrorNotReady;
    submitted = true;
    const int64_t waits = s.ops->host_waits() - waits0;
    *reinterpret_cast<volatile int*>(open) = 1;
    watchdog.join();
    EXPECT_FALSE(watchdog_opened) << to_string(f) << ": submitting steps N and N+1 waited for the GPU";
    EXPECT_TRUE(n_still_running) << to_string(f) << ": step N's work ended before the host had submitted N+1";
    EXPECT_EQ(waits, 0) << to_string(f) << ": stream synchronisations while submitting two steps";
    for (int i = kGated + 2; i < kSteps; ++i) {
      s.engine->forward_backward(data.at(i));
      s.engine->launch_step();
    }
    while (auto r = s.engine->take_result(true)) got.push_back(*r);
    ASSERT_EQ(got.size(), want.size()) << to_string(f);
    for (int i = 0; i < kSteps; ++i) {
      EXPECT_TRUE(mxdp::testing::same_bits(got[i].loss, want[i].loss))
          << to_string(f) << " step " << i + 1 << ": " << got[i].loss << " vs " << want[i].loss;
      EXPECT_TRUE(mxdp::testing::same_bits(got[i].grad_norm, want[i].grad_norm)) << to_string(f) << " step " << i + 1;
      EXPECT_EQ(got[i].version, want[i].version);
      EXPECT_EQ(got[i].iteration, i + 1);
    }
    EXPECT_LT(want[0].grad_norm, 1e6);
    EXPECT_GT(want[0].grad_norm, 0.5) << "clip 0.5 must bind for the coefficient to be tested";
    cudaEventDestroy(end_of_n);
    cudaFreeHost(open);
  }
}

// Steps 1-3 at B 4 (eager, captured, replayed), two evals at B 2 and T 64 (the
// activations move: new keys), steps 4-7 back at B 4, then an eval at B 4.
struct GraphRun {
  std::vector<StepResult> steps;
  std::vector<double> evals;
  std::vector<std::vector<float>> masters;
  cuda::GraphStats stats;
};
GraphRun run_for_graphs(WeightFormat f, bool cuda_graphs) {
  Rig s = make_rig(f, cuda_graphs);
  const Batches data(8);
  GraphRun r;
  for (int i = 0; i < 3; ++i) r.steps.push_back(s.engine->train_step({data.at(i)}));
  for (int e = 0; e < 2; ++e) r.evals.push_back(s.engine->eval({data.at(7, 2)}));
  for (int i = 3; i < 7; ++i) r.steps.push_back(s.engine->train_step({data.at(i)}));
  r.evals.push_back(s.engine->eval({data.at(7)}));
  for (int p = 0; p < int(s.model->params().size()); ++p) r.masters.push_back(s.engine->full_master(p));
  r.stats = cuda::graph_stats(*s.model);
  return r;
}

TEST(GpuGraphs, ReplaysAreBitwiseTheEagerRunAcrossShapesAndEvals) {
  REQUIRE_GPU();
  if (!cuda_available()) GTEST_SKIP() << "this build cannot run the GPU engine (no NCCL or cuDNN)";
  for (WeightFormat f : {WeightFormat::Bf16, WeightFormat::Mxfp8, WeightFormat::Nvfp4}) {
    const GraphRun eager = run_for_graphs(f, false), graphs = run_for_graphs(f, true);
    EXPECT_EQ(eager.stats.launches, 0) << to_string(f);
    // 2 layers: 4 forward stages + the loss + 3 backward stages a train step.
    // Steps 2 and 3, then 5, 6, 7 (step 4 meets the shape again) at least.
    EXPECT_GE(graphs.stats.launches, 5 * 8) << to_string(f) << ": the graphs were not used";
    EXPECT_GT(graphs.stats.graphs, 0) << to_string(f);
    ASSERT_EQ(graphs.steps.size(), eager.steps.size());
    for (size_t i = 0; i < eager.steps.size(); ++i) {
      EXPECT_TRUE(mxdp::testing::same_bits(graphs.steps[i].loss, eager.steps[i].loss))
          << to_string(f) << " step " << i + 1 << ": " << graphs.steps[i].loss << " vs " << eager.steps[i].loss;
      EXPECT_TRUE(mxdp::testing::same_bits(graphs.steps[i].grad_norm, eager.steps[i].grad_norm))
          << to_string(f) << " step " << i + 1;
    }
    for (size_t e = 0; e < eager.evals.size(); ++e)
      EXPECT_TRUE(mxdp::testing::same_bits(graphs.evals[e], eager.evals[e])) << to_string(f) << " eval " << e;
    for (size_t p = 0; p < eager.masters.size(); ++p)
      EXPECT_TRUE(mxdp::testing::same_bits(graphs.masters[p], eager.masters[p])) << to_string(f) << " param " << p;
    EXPECT_NE(eager.steps.front().loss, eager.steps.back().loss) << "the run must train";
  }
}

}  // namespace
