// EngineOps on a CUDA device: device memory, the kernels of quant_cuda.h, and
// small kernels for the rest. Bitwise equal to the CPU ops for every operation
// but sum_squares, whose fixed reduction tree differs from the CPU's sequential
// sum (deterministic run to run on the same device, equal within rounding).
#pragma once

#include <cuda_runtime_api.h>

#include <memory>

#include "engine_ops.h"

namespace mxdp::cuda {

// Work is ordered on `stream` (a new non-blocking stream when null) of the
// current device.
std::unique_ptr<EngineOps> make_cuda_ops(cudaStream_t stream = nullptr);

}  // namespace mxdp::cuda
