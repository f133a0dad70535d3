// CUDA error checking: every runtime call and every launch is checked, with
// file:line and the call that failed. Include only from CUDA-aware sources.
#pragma once

#include <cuda_runtime.h>

#include "util/check.h"

#define MXDP_CUDA_CHECK(call)                                                             \
  do {                                                                                    \
    cudaError_t mxdp_err_ = (call);                                                       \
    if (mxdp_err_ != cudaSuccess)                                                         \
      MXDP_FAIL("CUDA call failed: " #call ": ", cudaGetErrorName(mxdp_err_), ": ",       \
                cudaGetErrorString(mxdp_err_));                                           \
  } while (0)

// After a kernel launch: catches bad launch configurations at once.
#define MXDP_CUDA_CHECK_LAUNCH() MXDP_CUDA_CHECK(cudaGetLastError())
