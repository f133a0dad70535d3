// The embedding table's gradient; see embedding.h. Moved here unchanged from
// the two models' kernel files, which each had this kernel and launch.
#include "models/cuda/embedding.h"

#include "models/cuda/model_kernels.cuh"
#include "util/cuda_check.h"

namespace mxdp::cuda {

namespace {

using device::ld;

// One block per (token segment, 256 channels).
__global__ void embedding_backward_kernel(float* dembed, const uint16_t* dx, const int32_t* order,
                                          const int32_t* seg_start, const int32_t* seg_token, int C) {
  const int seg = blockIdx.x;
  const int c = blockIdx.y * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float s = 0.f;
  for (int j = seg_start[seg]; j < seg_start[seg + 1]; ++j) s += ld(dx, int64_t(order[j]) * C + c);
  dembed[int64_t(seg_token[seg]) * C + c] += s;
}

}  // namespace

void embedding_backward(float* dembed, const uint16_t* dx, const int32_t* order, const int32_t* seg_start,
                        const int32_t* seg_token, int n_seg, int C, cudaStream_t s) {
  if (n_seg == 0) return;
  embedding_backward_kernel<<<dim3(n_seg, (C + 255) / 256), 256, 0, s>>>(dembed, dx, order, seg_start, seg_token, C);
  MXDP_CUDA_CHECK_LAUNCH();
}

}  // namespace mxdp::cuda
