// What gpubench_gpt and gpubench_llama share: the variants they run (weight
// format and FP8 compute), the device memory in use, the
// bf16 GEMM rate of this GPU now, and the timing of whole training steps
// through the engine (synced and pipelined, optionally one step under the
// profiler for `ncu --profile-from-start off`, scripts/profile_step.py).
#pragma once

#include <cuda_profiler_api.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "models/cuda/gemm.h"
#include "util/cuda_check.h"

namespace mxdp::bench {

// "bf16", "mxfp8", ..., "fp8b128+fp8" (FP8 compute: --compute-dtype fp8, the
// block linears' GEMMs in FP8, docs/fp8.md) or "fp8b128+fp8:S:E" (FP8
// compute with S blocks at the start and E at the end in bf16:
// --num-layers-at-start-in-bf16 S --num-layers-at-end-in-bf16 E).
struct Variant {
  WeightFormat format;
  Fp8Compute fp8;
};
inline Variant parse_variant(const std::string& name) {
  const size_t plus = name.find('+');
  if (plus == std::string::npos) return {parse_weight_format(name), {}};
  Variant v{parse_weight_format(name.substr(0, plus)), {.on = true}};
  const std::string rest = name.substr(plus);
  char tail = 0;
  MXDP_CHECK(rest == "+fp8" || std::sscanf(rest.c_str(), "+fp8:%d:%d%c", &v.fp8.bf16_first, &v.fp8.bf16_last, &tail) == 2,
             "unknown variant '", name, "' (a weight format, FORMAT+fp8, or FORMAT+fp8:S:E)");
  return v;
}
// The engine options of variant v (the model is switched with set_fp8_compute(v.fp8)).
inline void apply_variant(const Variant& v, DpOptions& o) {
  o.weight_format = v.format;
  o.compute_dtype = v.fp8.on ? LinearCompute::Fp8 : LinearCompute::Bf16;
  o.num_layers_at_start_in_bf16 = v.fp8.bf16_first;
  o.num_layers_at_end_in_bf16 = v.fp8.bf16_last;
  o.reuse_grad_buf = v.format == WeightFormat::Mxfp8;
}

inline size_t used_bytes() {
  size_t free = 0, total = 0;
  MXDP_CUDA_CHECK(cudaMemGetInfo(&free, &total));
  return total - free;
}

// bf16 GEMM rate of this GPU now (8192^3 through the models' cuBLASLt path), TFLOP/s.
inline double matmul_tflops(cudaStream_t s) {
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
    MXDP_CUDA_CHECK(cudaEventDestroy(e0));
    MXDP_CUDA_CHECK(cudaEventDestroy(e1));
  }
  for (uint16_t* p : {a, b, c}) MXDP_CUDA_CHECK(cudaFree(p));
  return best;
}

struct StepTimes {
  double ms = 0;         // pipelined: each result read one step late, as the trainer runs (the window's mean)
  double ms_synced = 0;  // the median step run alone (the host waits for its result)
  double host_ms = 0;    // host time in one step's submission (its wait for the step before included)
  size_t peak = 0;       // device memory in use, the largest seen
  std::vector<double> losses;
};

// Random tokens and targets in [0, vocab), the same for every run of a benchmark.
struct RandomBatch {
  std::vector<int32_t> in, tgt;
  RandomBatch(int B, int T, int vocab) : in(size_t(B) * T), tgt(in.size()) {
    std::mt19937 g(7);
    for (size_t i = 0; i < in.size(); ++i) {
      in[i] = int32_t(g() % uint32_t(vocab));
      tgt[i] = int32_t(g() % uint32_t(vocab));
    }
  }
};

// What runs between cudaProfilerStart and cudaProfilerStop, for
// scripts/profile_step.py and scripts/step_timeline.py: nothing (a timed run),
// one synced step (the benchmarks' "profile" argument), or `steps` pipelined
// steps, each result read one step late as the trainer runs ("profile-pipelined").
enum class Profile { None, Synced, Pipelined };

inline Profile parse_profile(const std::string& arg) {
  if (arg == "profile") return Profile::Synced;
  if (arg == "profile-pipelined") return Profile::Pipelined;
  return Profile::None;
}

// `warmup` steps, then `steps` synced steps, then `steps` pipelined ones;
// under a profile only the profiled steps (after the warm-up). A step is the
// engine's options().micro_batches forward/backward passes over `batch`
// (gradient accumulation), then the optimizer step.
inline StepTimes time_steps(DataParallel& engine, const Batch& batch, int steps, int warmup,
                            Profile profile = Profile::None) {
  StepTimes r;
  const auto step = [&] {
    for (int m = 0; m < engine.options().micro_batches; ++m) engine.forward_backward(batch);
    engine.launch_step();
  };
  const auto take = [&](bool all) {  // the results read back so far (all: every one)
    while (engine.results_pending() > (all ? 0 : 1)) r.losses.push_back(engine.take_result(true)->loss);
  };
  using clock = std::chrono::steady_clock;
  const auto secs = [](clock::time_point a) { return std::chrono::duration<double>(clock::now() - a).count(); };
  // `steps` pipelined steps, each result read one step late as the trainer
  // runs, then the rest read back; the host time spent submitting them.
  const auto pipelined = [&] {
    double submit = 0;
    for (int i = 0; i < steps; ++i) {
      const auto s0 = clock::now();
      step();
      submit += secs(s0);
      take(false);
    }
    take(true);
    return submit;
  };
  for (int i = 0; i < warmup; ++i) {
    step();
    take(true);
    r.peak = std::max(r.peak, used_bytes());
  }
  MXDP_CUDA_CHECK(cudaDeviceSynchronize());
  if (profile == Profile::Pipelined) {
    MXDP_CUDA_CHECK(cudaProfilerStart());
    pipelined();
    MXDP_CUDA_CHECK(cudaDeviceSynchronize());
    MXDP_CUDA_CHECK(cudaProfilerStop());
    return r;
  }
  if (profile == Profile::Synced) MXDP_CUDA_CHECK(cudaProfilerStart());
  std::vector<double> times;
  for (int i = 0; i < steps; ++i) {
    const auto t0 = clock::now();
    step();
    take(true);
    times.push_back(secs(t0));
    r.peak = std::max(r.peak, used_bytes());
  }
  if (profile == Profile::Synced) {
    MXDP_CUDA_CHECK(cudaDeviceSynchronize());
    MXDP_CUDA_CHECK(cudaProfilerStop());
    return r;
  }
  const auto t0 = clock::now();
  const double submit = pipelined();
  const double window = secs(t0);
  MXDP_CUDA_CHECK(cudaDeviceSynchronize());
  r.peak = std::max(r.peak, used_bytes());
  std::sort(times.begin(), times.end());
  if (!times.empty()) {
    r.ms_synced = times[times.size() / 2] * 1e3;
    r.ms = window / steps * 1e3;
    r.host_ms = submit / steps * 1e3;
  }
  return r;
}

}  // namespace mxdp::bench
