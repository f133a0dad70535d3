// Device helpers of the NCCL backend (comm_nccl.cpp), built by nvcc.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "comm/comm.h"

namespace mxdp::comm_detail {

// Avg's second half on the GPU: buf[i] = buf[i] / n in the element type (for
// BF16: widen, divide in fp32, round to nearest even), the same arithmetic as
// divide_host on the CPU. Enqueued on stream; checked launch.
void launch_divide(void* buf, size_t count, DType t, int n, cudaStream_t stream);

}  // namespace mxdp::comm_detail
