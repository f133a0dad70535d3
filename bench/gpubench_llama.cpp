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
//   gpubench_llama [model=qwen2.5-0.5b] [batch=8] [seq=2048] [steps=20] [formats=bf16] [warmup=3]
//
// `model` is a llama preset (smollm2-135m, smollm2-360m, qwen2.5-0.5b,
// llama3.2-1b) or a Hugging Face model directory (its config.json).
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "models/cuda/gemm.h"
#include "models/llama/cuda/llama_cuda.h"
#include "models/llama/spec.h"
#include "models/registry.h"
#include "train/runtime.h"
#include "util/check.h"
#include "util/cuda_check.h"

using namespace mxdp;

namespace {

size_t used_bytes() {
  size_t free = 0, total = 0;
  MXDP_CUDA_CHECK(cudaMemGetInfo(&free, &total));
  return total - free;
}

// bf16 GEMM rate of this GPU now (8192^3 through the model's cuBLASLt path).
double matmul_tflops(cudaStream_t s) {
  const int n = 8192;
  std::vector<uint16_t> h(size_t(n) * n);
  std::mt19937 g(1);
  for (auto& x : h) x = uint16_t(0x3c00 + (g() & 0xff));
  uint16_t *a, *b, *c;
  for (uint16_t** p : {&a, &b, &c}) MXDP_CUDA_CHECK(cudaMalloc(p, h.size() * 2));
  MXDP_CUDA_CHECK(cudaMemcpy(a, h.data(), h.size() * 2, cudaMemcpyHostToDevice));
  MXDP_CUDA_CHECK(cudaMemcpy(b, h.data(), h.size() * 2, cudaMemcpyHostToDevice));
  double best = 0;
  {
    cuda::Gemm gemm(s);
    cudaEvent_t e0, e1;
    MXDP_CUDA_CHECK(cudaEventCreate(&e0));
    MXDP_CUDA_CHECK(cudaEventCreate(&e1));
    for (int i = 0; i < 3; ++i) gemm.forward(c, a, b, nullptr, n, n, n);
    for (int rep = 0; rep < 3; ++rep) {
      MXDP_CUDA_CHECK(cudaEventRecord(e0, s));
      for (int i = 0; i < 10; ++i) gemm.forward(c, a, b, nullptr, n, n, n);
      MXDP_CUDA_CHECK(cudaEventRecord(e1, s));
      MXDP_CUDA_CHECK(cudaEventSynchronize(e1));
      float ms = 0;
      MXDP_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
      best = std::max(best, 10 * 2.0 * n * double(n) * n / (ms * 1e-3) / 1e12);
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
  }
  for (uint16_t* p : {a, b, c}) cudaFree(p);
  return best;
}

struct Result {
  double ms = 0, ms_synced = 0, host_ms = 0, peak_gib = 0;
  std::vector<double> losses;
  int64_t graphs = 0;
};

Result run(Communicator& comm, const ModelConfig& mc, WeightFormat f, int B, int T, int steps, int warmup) {
  const size_t before = used_bytes();
  auto ops = make_engine_ops(Device::Cuda);
  auto model = make_model(Device::Cuda, mc, *ops);
  model->init_weights(1337);
  DpOptions o;
  o.weight_format = f;
  o.reuse_grad_buf = f == WeightFormat::Mxfp8;
  o.bucket_size = 40000000;
  o.clip_grad = 1.0;
  o.lr = 6e-4;
  o.min_lr = 6e-5;
  o.warmup_steps = 10;
  Result r;
  size_t peak = 0;
  {
    DataParallel engine(*model, comm, o, ops.get());
    const int V = model->vocab();
    std::mt19937 g(7);
    std::vector<int32_t> in(size_t(B) * T), tgt(in.size());
    for (size_t i = 0; i < in.size(); ++i) {
      in[i] = int32_t(g() % uint32_t(V));
      tgt[i] = int32_t(g() % uint32_t(V));
    }
    const Batch batch{in.data(), tgt.data(), B, T};
    const auto step = [&] {
      engine.forward_backward(batch);
      engine.launch_step();
    };
    const auto take = [&](bool all) {
      while (engine.results_pending() > (all ? 0 : 1)) r.losses.push_back(engine.take_result(true)->loss);
    };
    for (int i = 0; i < warmup; ++i) {
      step();
      take(true);
      peak = std::max(peak, used_bytes());
    }
    MXDP_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<double> times;
    for (int i = 0; i < steps; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      step();
      take(true);
      times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      peak = std::max(peak, used_bytes());
    }
    const auto t0 = std::chrono::steady_clock::now();
    double submit = 0;
    for (int i = 0; i < steps; ++i) {
      const auto s0 = std::chrono::steady_clock::now();
      step();
      submit += std::chrono::duration<double>(std::chrono::steady_clock::now() - s0).count();
      take(false);
    }
    take(true);
    const double window = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    MXDP_CUDA_CHECK(cudaDeviceSynchronize());
    peak = std::max(peak, used_bytes());
    r.graphs = cuda::llama_cuda_graphs(*model);
    std::sort(times.begin(), times.end());
    if (!times.empty()) {
      r.ms_synced = times[times.size() / 2] * 1e3;
      r.ms = window / steps * 1e3;
      r.host_ms = submit / steps * 1e3;
    }
  }
  r.peak_gib = double(peak - before) / double(1ull << 30);
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
  const int warmup = argc > 6 ? std::atoi(argv[6]) : 3;
  try {
    ModelOverrides ov;
    ov.max_seq = T;  // presets whose max_seq is shorter still run at T (RoPE has no table)
    const ModelConfig mc = model_config(model, model.find('/') == std::string::npos ? ov : ModelOverrides{});
    MXDP_CHECK(mc.arch == "llama", "gpubench_llama benchmarks the Llama family; ", model, " is a ", mc.arch,
               " model (bench/gpubench_gpt runs GPT-2)");
    const LlamaConfig lc = llama_config_of(mc);
    auto comm = make_job_communicator(Device::Cuda, {});
    cudaStream_t s;
    MXDP_CUDA_CHECK(cudaStreamCreate(&s));
    const double tflops = matmul_tflops(s);
    std::stringstream fs(formats);
    std::string name;
    while (std::getline(fs, name, ',')) {
      const WeightFormat f = parse_weight_format(name);
      Result a = run(*comm, mc, f, B, T, steps, warmup);
      Result b = run(*comm, mc, f, B, T, 0, warmup);  // the same seed again: the same first losses, bit for bit
      bool same = b.losses.size() == size_t(warmup);
      for (size_t i = 0; i < b.losses.size(); ++i) same &= std::memcmp(&a.losses[i], &b.losses[i], sizeof(double)) == 0;
      const double tok_s = B * T / (a.ms * 1e-3);
      std::printf("{\"system\": \"mxdp-%s\", \"model\": \"%s\", \"batch\": %d, \"seq\": %d, \"ms_per_step\": %.3f, "
                  "\"ms_synced\": %.3f, \"host_submit_ms\": %.3f, \"tokens_per_s\": %.0f, \"peak_gib\": %.3f, "
                  "\"mfu\": %.4f, \"matmul_tflops\": %.1f, \"flops_per_token\": %.6g, \"cuda_graphs\": %lld, "
                  "\"bitwise_repeatable\": %s, \"loss\": %.4f}\n",
                  name.c_str(), model.c_str(), B, T, a.ms, a.ms_synced, a.host_ms, tok_s, a.peak_gib,
                  tok_s * flops_per_token(lc, T) / (tflops * 1e12), tflops, flops_per_token(lc, T),
                  (long long)a.graphs, same ? "true" : "false", a.losses.empty() ? 0.0 : a.losses.back());
      std::fflush(stdout);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpubench_llama: %s\n", e.what());
    return 1;
  }
  return 0;
}
