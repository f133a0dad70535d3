// One Llama-family training step on one GPU, end to end: the GPU Llama
// (models/llama/cuda/) through the data-parallel engine (gather + unpack,
// grad reduce, grad norm and clip at 1.0, AdamW), for each weight format.
// The measurement is gpubench_gpt's: one JSON line per format with ms/step
// after warm-up (results read one step late, as the trainer runs; ms_synced:
// the median step run alone), tokens/s, peak GPU memory (device memory taken
// from before the model is built to the end of the timed steps), MFU against
// the bf16 matrix rate measured in the same run, and whether a second run from
// the same seed gave bitwise the same first losses.
//
//   gpubench_llama [model=qwen2.5-0.5b] [batch=8] [seq=2048] [steps=20] [formats=bf16]
//                  [warmup=3 | profile | profile-pipelined] [micro=1]
//
// A format "fp8b128+fp8" (or "fp8b128+fp8:S:E") runs FP8 compute, as
// gpubench_gpt's (bench/gpu_step_bench.h's Variant).
//
// micro: micro-batches of `batch` x `seq` tokens per optimizer step (gradient
// accumulation, the engine's micro_batches); tokens/s counts all of them.
// llm.q's published one-H100 figures are at batch 32, seq 1024, micro 16.
//
// "profile" in place of the warm-up count: gpubench_gpt's profile mode (5
// warm-up steps, one step between cudaProfilerStart and cudaProfilerStop, no
// output), for scripts/profile_step.py; "profile-pipelined", `steps` steps
// run as the trainer runs them, for scripts/step_timeline.py --pipelined.
//
// `model` is a llama preset (smollm2-135m, smollm2-360m, qwen2.5-0.5b,
// llama3.2-1b) or a Hugging Face model directory (its config.json).
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>
#include <sstream>
#include <string>

#include "gpu_step_bench.h"
#include "engine/engine.h"
#include "models/llama/cuda/llama_cuda.h"
#include "models/llama/spec.h"
#include "models/registry.h"
#include "train/runtime.h"
#include "util/check.h"
#include "util/cuda_check.h"

using namespace mxdp;

namespace {

struct Result {
  bench::StepTimes t;
  double peak_gib = 0;
  int64_t graphs = 0;
};

Result run(Communicator& comm, const ModelConfig& mc, const bench::Variant& v, int B, int T, int micro, int steps,
           int warmup, bench::Profile profile = bench::Profile::None) {
  const size_t before = bench::used_bytes();
  auto ops = make_engine_ops(Device::Cuda);
  auto model = make_model(Device::Cuda, mc, *ops);
  model->init_weights(1337);
  model->set_fp8_compute(v.fp8);
  DpOptions o;
  bench::apply_variant(v, o);
  o.bucket_size = 40000000;
  o.clip_grad = 1.0;
  o.micro_batches = micro;
  o.lr = 6e-4;
  o.min_lr = 6e-5;
  o.warmup_steps = 10;
  Result r;
  {
    DataParallel engine(*model, comm, o, ops.get());
    const bench::RandomBatch data(B, T, model->vocab());
    const Batch batch{data.in.data(), data.tgt.data(), B, T};
    r.t = bench::time_steps(engine, batch, steps, warmup, profile);
    r.graphs = cuda::llama_cuda_graphs(*model);
  }
  r.peak_gib = double(r.t.peak - before) / double(1ull << 30);
  return r;
}

// Training FLOPs per token: 6 per weight a GEMM reads (the head once; an
// untied embedding is a lookup, not counted), plus causal attention's
// 6 * n_layer * T * (n_head * head_dim).
double flops_per_token(const LlamaConfig& c, int T) {
  const double embed = double(c.vocab) * c.d_model;
  const double gemm_params = double(llama_num_parameters(c)) - (c.tie_embeddings ? 0.0 : embed);
  return 6.0 * gemm_params + 6.0 * c.n_layer * double(T) * c.q_dim();
}

}  // namespace

int main(int argc, char** argv) {
  const std::string model = argc > 1 ? argv[1] : "qwen2.5-0.5b";
  const int B = argc > 2 ? std::atoi(argv[2]) : 8, T = argc > 3 ? std::atoi(argv[3]) : 2048;
  const int steps = argc > 4 ? std::atoi(argv[4]) : 20;
  const std::string formats = argc > 5 ? argv[5] : "bf16";
  const bench::Profile profile = argc > 6 ? bench::parse_profile(argv[6]) : bench::Profile::None;
  const int warmup = argc > 6 && profile == bench::Profile::None ? std::atoi(argv[6]) : 3;
  const int micro = argc > 7 ? std::atoi(argv[7]) : 1;
  try {
    MXDP_CHECK(B >= 1 && T >= 1 && steps >= 1 && warmup >= 0 && micro >= 1,
               "gpubench_llama needs batch, seq, steps and micro >= 1 and warmup >= 0");
    ModelOverrides ov;
    ov.max_seq = T;  // presets whose max_seq is shorter still run at T (RoPE has no table)
    const ModelConfig mc = model_config(model, model.find('/') == std::string::npos ? ov : ModelOverrides{});
    MXDP_CHECK(mc.arch == "llama", "gpubench_llama benchmarks the Llama family; ", model, " is a ", mc.arch,
               " model (bench/gpubench_gpt runs GPT-2)");
    const LlamaConfig lc = llama_config_of(mc);
    auto comm = make_job_communicator(Device::Cuda, {});
    if (profile != bench::Profile::None) {
      run(*comm, mc, bench::parse_variant(formats), B, T, micro, profile == bench::Profile::Synced ? 1 : steps, 5,
          profile);
      return 0;
    }
    cudaStream_t s;
    MXDP_CUDA_CHECK(cudaStreamCreate(&s));
    const double tflops = bench::matmul_tflops(s);
    std::stringstream fs(formats);
    std::string name;
    while (std::getline(fs, name, ',')) {
      const bench::Variant f = bench::parse_variant(name);
      Result a = run(*comm, mc, f, B, T, micro, steps, warmup);
      Result b = run(*comm, mc, f, B, T, micro, 0, warmup);  // the same seed again: the same first losses, bit for bit
      bool same = b.t.losses.size() == size_t(warmup);
      for (size_t i = 0; i < b.t.losses.size(); ++i)
        same &= std::memcmp(&a.t.losses[i], &b.t.losses[i], sizeof(double)) == 0;
      const double tok_s = double(B) * T * micro / (a.t.ms * 1e-3);
      std::printf("{\"system\": \"mxdp-%s\", \"model\": \"%s\", \"batch\": %d, \"seq\": %d, \"micro\": %d, \"ms_per_step\": %.3f, "
                  "\"ms_synced\": %.3f, \"host_submit_ms\": %.3f, \"tokens_per_s\": %.0f, \"peak_gib\": %.3f, "
                  "\"mfu\": %.4f, \"matmul_tflops\": %.1f, \"flops_per_token\": %.6g, \"cuda_graphs\": %lld, "
                  "\"bitwise_repeatable\": %s, \"loss\": %.4f}\n",
                  name.c_str(), model.c_str(), B, T, micro, a.t.ms, a.t.ms_synced, a.t.host_ms, tok_s, a.peak_gib,
                  tok_s * flops_per_token(lc, T) / (tflops * 1e12), tflops, flops_per_token(lc, T),
                  (long long)a.graphs, same ? "true" : "false", a.t.losses.empty() ? 0.0 : a.t.losses.back());
      std::fflush(stdout);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpubench_llama: %s\n", e.what());
    return 1;
  }
  return 0;
}
