// Writes what tests/gpu_torch_trajectory.py (GPT-2) and
// tests/gpu_llama_trajectory.py (the Llama family) need to hold a GPU model to
// PyTorch: the fp32 initial weights of a registered preset (in the order of
// its parameter list), 20 batches of the shipped corpus (bytes as token ids),
// and the train loss of each of 20 optimizer steps of mxdp on one GPU (bf16
// gather, constant lr 6e-4, clip 1.0, weight decay 0.1 on 2-D weights, AdamW
// 0.9/0.95/1e-8).
//   gpu_trajectory MODEL B T OUT_DIR
#include <cuda_runtime.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "models/registry.h"
#include "train/runtime.h"
#include "util/check.h"
#include "util/cuda_check.h"

using namespace mxdp;

int main(int argc, char** argv) {
  try {
    MXDP_CHECK(argc == 5, "usage: gpu_trajectory MODEL B T OUT_DIR");
    const ModelConfig mc = model_config(argv[1]);
    const int B = std::atoi(argv[2]), T = std::atoi(argv[3]), steps = 20;
    const std::string out = argv[4];
    std::ifstream in(std::string(MXDP_SOURCE_DIR) + "/data/kjv.txt", std::ios::binary);
    std::vector<char> text((std::istreambuf_iterator<char>(in)), {});
    MXDP_CHECK(text.size() > size_t(steps) * B * (T + 1), "corpus too small");
    auto comm = make_job_communicator(Device::Cuda, {});
    auto ops = make_engine_ops(Device::Cuda);
    auto model = make_model(Device::Cuda, mc, *ops);
    model->init_weights(1337);
    auto write = [&](const std::string& name, const void* p, size_t bytes) {
      std::FILE* f = std::fopen((out + "/" + name).c_str(), "wb");
      MXDP_CHECK(f, "cannot open ", out, "/", name);
      const bool ok = std::fwrite(p, 1, bytes, f) == bytes;
      MXDP_CHECK(std::fclose(f) == 0 && ok, "writing ", out, "/", name, " failed");
    };
    {
      std::vector<float> all;
      for (int p = 0; p < int(model->params().size()); ++p) {
        std::vector<float> h(size_t(model->params()[size_t(p)].numel()));
        MXDP_CUDA_CHECK(cudaMemcpy(h.data(), model->initial_weights(p), h.size() * 4, cudaMemcpyDeviceToHost));
        all.insert(all.end(), h.begin(), h.end());
      }
      write("init.f32", all.data(), all.size() * 4);
    }
    DpOptions o;
    o.weight_format = WeightFormat::Bf16;
    o.bucket_size = 40000000;
    o.lr = 6e-4;
    o.min_lr = 6e-4;
    o.warmup_steps = 0;
    o.lr_decay_steps = 0;
    o.clip_grad = 1.0;
    DataParallel engine(*model, *comm, o, ops.get());
    std::vector<int32_t> batches;
    std::string losses = "[";
    for (int s = 0; s < steps; ++s) {
      std::vector<int32_t> x(size_t(B) * T), y(x.size());
      for (int b = 0; b < B; ++b)
        for (int t = 0; t < T; ++t) {
          const size_t at = (size_t(s) * B + b) * (T + 1) + t;
          x[size_t(b) * T + t] = uint8_t(text[at]);
          y[size_t(b) * T + t] = uint8_t(text[at + 1]);
        }
      batches.insert(batches.end(), x.begin(), x.end());
      batches.insert(batches.end(), y.begin(), y.end());
      const StepResult r = engine.train_step({Batch{x.data(), y.data(), B, T}});
      losses += (s ? ", " : "") + std::to_string(r.loss);
    }
    write("batches.i32", batches.data(), batches.size() * 4);
    losses += "]\n";
    write("mxdp_losses.json", losses.data(), losses.size());
    std::printf("mxdp losses: %s", losses.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpu_trajectory: %s\n", e.what());
    return 1;
  }
  return 0;
}
