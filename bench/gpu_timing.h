// Timing of one GPU operation for the kernel benchmarks (gpubench_fp8_linear,
// gpubench_act_quantize): the best of 3 windows of `reps` back-to-back calls
// after 3 warm-up calls, ms per call, measured with CUDA events on stream s.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <functional>

#include "util/cuda_check.h"

namespace mxdp::bench {

inline double best_window_ms(cudaStream_t s, int reps, const std::function<void()>& f) {
  for (int i = 0; i < 3; ++i) f();
  cudaEvent_t a, b;
  MXDP_CUDA_CHECK(cudaEventCreate(&a));
  MXDP_CUDA_CHECK(cudaEventCreate(&b));
  double best = 1e30;
  for (int w = 0; w < 3; ++w) {
    MXDP_CUDA_CHECK(cudaEventRecord(a, s));
    for (int i = 0; i < reps; ++i) f();
    MXDP_CUDA_CHECK(cudaEventRecord(b, s));
    MXDP_CUDA_CHECK(cudaEventSynchronize(b));
    float ms = 0;
    MXDP_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    best = std::min(best, double(ms) / reps);
  }
  MXDP_CUDA_CHECK(cudaEventDestroy(a));
  MXDP_CUDA_CHECK(cudaEventDestroy(b));
  return best;
}

}  // namespace mxdp::bench
