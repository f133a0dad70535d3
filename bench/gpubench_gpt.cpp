// One GPT training step on one GPU, end to end: the GPU GPT (forward, backward)
// through the data-parallel engine (gather + unpack, grad reduce, grad norm,
// AdamW, stage) for each weight format. Prints one JSON line per format:
// ms/step after warm-up (the timed steps with each result read one step late,
// as the trainer runs; ms_synced: the median step run alone), tokens/s, peak GPU memory (device memory taken
// from before the model is built to the end of the timed steps: every
// allocation mxdp makes, cuBLASLt/cuDNN workspaces included), MFU against the
// bf16 matrix rate measured in the same run, whether two runs from the same
// seed gave bitwise the same losses, host_submit_ms (host time in one step's
// submission, its wait for the step before included) and cuda_graphs (graphs
// the GPU GPT holds; MXDP_CUDA_GRAPHS=0 for none).
//
//   gpubench_gpt [model=gpt2-124m] [batch=16] [seq=1024] [steps=30] [formats=bf16,mxfp8,nvfp4]
//                [profile | profile-pipelined]
//
// A format "F+fp8" runs weight format F with FP8 compute (--compute-dtype fp8:
// the block linears' GEMMs in FP8, docs/fp8.md); F must be fp8b128.
// "F+fp8:S:E" keeps the first S and the last E blocks in bf16
// (--num-layers-at-start-in-bf16 S --num-layers-at-end-in-bf16 E).
//
// With "profile" as the sixth argument it runs 5 warm-up steps and then one
// step between cudaProfilerStart and cudaProfilerStop, for
// `ncu --profile-from-start off` (scripts/profile_step.py), and prints nothing else;
// "profile-pipelined" profiles `steps` steps run as the trainer runs them (each
// result read one step late: scripts/step_timeline.py --pipelined).
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>
#include <sstream>
#include <string>

#include "gpu_step_bench.h"
#include "models/gpt2/cuda/gpt_cuda.h"
#include "models/gpt2/spec.h"
#include "util/cuda_check.h"
#include "engine/engine.h"
#include "train/runtime.h"

using namespace mxdp;

namespace {

struct Result {
  bench::StepTimes t;
  double peak_gib = 0;
  cuda::GraphStats graphs;
};

using bench::Variant;

Result run(Communicator& comm, const GptConfig& mc, Variant v, int B, int T, int steps, int warmup,
           bench::Profile profile = bench::Profile::None) {
  const size_t before = bench::used_bytes();
  auto ops = make_engine_ops(Device::Cuda);
  auto model = make_model(Device::Cuda, gpt2_model_config(mc), *ops);
  model->init_weights(1337);
  model->set_fp8_compute(v.fp8);
  DpOptions o;
  bench::apply_variant(v, o);
  o.bucket_size = 40000000;
  o.lr = 6e-4;
  o.min_lr = 6e-5;
  o.warmup_steps = 10;
  Result r;
  {
    DataParallel engine(*model, comm, o, ops.get());
    const bench::RandomBatch data(B, T, mc.vocab);
    const Batch batch{data.in.data(), data.tgt.data(), B, T};
    r.t = bench::time_steps(engine, batch, steps, warmup, profile);
    r.graphs = cuda::graph_stats(dynamic_cast<const GptModel&>(*model));
  }
  r.peak_gib = double(r.t.peak - before) / double(1ull << 30);
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  std::string model = argc > 1 ? argv[1] : "gpt2-124m";
  const int B = argc > 2 ? std::atoi(argv[2]) : 16, T = argc > 3 ? std::atoi(argv[3]) : 1024;
  const int steps = argc > 4 ? std::atoi(argv[4]) : 30;
  std::string formats = argc > 5 ? argv[5] : "bf16,mxfp8,nvfp4";
  const bench::Profile profile = argc > 6 ? bench::parse_profile(argv[6]) : bench::Profile::None;
  try {
    auto comm = make_job_communicator(Device::Cuda, {});
    const GptConfig mc = gpt_config(model);
    if (profile != bench::Profile::None) {
      run(*comm, mc, bench::parse_variant(formats), B, T, profile == bench::Profile::Synced ? 1 : steps, 5, profile);
      return 0;
    }
    cudaStream_t s;
    MXDP_CUDA_CHECK(cudaStreamCreate(&s));
    const double tflops = bench::matmul_tflops(s);
    // Training FLOPs per token: 6 per parameter (the tied head counted once,
    // as a GEMM) plus causal attention's 6 * n_layer * T * d_model.
    const double flops_tok = 6.0 * double(gpt_num_parameters(mc)) + 6.0 * mc.n_layer * T * mc.d_model;
    std::stringstream fs(formats);
    std::string name;
    while (std::getline(fs, name, ',')) {
      const Variant f = bench::parse_variant(name);
      Result a = run(*comm, mc, f, B, T, steps, 5);
      Result b = run(*comm, mc, f, B, T, 0, 5);  // the same seed again: the first 5 losses must be the same bits
      bool same = true;
      for (size_t i = 0; i < b.t.losses.size(); ++i)
        same &= std::memcmp(&a.t.losses[i], &b.t.losses[i], sizeof(double)) == 0;
      const double tok_s = B * T / (a.t.ms * 1e-3);
      std::printf("{\"system\": \"mxdp-%s\", \"model\": \"%s\", \"batch\": %d, \"seq\": %d, \"ms_per_step\": %.3f, "
                  "\"ms_synced\": %.3f, \"host_submit_ms\": %.3f, \"tokens_per_s\": %.0f, \"peak_gib\": %.3f, \"mfu\": %.4f, \"matmul_tflops\": %.1f, "
                  "\"cuda_graphs\": %lld, \"bitwise_repeatable\": %s, \"loss\": %.4f}\n",
                  name.c_str(), model.c_str(), B, T, a.t.ms, a.t.ms_synced, a.t.host_ms, tok_s, a.peak_gib, tok_s * flops_tok / (tflops * 1e12),
                  tflops, (long long)a.graphs.graphs, same ? "true" : "false", a.t.losses.back());
      std::fflush(stdout);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpubench_gpt: %s\n", e.what());
    return 1;
  }
  return 0;
}
