// GPT-2 on a CUDA GPU (sm_90): the architecture, parameter list and init of
// gpt.h, with bf16 activations and compute weights, fp32 accumulation, cuBLASLt
// GEMMs, cuDNN fused attention and own kernels for the rest.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>

#include "gpt.h"

namespace mxdp::cuda {

// Computes on `stream` (the engine ops' stream); weights, activations and the
// gradients it is handed all live in device memory of the current GPU.
std::unique_ptr<GptModel> make_gpt(const GptConfig& cfg, cudaStream_t stream);

}  // namespace mxdp::cuda
