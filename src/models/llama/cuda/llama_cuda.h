// The Llama family on a CUDA GPU (sm_90): the architecture, parameter list
// and init of llama_config.h, with bf16 activations and compute weights, fp32
// accumulation and statistics, cuBLASLt GEMMs, cuDNN grouped-query attention
// and own kernels for the rest (llama_kernels.h). docs/llama.md, "On the GPU".
#pragma once

#include <cuda_runtime_api.h>

#include <memory>

#include "models/llama/llama.h"

namespace mxdp::cuda {

struct LlamaCudaOptions {
  // Replay the work between two engine hook calls as CUDA graphs
  // (stream_graphs.h); bitwise the same results. MXDP_CUDA_GRAPHS=0 turns
  // them off for the models the runtime makes.
  bool cuda_graphs = true;
};

// Computes on `stream` (the engine ops' stream); weights, activations and the
// gradients it is handed all live in device memory of the current GPU.
std::unique_ptr<LlamaModel> make_llama(const LlamaConfig& cfg, cudaStream_t stream, const LlamaCudaOptions& opts = {});

// Instantiated CUDA graphs the GPU Llama holds (benchmarks); throws for another model.
int64_t llama_cuda_graphs(const LanguageModel& gpu_llama);

}  // namespace mxdp::cuda
