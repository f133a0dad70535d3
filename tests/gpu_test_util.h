// What every single-process GPU test needs: skip cleanly (GTEST_SKIP, which
// ctest reports as skipped) when this machine has no usable CUDA device.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

namespace mxdp::gputest {

inline bool have_gpu() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky "no device" error
    return false;
  }
  return n > 0;
}

}  // namespace mxdp::gputest

#define REQUIRE_GPU()                                                                    \
  do {                                                                                   \
    if (!::mxdp::gputest::have_gpu()) GTEST_SKIP() << "no CUDA device present";          \
  } while (0)
