// GPT-2 on a CUDA GPU (sm_90): the architecture, parameter list and init of
// gpt.h, with bf16 activations and compute weights, fp32 accumulation, cuBLASLt
// GEMMs, cuDNN fused attention and own kernels for the rest.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>

#include "models/gpt2/gpt.h"

namespace mxdp::cuda {

struct GptCudaOptions {
  // Replay the work between two engine hook calls as CUDA graphs
  // (stream_graphs.h); bitwise the same results. MXDP_CUDA_GRAPHS=0 turns
  // them off for the models the runtime makes.
  bool cuda_graphs = true;
};

// Computes on `stream` (the engine ops' stream); weights, activations and the
// gradients it is handed all live in device memory of the current GPU.
std::unique_ptr<GptModel> make_gpt(const GptConfig& cfg, cudaStream_t stream, const GptCudaOptions& opts = {});

// How the GPU GPT's segments ran so far (for tests and benchmarks).
struct GraphStats {
  int64_t launches = 0;  // graph launches
  int64_t eager = 0;     // segments run eagerly (first sight of a shape, graphs off)
  int64_t graphs = 0;    // instantiated graphs held
};
GraphStats graph_stats(const GptModel& gpu_gpt);

}  // namespace mxdp::cuda
