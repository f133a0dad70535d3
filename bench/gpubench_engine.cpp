// The data-parallel engine's own cost on GPUs, per optimizer step, for each
// gather format: a model with GPT-2's parameters in device memory but no
// compute, so what is timed is exactly the engine — param all-gather + unpack
// (dequantize into the weights), zeroing the grad buffer, reduce-scatter,
// grad norm, AdamW on the shard, staging (quantize) — with NCCL and the CUDA
// ops. Overlap has nothing to hide behind here, so this is the exposed cost.
//   NCCL_NVLS_ENABLE=0 mpirun -np 2 -x NCCL_NVLS_ENABLE ./build/bench/gpubench_engine [model] [steps]
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "comm/comm.h"
#include "engine/cuda/engine_ops_cuda.h"
#include "util/cuda_check.h"
#include "engine/engine.h"
#include "models/gpt2/gpt.h"

using namespace mxdp;

namespace {

// GPT-2's parameters on the device; forward and backward only walk the hooks.
class HollowGpt final : public Model {
 public:
  explicit HollowGpt(const GptConfig& c) : specs_(gpt_param_specs(c)), layers_(c.n_layer + 2) {
    for (const auto& p : specs_) {
      float* d = nullptr;
      MXDP_CUDA_CHECK(cudaMalloc(&d, p.numel() * sizeof(float)));
      w_.push_back(d);
    }
  }
  ~HollowGpt() override {
    for (float* d : w_) cudaFree(d);
  }
  const std::vector<ParamSpec>& params() const override { return specs_; }
  int num_layers() const override { return layers_; }
  float* weights(int p) override { return w_[p]; }
  void init_weights(uint64_t seed) override {
    // Deterministic, N(0, 0.02)-sized values; the engine only needs them finite.
    std::vector<float> h;
    for (size_t p = 0; p < w_.size(); ++p) {
      h.resize(specs_[p].numel());
      for (size_t i = 0; i < h.size(); ++i) h[i] = 0.02f * float(int((i * 2654435761u + seed + p) % 2001) - 1000) / 1000;
      MXDP_CUDA_CHECK(cudaMemcpy(w_[p], h.data(), h.size() * sizeof(float), cudaMemcpyHostToDevice));
    }
  }
  float forward(const Batch&, ModelHooks& hooks) override {
    for (int l = 0; l < layers_; ++l) hooks.before_layer(l);
    return 1.0f;
  }
  void forward_into(const Batch& b, ModelHooks& hooks, float* loss) override {  // loss: device memory
    const float l = forward(b, hooks);
    // Complete on return, so the engine's later work on its stream reads it (a
    // host wait in the forward, outside the optimizer step this benchmark times).
    MXDP_CUDA_CHECK(cudaMemcpy(loss, &l, sizeof l, cudaMemcpyHostToDevice));
  }
  void backward(ModelHooks& hooks) override {
    for (int l = layers_ - 1; l >= 0; --l) {
      for (size_t p = 0; p < specs_.size(); ++p)
        if (specs_[p].layer == l) hooks.grad(int(p));  // a real model would accumulate here
      hooks.after_layer_backward(l);
    }
  }

 private:
  std::vector<ParamSpec> specs_;
  int layers_;
  std::vector<float*> w_;
};

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::string model = argc > 1 ? argv[1] : "gpt2-350m";
    const int steps = argc > 2 ? std::atoi(argv[2]) : 20;
    Communicator::Options co;
    co.backend = Backend::Nccl;
    auto comm = make_communicator(co);
    auto ops = cuda::make_cuda_ops();
    const GptConfig cfg = gpt_config(model);
    HollowGpt m(cfg);
    m.init_weights(1);
    const int32_t tok = 0;
    const Batch b{&tok, &tok, 1, 1};
    struct Mode {
      const char* name;
      WeightFormat f;
      bool reuse;
    };
    const Mode modes[] = {{"bf16", WeightFormat::Bf16, false},
                          {"mxfp8", WeightFormat::Mxfp8, false},
                          {"mxfp8+reuse", WeightFormat::Mxfp8, true},
                          {"nvfp4", WeightFormat::Nvfp4, false}};
    if (comm->rank() == 0)
      std::printf("engine step on %d GPU%s, %s (%lld params), buckets of 40M, fp32 reduce-scatter, median of %d\n",
                  comm->size(), comm->size() > 1 ? "s" : "", model.c_str(), (long long)gpt_num_parameters(cfg), steps);
    if (comm->rank() == 0)
      std::printf("%-12s %12s %12s %12s %10s\n", "format", "step ms", "gather MB", "memory MB", "vs bf16");
    double bf16_ms = 0;
    for (const Mode& md : modes) {
      DpOptions o;
      o.weight_format = md.f;
      o.reuse_grad_buf = md.reuse;
      o.overlap_param_gather = false;  // nothing to overlap with: time every link
      o.bucket_size = 40'000'000;
      DataParallel dp(m, *comm, o, ops.get());
      std::vector<double> ms;
      for (int s = 0; s < steps + 3; ++s) {
        MXDP_CUDA_CHECK(cudaDeviceSynchronize());
        comm->barrier();
        const auto t0 = std::chrono::steady_clock::now();
        dp.train_step({b});
        dp.sync_weights();  // the unpack of the new weights, which the next forward would do
        MXDP_CUDA_CHECK(cudaDeviceSynchronize());
        if (s >= 3) ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      }
      std::sort(ms.begin(), ms.end());
      const double med = ms[ms.size() / 2];
      if (md.f == WeightFormat::Bf16) bf16_ms = med;
      const MemoryPlan a = dp.allocated();
      if (comm->rank() == 0)
        std::printf("%-12s %12.3f %12.1f %12.1f %9.2fx\n", md.name, med, a.gather_bytes / 1e6, a.total_bytes() / 1e6,
                    med / bf16_ms);
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpubench_engine: %s\n", e.what());
    return 1;
  }
}
