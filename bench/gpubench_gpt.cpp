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
//   gpubench_gpt [model=gpt2-124m] [batch=16] [seq=1024] [steps=30] [formats=bf16,mxfp8,nvfp4] [profile]
//
// A format "F+fp8" runs weight format F with FP8 compute (--compute-dtype fp8:
// the block linears' GEMMs in FP8, docs/fp8.md); F must be fp8b128.
//
// With "profile" as the sixth argument it runs 5 warm-up steps and then one
// step between cudaProfilerStart and cudaProfilerStop, for
// `ncu --profile-from-start off` (scripts/profile_step.py), and prints nothing else.
#include <cuda_profiler_api.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "models/cuda/gemm.h"
#include "models/gpt2/cuda/gpt_cuda.h"
#include "models/gpt2/spec.h"
#include "util/cuda_check.h"
#include "engine/engine.h"
#include "train/runtime.h"

using namespace mxdp;

namespace {

size_t used_bytes() {
  size_t free = 0, total = 0;
  MXDP_CUDA_CHECK(cudaMemGetInfo(&free, &total));
  return total - free;
}

// bf16 GEMM rate of this GPU now (8192^3 through the same cuBLASLt path as the model).
double matmul_tflops(cudaStream_t s) {
  const int n = 8192;
  std::vector<uint16_t> h(size_t(n) * n);
  std::mt19937 g(1);
  for (auto& x : h) x = uint16_t(0x3c00 + (g() & 0xff));  // bf16 values near 0.008..
  uint16_t *a, *b, *c;
  for (uint16_t** p : {&a, &b, &c}) MXDP_CUDA_CHECK(cudaMalloc(p, h.size() * 2));
  MXDP_CUDA_CHECK(cudaMemcpy(a, h.data(), h.size() * 2, cudaMemcpyHostToDevice));
  MXDP_CUDA_CHECK(cudaMemcpy(b, h.data(), h.size() * 2, cudaMemcpyHostToDevice));
  double best = 0;
  {
    cuda::Gemm gemm(s);
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    for (int i = 0; i < 3; ++i) gemm.forward(c, a, b, nullptr, n, n, n);
    for (int rep = 0; rep < 3; ++rep) {
      cudaEventRecord(e0, s);
      for (int i = 0; i < 10; ++i) gemm.forward(c, a, b, nullptr, n, n, n);
      cudaEventRecord(e1, s);
      cudaEventSynchronize(e1);
      float ms = 0;
      cudaEventElapsedTime(&ms, e0, e1);
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
  cuda::GraphStats graphs;
};

// "bf16", "mxfp8", ..., or "fp8b128+fp8" (FP8 compute).
struct Variant {
  WeightFormat format;
  bool fp8_compute;
};
Variant parse_variant(const std::string& name) {
  const size_t plus = name.find('+');
  if (plus == std::string::npos) return {parse_weight_format(name), false};
  MXDP_CHECK(name.substr(plus) == "+fp8", "unknown variant '", name, "' (a weight format, or FORMAT+fp8)");
  return {parse_weight_format(name.substr(0, plus)), true};
}

Result run(Communicator& comm, const GptConfig& mc, Variant v, int B, int T, int steps, int warmup,
           bool profile = false) {
  const WeightFormat f = v.format;
  const size_t before = used_bytes();
  auto ops = make_engine_ops(Device::Cuda);
  auto model = make_model(Device::Cuda, gpt2_model_config(mc), *ops);
  model->init_weights(1337);
  model->set_fp8_compute(v.fp8_compute);
  DpOptions o;
  o.weight_format = f;
  o.compute_dtype = v.fp8_compute ? LinearCompute::Fp8 : LinearCompute::Bf16;
  o.reuse_grad_buf = f == WeightFormat::Mxfp8;
  o.bucket_size = 40000000;
  o.lr = 6e-4;
  o.min_lr = 6e-5;
  o.warmup_steps = 10;
  Result r;
  size_t peak = 0;
  {
    DataParallel engine(*model, comm, o, ops.get());
    std::mt19937 g(7);
    std::vector<int32_t> in(size_t(B) * T), tgt(in.size());
    for (size_t i = 0; i < in.size(); ++i) {
      in[i] = int32_t(g() % mc.vocab);
      tgt[i] = int32_t(g() % mc.vocab);
    }
    const Batch batch{in.data(), tgt.data(), B, T};
    const auto step = [&] {
      engine.forward_backward(batch);
      engine.launch_step();
    };
    const auto take = [&](bool all) {  // the results read back so far (all: every one)
      while (engine.results_pending() > (all ? 0 : 1)) r.losses.push_back(engine.take_result(true)->loss);
    };
    for (int i = 0; i < warmup; ++i) {
      step();
      take(true);
      peak = std::max(peak, used_bytes());
    }
    MXDP_CUDA_CHECK(cudaDeviceSynchronize());
    if (profile) MXDP_CUDA_CHECK(cudaProfilerStart());
    // Synced: each step alone (the median); the host waits for its result.
    std::vector<double> times;
    for (int i = 0; i < steps; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      step();
      take(true);
      times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      peak = std::max(peak, used_bytes());
    }
    if (profile) {
      MXDP_CUDA_CHECK(cudaDeviceSynchronize());
      MXDP_CUDA_CHECK(cudaProfilerStop());
    }
    // Pipelined, as the trainer runs: each result read one step late, so the
    // host submits step i+1 while the GPU runs step i (the window's mean).
    const auto t0 = std::chrono::steady_clock::now();
    double submit = 0;  // host time in step(): above the GPU's step time, the host is the bottleneck
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
    r.graphs = cuda::graph_stats(dynamic_cast<const GptModel&>(*model));
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

}  // namespace

int main(int argc, char** argv) {
  std::string model = argc > 1 ? argv[1] : "gpt2-124m";
  const int B = argc > 2 ? std::atoi(argv[2]) : 16, T = argc > 3 ? std::atoi(argv[3]) : 1024;
  const int steps = argc > 4 ? std::atoi(argv[4]) : 30;
  std::string formats = argc > 5 ? argv[5] : "bf16,mxfp8,nvfp4";
  const bool profile = argc > 6 && std::string(argv[6]) == "profile";
  try {
    auto comm = make_job_communicator(Device::Cuda, {});
    const GptConfig mc = gpt_config(model);
    if (profile) {
      run(*comm, mc, parse_variant(formats), B, T, 1, 5, /*profile=*/true);
      return 0;
    }
    cudaStream_t s;
    MXDP_CUDA_CHECK(cudaStreamCreate(&s));
    const double tflops = matmul_tflops(s);
    // Training FLOPs per token: 6 per parameter (the tied head counted once,
    // as a GEMM) plus causal attention's 6 * n_layer * T * d_model.
    const double flops_tok = 6.0 * double(gpt_num_parameters(mc)) + 6.0 * mc.n_layer * T * mc.d_model;
    std::stringstream fs(formats);
    std::string name;
    while (std::getline(fs, name, ',')) {
      const Variant f = parse_variant(name);
      Result a = run(*comm, mc, f, B, T, steps, 5);
      Result b = run(*comm, mc, f, B, T, 0, 5);  // the same seed again: the first 5 losses must be the same bits
      bool same = true;
      for (size_t i = 0; i < b.losses.size(); ++i) same &= std::memcmp(&a.losses[i], &b.losses[i], sizeof(double)) == 0;
      const double tok_s = B * T / (a.ms * 1e-3);
      std::printf("{\"system\": \"mxdp-%s\", \"model\": \"%s\", \"batch\": %d, \"seq\": %d, \"ms_per_step\": %.3f, "
                  "\"ms_synced\": %.3f, \"host_submit_ms\": %.3f, \"tokens_per_s\": %.0f, \"peak_gib\": %.3f, \"mfu\": %.4f, \"matmul_tflops\": %.1f, "
                  "\"cuda_graphs\": %lld, \"bitwise_repeatable\": %s, \"loss\": %.4f}\n",
                  name.c_str(), model.c_str(), B, T, a.ms, a.ms_synced, a.host_ms, tok_s, a.peak_gib, tok_s * flops_tok / (tflops * 1e12),
                  tflops, (long long)a.graphs.graphs, same ? "true" : "false", a.losses.back());
      std::fflush(stdout);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpubench_gpt: %s\n", e.what());
    return 1;
  }
  return 0;
}
