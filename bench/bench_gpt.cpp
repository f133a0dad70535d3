// GPT forward+backward on the CPU: time per step and tokens/s.
//
//   bench_gpt [--gtest-style benchmark flags]   e.g. --benchmark_filter=tiny
// Args: {B, T, OpenMP threads}. The `tiny` config is the CPU default used by
// the multi-rank tests (each rank one core), so threads=1 is the number that
// matters there.
#include <benchmark/benchmark.h>
#include <omp.h>

#include <vector>

#include "models/gpt2/gpt.h"

namespace {

class BenchHooks : public mxdp::ModelHooks {
 public:
  explicit BenchHooks(const mxdp::Model& m) {
    for (const auto& p : m.params()) grads_.emplace_back(size_t(p.numel()), 0.f);
  }
  void before_layer(int) override {}
  float* grad(int i) override { return grads_[size_t(i)].data(); }
  void after_layer_backward(int) override {}

 private:
  std::vector<std::vector<float>> grads_;
};

void run(benchmark::State& state, const char* config, bool backward) {
  const int B = int(state.range(0)), T = int(state.range(1)), threads = int(state.range(2));
  const int saved = omp_get_max_threads();
  omp_set_num_threads(threads);
  mxdp::Gpt model(mxdp::gpt_config(config));
  model.init_weights(1);
  const int V = model.config().vocab;
  std::vector<int32_t> in(size_t(B) * T), tg(size_t(B) * T);
  for (size_t i = 0; i < in.size(); ++i) in[i] = int32_t((i * 7919) % size_t(V)), tg[i] = int32_t((i * 104729 + 1) % size_t(V));
  BenchHooks hooks(model);
  const mxdp::Batch batch{in.data(), tg.data(), B, T};
  model.forward(batch, hooks);  // warm-up: allocates the activations
  if (backward) model.backward(hooks);
  for (auto _ : state) {
    float loss = model.forward(batch, hooks);
    benchmark::DoNotOptimize(loss);
    if (backward) model.backward(hooks);
  }
  state.SetItemsProcessed(state.iterations() * int64_t(B) * T);  // reported as tokens/s
  state.counters["params"] = double(model.num_parameters());
  omp_set_num_threads(saved);
}

void BM_tiny_fwd_bwd(benchmark::State& s) { run(s, "tiny", true); }
void BM_tiny_fwd(benchmark::State& s) { run(s, "tiny", false); }

}  // namespace

BENCHMARK(BM_tiny_fwd_bwd)->ArgNames({"B", "T", "threads"})->Args({8, 64, 1})->Args({8, 64, 2})
    ->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_tiny_fwd)->ArgNames({"B", "T", "threads"})->Args({8, 64, 1})->Args({8, 64, 2})
    ->Unit(benchmark::kMillisecond)->UseRealTime();

BENCHMARK_MAIN();
